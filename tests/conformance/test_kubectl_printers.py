"""kubectl's output flags on the plugin, compared with real kubectl on the same flags.

The plugin's rows (``detect -o json`` on the llm-d P/D fixture) are loaded into a second
simulator as objects of their own kind (``apiVersion: rows.kvreset.test/v1``, one object per
row, every field of the row at the top level), so ``kubectl get <kind> -o jsonpath=T`` and
``kubectl kvreset detect -o jsonpath=T`` read the same data through the same template: their
output must be byte for byte the same. ``-o name`` is compared with ``kubectl get pods -o name``
for the same pods; ``--dry-run=client``, a bad ``-o`` and a bad template with kubectl's answers.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.simctl import SimCluster

from .checks import Ground, Kubectl
from .conftest import NS, fixture_file

TEMPLATES = [
    "{.items[*].pod}",
    "{.items[*].ports}",
    '{range .items[*]}{.pod}{"\\t"}{.role}{"\\t"}{.ports}{"\\n"}{end}',
    "{.items[0].tiers}",
    "{.items[-1:].owner}",
    '{.items[?(@.role=="decode")].pod}',
    "{.items[*].no_such_field}",
    "pods: {.items[*].pod} (end)",
    "{.items[*]['pod','role']}",
    "{..container}",
]
COLUMNS = [
    "POD:.pod,ROLE:.role",
    "POD:.pod,RESULT:.result",
    "POD:.pod,PORTS:.ports,TIERS:.tiers",
    "NAME:{.pod},OWNER:owner,VERSION:$.version",
]


@pytest.fixture(scope="module")
def pd(ground_factory: Callable[..., Ground]) -> Ground:
    return ground_factory([fixture_file("02")])


@pytest.fixture(scope="module")
def mirror(pd: Ground, tmp_path_factory: pytest.TempPathFactory) -> Kubectl:
    """Real kubectl bound to a simulator that holds the plugin's ``detect`` rows as objects."""
    rows = pd.detect()
    assert rows
    objects: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        objects.append({**row, "apiVersion": "rows.kvreset.test/v1", "kind": row["kind"],
                        "metadata": {"name": f"r{i:03d}", "namespace": NS}})
    tmp = tmp_path_factory.mktemp("rows")
    manifest = tmp / "rows.yaml"
    manifest.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    cluster = SimCluster([manifest], namespace=NS, ready_delay=0.05)
    try:
        yield Kubectl(pd.kubectl.exe, cluster.kubeconfig, NS, tmp / "cache")
    finally:
        cluster.stop()


def _plugin(pd: Ground, *args: str) -> subprocess.CompletedProcess[str]:
    return pd.cluster.run(*args)


@pytest.mark.parametrize("template", TEMPLATES)
def test_jsonpath_prints_what_kubectl_prints(pd: Ground, mirror: Kubectl, template: str) -> None:
    want = mirror.ok("get", "vllmpods", "-o", f"jsonpath={template}")
    done = _plugin(pd, "detect", "-n", NS, "-o", f"jsonpath={template}")
    assert done.returncode == 0, done.stderr
    assert done.stdout == want, (done.stdout, want)


@pytest.mark.parametrize("no_headers", [False, True], ids=["headers", "no-headers"])
@pytest.mark.parametrize("spec", COLUMNS)
def test_custom_columns_print_what_kubectl_prints(pd: Ground, mirror: Kubectl, spec: str, no_headers: bool) -> None:
    extra = ["--no-headers"] if no_headers else []
    want = mirror.ok("get", "vllmpods", "-o", f"custom-columns={spec}", *extra)
    done = _plugin(pd, "detect", "-n", NS, "-o", f"custom-columns={spec}", *extra)
    assert done.returncode == 0, done.stderr
    assert done.stdout == want, (done.stdout, want)


def test_columns_file_and_jsonpath_file(pd: Ground, mirror: Kubectl, tmp_path: Path) -> None:
    columns = tmp_path / "cols.txt"
    columns.write_text("POD ROLE\n.pod .role\n")
    template = tmp_path / "t.txt"
    template.write_text("{.items[*].owner}")
    for fmt in (f"custom-columns-file={columns}", f"jsonpath-file={template}"):
        want = mirror.ok("get", "vllmpods", "-o", fmt)
        done = _plugin(pd, "detect", "-n", NS, "-o", fmt)
        assert done.returncode == 0 and done.stdout == want, (fmt, done.stdout, want, done.stderr)


def test_no_headers_drops_only_the_header_line(pd: Ground) -> None:
    with_headers = _plugin(pd, "detect", "-n", NS)
    without = _plugin(pd, "detect", "-n", NS, "--no-headers")
    assert with_headers.returncode == without.returncode == 0, without.stderr
    assert with_headers.stdout.splitlines()[0].startswith("POD")
    assert without.stdout.splitlines() == with_headers.stdout.splitlines()[1:]


def test_name_lists_the_pods_as_kubectl_get_pods_does(pd: Ground) -> None:
    want = pd.kubectl.ok("get", "pods", "-l", "llm-d.ai/role", "-o", "name").split()
    done = _plugin(pd, "detect", "-n", NS, "-o", "name")
    assert done.returncode == 0, done.stderr
    got = done.stdout.split()
    assert sorted(got) == sorted(want) and len(set(got)) == len(got), (got, want)
    # the names feed kubectl itself, as in `kubectl kvreset detect -o name | xargs kubectl get`
    again = pd.kubectl.ok("get", *got, "-o", "name").split()
    assert again == got


def test_dry_run_values_as_kubectl_reads_them(pd: Ground) -> None:
    bare = _plugin(pd, "clear", "-n", NS, "--all", "--dry-run", "-o", "json")
    client = _plugin(pd, "clear", "-n", NS, "--all", "--dry-run=client", "-o", "json")
    assert bare.returncode == client.returncode and bare.returncode in (0, 1, 3), client.stderr
    assert json.loads(bare.stdout) == json.loads(client.stdout)
    assert all(r["kind"] in ("PlannedReset", "StoreClear") for r in json.loads(client.stdout)), client.stdout
    # a bare --dry-run never takes the next word as its value (kubectl's NoOptDefVal)
    owner = json.loads(client.stdout)[0]["pod"]
    one = _plugin(pd, "clear", "-n", NS, "--dry-run", f"pod/{owner}", "-o", "json")
    assert one.returncode in (0, 1, 3) and {r.get("pod") for r in json.loads(one.stdout)} <= {owner, None}, one.stderr
    # kubectl refuses an unknown value with the same words
    kubectl = pd.kubectl.run("create", "configmap", "x", "--dry-run=bogus")
    ours = _plugin(pd, "clear", "-n", NS, "--all", "--dry-run=bogus")
    assert kubectl.returncode != 0 and ours.returncode == 2
    assert 'Invalid dry-run value (bogus). Must be "none"' in kubectl.stderr
    assert 'Invalid dry-run value (bogus). Must be "none"' in ours.stderr and ours.stderr.startswith("error: "), \
        ours.stderr
    # and a dry run changes nothing: the pods answered no reset
    for cmd in (["restart", "--all"], ["devmode", "--enable", "--all"]):
        done = _plugin(pd, *cmd, "-n", NS, "--dry-run=client", "-o", "json")
        assert done.returncode == 0, (cmd, done.stderr)
        rows = json.loads(done.stdout)
        assert rows and all(r["result"] in ("planned", "unchanged", "would enable") for r in rows), rows
        assert 'dry run (nothing changed) on context "' in done.stderr, done.stderr
    assert not [k for k, n in pd.cluster.state()["api_requests"].items() if k.startswith("patch") and n]


def test_bad_output_values_get_kubectl_words(pd: Ground) -> None:
    kubectl = pd.kubectl.run("get", "pods", "-o", "bogus")
    ours = _plugin(pd, "detect", "-n", NS, "-o", "bogus")
    prefix = 'error: unable to match a printer suitable for the output format "bogus", allowed formats are: '
    assert kubectl.stderr.startswith(prefix) and ours.stderr.startswith(prefix), (kubectl.stderr, ours.stderr)
    assert ours.returncode == 2
    for template in ("{.items[*].pod", "{.items[*]", "{end}", "jsonpath=", "custom-columns=", "custom-columns=POD"):
        fmt = template if "=" in template else f"jsonpath={template}"
        kubectl = pd.kubectl.run("get", "pods", "-o", fmt)
        ours = _plugin(pd, "detect", "-n", NS, "-o", fmt)
        assert kubectl.returncode != 0 and ours.returncode == 2, (template, ours.stderr)
        # kubectl's line may go on with debugging details after the reason
        assert kubectl.stderr.splitlines()[0].startswith(ours.stderr.splitlines()[0]), (ours.stderr, kubectl.stderr)
        assert ours.stderr.startswith("error: ") and "Traceback" not in ours.stderr
    # a template kubectl runs although its range is never ended runs here too
    fine = _plugin(pd, "detect", "-n", NS, "-o", "jsonpath={range .items[*]}{.pod}")
    assert fine.returncode == 0 and fine.stdout == "".join(r["pod"] for r in pd.detect()), fine.stderr


def test_mistyped_command_gets_a_suggestion_and_one_error_prefix(pd: Ground) -> None:
    done = _plugin(pd, "detcet", "-n", NS)
    assert done.returncode == 2
    assert done.stderr.startswith('error: unknown command "detcet" for "kubectl')
    assert "Did you mean this?\n\tdetect\n" in done.stderr, done.stderr
    bad = _plugin(pd, "clear", "--no-such-flag")
    assert bad.returncode == 2 and bad.stderr.startswith("error: "), bad.stderr
    assert "Error:" not in bad.stderr and "Usage:" not in bad.stderr, bad.stderr
