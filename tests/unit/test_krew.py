"""krew's manifest rules, encoded as a checker, and the release tooling in krew/ (unit level).

krew itself cannot be installed here, so :func:`krew_problems` encodes what krew and the
krew-index CI check (kubernetes-sigs/krew ``internal/index/validation/validate.go``
``ValidatePlugin``/``validatePlatform``/``validateSelector``, ``internal/installation/semver``,
``cmd/validate-krew-manifest/main.go``: supported os/arch pairs, no overlapping platforms, a
license among the installed files) plus the index reviewers' rules (``shortDescription`` at most
50 characters, ``description`` wrapped at 80 columns). The end-to-end test runs ``make krew``
and checks its output with the same function (tests/e2e/test_packaging.py).
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import re
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
API_VERSION = "krew.googlecontainertools.github.com/v1alpha2"
WINDOWS_RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}
#: os/arch pairs validate-krew-manifest accepts (cmd/validate-krew-manifest/main.go)
SUPPORTED_PLATFORMS = [("windows", a) for a in ("386", "amd64", "arm64")] + \
    [("linux", a) for a in ("386", "amd64", "arm", "arm64", "ppc64le")] + \
    [("darwin", a) for a in ("386", "amd64", "arm64")]
LICENSE_NAMES = {"license", "license.txt", "license.md", "copying", "copying.txt"}
# k8s.io/apimachinery/pkg/util/version ParseSemantic: 3 numeric parts, no leading zeros
SEMVER = re.compile(r"v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")


def load_tool(name: str) -> ModuleType:
    """Import ``krew/<name>.py`` (release tooling, not part of the package)."""
    spec = importlib.util.spec_from_file_location(f"krew_{name}", ROOT / "krew" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics: every matchLabels pair and every matchExpressions
    requirement (In, NotIn, Exists, DoesNotExist) must hold."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def krew_problems(manifest: Any, file_name: str) -> list[str]:
    """Every way ``manifest`` (a parsed plugin.yaml) breaks krew's validation, the index CI or
    the reviewers' rules; ``file_name`` is the manifest's file name (``kvreset.yaml`` in the index).
    An empty list means it passes."""
    out: list[str] = []
    if not isinstance(manifest, dict):
        return ["not a mapping"]
    if not file_name.endswith(".yaml"):
        out.append("file extension must be .yaml")
    if manifest.get("apiVersion") != API_VERSION:
        out.append(f"apiVersion must be {API_VERSION}")
    if manifest.get("kind") != "Plugin":
        out.append("kind must be Plugin")
    name = str((manifest.get("metadata") or {}).get("name") or "")
    if not re.fullmatch(r"[\w-]+", name, re.ASCII) or name.lower() in WINDOWS_RESERVED:
        out.append(f"invalid plugin name {name!r}")
    if name != file_name.removesuffix(".yaml"):
        out.append(f"metadata.name {name!r} must equal the file name {file_name!r} without .yaml")
    spec = manifest.get("spec") or {}
    short = spec.get("shortDescription")
    if not isinstance(short, str) or not short:
        out.append("shortDescription is required")
    else:
        if "\n" in short or "\r" in short:
            out.append("shortDescription must be one line")
        if len(short) > 50:
            out.append(f"shortDescription has {len(short)} characters, at most 50")
    description = spec.get("description")
    if not isinstance(description, str) or not description.strip():
        out.append("description is required")
    elif any(len(line) > 80 for line in description.splitlines()):
        out.append("description must be wrapped at 80 columns")
    if not SEMVER.fullmatch(str(spec.get("version") or "")):
        out.append(f"version {spec.get('version')!r} must be v + semver (v1.2.3)")
    platforms = spec.get("platforms") or []
    if not platforms:
        out.append("at least one platform is required")
    matched: dict[tuple[str, str], int] = {}
    for i, p in enumerate(platforms):
        if not p.get("uri"):
            out.append(f"platform {i}: uri is required")
        if not re.fullmatch(r"[a-f0-9]{64}", str(p.get("sha256") or "")):
            out.append(f"platform {i}: sha256 must match ^[a-f0-9]{{64}}$")
        if not p.get("bin"):
            out.append(f"platform {i}: bin is required")
        if "files" in p:
            files = p["files"]
            if not files or any(not f.get("from") or not f.get("to") for f in files):
                out.append(f"platform {i}: files must be absent or hold from and to")
        sel = p.get("selector")
        if not sel:
            out.append(f"platform {i}: selector is required")
            continue
        if "matchLabels" in sel and not sel["matchLabels"]:
            out.append(f"platform {i}: matchLabels specified but empty")
        if "matchExpressions" in sel and not sel["matchExpressions"]:
            out.append(f"platform {i}: matchExpressions specified but empty")
        keys = set(sel.get("matchLabels") or {}) | {e.get("key") for e in sel.get("matchExpressions") or []}
        if not keys or not keys <= {"os", "arch"}:
            out.append(f"platform {i}: selector keys must be os and/or arch, got {sorted(map(str, keys))}")
        hits = [pair for pair in SUPPORTED_PLATFORMS if selector_matches(sel, {"os": pair[0], "arch": pair[1]})]
        if not hits:
            out.append(f"platform {i}: selector matches no supported os/arch")
        for pair in hits:
            if pair in matched:
                out.append(f"platforms {matched[pair]} and {i} both match {pair[0]}/{pair[1]}")
            matched[pair] = i
    return out


def archive_problems(data: bytes, bin_name: str) -> list[str]:
    """What krew would refuse in a release ``.tar.gz``: not gzip (krew sniffs the content),
    no executable ``bin_name``, no license file among the extracted files."""
    if not data.startswith(b"\x1f\x8b"):
        return ["not a gzip archive"]
    out: list[str] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            members = {m.name: m for m in tar.getmembers()}
    except tarfile.TarError as exc:
        return [f"not a tar archive: {exc}"]
    binary = members.get(bin_name)
    if binary is None or not binary.isfile() or not binary.mode & 0o111:
        out.append(f"no executable {bin_name}")
    if not any(Path(n).name.lower() in LICENSE_NAMES or Path(n).name.lower().startswith("licenses") for n in members):
        out.append("no license file")
    return out


def good_manifest() -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION, "kind": "Plugin", "metadata": {"name": "kvreset"},
        "spec": {"version": "v0.1.0", "homepage": "https://example.org/kvreset",
                 "shortDescription": "Empty the KV caches of vLLM servers",
                 "description": "Empties every KV cache tier.\n",
                 "platforms": [{"selector": {"matchExpressions": [
                     {"key": "os", "operator": "In", "values": ["darwin", "linux"]}]},
                     "uri": "https://example.org/kubectl-kvreset.tar.gz", "sha256": "a" * 64,
                     "bin": "kubectl-kvreset"}]},
    }


def test_good_manifest_passes() -> None:
    assert krew_problems(good_manifest(), "kvreset.yaml") == []


@pytest.mark.parametrize("path,value,problem", [
    (("spec", "platforms", 0, "sha256"), "A" * 64, "sha256 must match"),   # the docs' uppercase sample fails
    (("spec", "version"), "0.1.0", "must be v + semver"),
    (("spec", "version"), "v0.1", "must be v + semver"),
    (("spec", "version"), "v01.1.0", "must be v + semver"),
    (("spec", "shortDescription"), "x" * 51, "at most 50"),
    (("spec", "shortDescription"), "two\nlines", "one line"),
    (("spec", "description"), "y" * 81, "80 columns"),
    (("metadata", "name"), "con", "invalid plugin name"),
    (("metadata", "name"), "kv.reset", "invalid plugin name"),
    (("kind",), "plugin", "kind must be Plugin"),
    (("spec", "platforms", 0, "selector"), {"matchLabels": {"os": "linux", "cpu": "x"}}, "selector keys"),
    (("spec", "platforms", 0, "selector"), {"matchLabels": {}}, "specified but empty"),
    (("spec", "platforms", 0, "selector"), {"matchLabels": {"os": "plan9"}}, "matches no supported"),
    (("spec", "platforms", 0, "files"), [], "files must be absent"),
    (("spec", "platforms", 0, "bin"), "", "bin is required"),
])
def test_each_rule_rejects(path: tuple[Any, ...], value: Any, problem: str) -> None:
    doc = good_manifest()
    node: Any = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    problems = krew_problems(doc, "kvreset.yaml")
    assert any(problem in p for p in problems), problems


def test_overlapping_platforms_and_file_name_are_rejected() -> None:
    doc = good_manifest()
    doc["spec"]["platforms"].append({**doc["spec"]["platforms"][0],
                                     "selector": {"matchLabels": {"os": "linux", "arch": "amd64"}}})
    assert any("both match linux/amd64" in p for p in krew_problems(doc, "kvreset.yaml"))
    assert any("must equal the file name" in p for p in krew_problems(good_manifest(), "other.yaml"))


def committed_manifest() -> dict[str, Any]:
    path = ROOT / "plugin.yaml"
    assert path.is_file(), "plugin.yaml is generated by `make krew` and committed"
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def test_committed_plugin_yaml_passes_krew_rules() -> None:
    doc = committed_manifest()
    # in krew-index the file is plugins/kvreset.yaml: its name must be the plugin's
    assert krew_problems(doc, "kvreset.yaml") == []
    version = load_tool("build").package_version(ROOT / "kubectl_kvreset" / "__init__.py")
    assert doc["spec"]["version"] == f"v{version}"
    platform = doc["spec"]["platforms"][0]
    assert platform["uri"].endswith(f"/v{version}/kubectl-kvreset.tar.gz")
    assert platform["bin"] == "kubectl-kvreset" and "files" not in platform  # every file, LICENSE included
    covered = {pair for pair in SUPPORTED_PLATFORMS
               if selector_matches(platform["selector"], {"os": pair[0], "arch": pair[1]})}
    assert {os_ for os_, _ in covered} == {"linux", "darwin"}
    assert "python3" in doc["spec"]["caveats"] and "kubectl_complete-kvreset" in doc["spec"]["caveats"]


def test_render_manifest_refuses_a_bad_sha_and_fills_every_field() -> None:
    build = load_tool("build")
    template = (ROOT / "krew" / "plugin.yaml.in").read_text()
    with pytest.raises(ValueError):
        build.render_manifest(template, version="0.1.0", homepage="h", uri="u", sha256="A" * 64)
    text = build.render_manifest(template, version="1.2.3", homepage="https://example.org/x",
                                 uri="https://example.org/x.tar.gz", sha256="0" * 64)
    doc = yaml.safe_load(text)
    assert doc["spec"]["version"] == "v1.2.3" and doc["spec"]["platforms"][0]["sha256"] == "0" * 64
    assert "$" not in text.replace("$(", "").replace("${KREW_ROOT", "").replace("$HOME", "")
    assert krew_problems(doc, "kvreset.yaml") == []


def test_archive_is_reproducible_and_krew_ready(tmp_path: Path) -> None:
    build = load_tool("build")
    app = tmp_path / "app"
    app.write_bytes(b"#!/usr/bin/env python3\nPK")
    lic = tmp_path / "LICENSE"
    lic.write_text("license text")
    members = [("kubectl-kvreset", app, 0o755), ("LICENSE", lic, 0o644)]
    first = build.build_archive(tmp_path / "a.tar.gz", members, mtime=1767225600)
    app.touch()  # a new file mtime changes nothing
    second = build.build_archive(tmp_path / "b.tar.gz", list(reversed(members)), mtime=1767225600)
    assert first == second and len(first) == 64
    data = (tmp_path / "a.tar.gz").read_bytes()
    assert data[4:8] == (1767225600).to_bytes(4, "little")  # gzip header time, no file name flag
    assert data[3] & 0x08 == 0
    assert archive_problems(data, "kubectl-kvreset") == []
    with tarfile.open(tmp_path / "a.tar.gz") as tar:
        infos = tar.getmembers()
    assert [m.name for m in infos] == ["LICENSE", "kubectl-kvreset"]
    assert all(m.uid == 0 and m.gid == 0 and m.mtime == 1767225600 for m in infos)
    assert archive_problems(gzip.compress(b""), "kubectl-kvreset") != []


def test_replace_main_keeps_every_other_entry(tmp_path: Path) -> None:
    build = load_tool("build")
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("site-packages/a.py", (1980, 1, 1, 0, 0, 0)), b"A = 1\n")
        z.writestr(zipfile.ZipInfo("__main__.py", (1980, 1, 1, 0, 0, 0)), b"import _bootstrap\n")
    src = tmp_path / "src"
    src.write_bytes(b"#!/usr/bin/env python3\n" + raw.getvalue())
    build.replace_main(src, tmp_path / "dst", b"print('guard')\n")
    build.replace_main(src, tmp_path / "dst2", b"print('guard')\n")
    out = (tmp_path / "dst").read_bytes()
    assert out == (tmp_path / "dst2").read_bytes() and out.startswith(b"#!/usr/bin/env python3\n")
    assert (tmp_path / "dst").stat().st_mode & 0o777 == 0o755
    with zipfile.ZipFile(tmp_path / "dst") as z:
        assert z.namelist() == ["site-packages/a.py", "__main__.py"]
        assert z.read("__main__.py") == b"print('guard')\n" and z.read("site-packages/a.py") == b"A = 1\n"


def test_bytecode_ships_beside_each_module_as_an_unchecked_hash_pyc(tmp_path: Path) -> None:
    import marshal
    import subprocess
    import sys

    build = load_tool("build")
    source = b"X = {'a', 'b'}\nY = 2\n"
    [(name, pyc)] = build.bytecode_entries("site-packages/pkg/mod.py", source)
    assert name == f"site-packages/pkg/__pycache__/mod.{sys.implementation.cache_tag}.pyc"
    assert pyc[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(pyc[4:8], "little") == 0b01  # hash-based, not checked against the source
    assert pyc[8:16] == importlib.util.source_hash(source)
    ns: dict[str, Any] = {}
    exec(marshal.loads(pyc[16:]), ns)
    assert ns["Y"] == 2 and ns["X"] == {"a", "b"}
    # modules run from the zip itself get zipimport's name; __main__.py (the version guard) and
    # the client's generated APIs and models get none
    assert [n for n, _ in build.bytecode_entries("_kvreset_boot.py", b"A = 1\n")] == ["_kvreset_boot.pyc"]
    assert build.bytecode_entries("__main__.py", b"A = 1\n") == []
    assert build.bytecode_entries("site-packages/kubernetes/client/models/v1_pod.py", b"A = 1\n") == []
    assert build.bytecode_entries("site-packages/bin/preamble.py", b"A = 1\n") == []
    assert build.bytecode_entries("site-packages/pkg/data.txt", b"A") == []
    # the same source compiles to the same bytes in another process with another hash seed
    # (the guard command fixes the seed itself)
    raw = io.BytesIO()
    with zipfile.ZipFile(raw, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("site-packages/pkg/mod.py", (1980, 1, 1, 0, 0, 0)), source)
        z.writestr(zipfile.ZipInfo("__main__.py", (1980, 1, 1, 0, 0, 0)), b"import _bootstrap\n")
    src = tmp_path / "src"
    src.write_bytes(b"#!/usr/bin/env python3\n" + raw.getvalue())
    outs = []
    for seed in ("1", "2"):
        dst = tmp_path / f"dst{seed}"
        done = subprocess.run([sys.executable, str(ROOT / "krew" / "build.py"), "guard", str(src), str(dst)],
                              env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr
        outs.append(dst.read_bytes())
    assert outs[0] == outs[1]
    with zipfile.ZipFile(tmp_path / "dst1") as z:
        assert f"site-packages/pkg/__pycache__/mod.{sys.implementation.cache_tag}.pyc" in z.namelist()
        assert "_kvreset_boot.pyc" in z.namelist()


def test_prune_removes_what_the_zipapp_never_imports_and_its_record_lines(tmp_path: Path) -> None:
    build = load_tool("build")
    site = tmp_path / "site"
    for rel in ("kubernetes/aio/client/api_client.py", "kubernetes/config/kube_config.py",
                "kubernetes/config/kube_config_test.py", "websocket/tests/test_url.py", "websocket/_url.py",
                "kubernetes/dynamic/test_client.py", "kubernetes/dynamic/client.py", "tzdata/zoneinfo/UTC",
                "tzdata-2026.6.dist-info/METADATA"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text("A = 1\n")
    record = site / "kubernetes-1.0.dist-info" / "RECORD"
    record.parent.mkdir()
    record.write_text("kubernetes/aio/client/api_client.py,sha256=x,6\nkubernetes/config/kube_config.py,sha256=y,6\n"
                      "kubernetes/config/kube_config_test.py,sha256=z,6\n")
    removed = build.prune_unused(site)
    assert removed == ["kubernetes/aio/client/api_client.py", "kubernetes/config/kube_config_test.py",
                       "kubernetes/dynamic/test_client.py", "tzdata-2026.6.dist-info/METADATA", "tzdata/zoneinfo/UTC",
                       "websocket/tests/test_url.py"]
    assert not (site / "tzdata").exists()
    assert not (site / "kubernetes" / "aio").exists() and not (site / "websocket" / "tests").exists()
    assert (site / "kubernetes/config/kube_config.py").exists() and (site / "websocket/_url.py").exists()
    assert (site / "kubernetes/dynamic/client.py").exists()
    assert record.read_text() == "kubernetes/config/kube_config.py,sha256=y,6\n"


def test_preamble_removes_only_this_apps_other_builds(tmp_path: Path) -> None:
    preamble = load_tool("preamble")
    current = tmp_path / ("kubectl-kvreset_" + "c" * 64)
    (current / "site-packages").mkdir(parents=True)
    stale = tmp_path / ("kubectl-kvreset_" + "a" * 64)
    (stale / "site-packages").mkdir(parents=True)
    (tmp_path / f".{stale.name}_lock").touch()
    fresh_tmp = tmp_path / ("kubectl-kvreset_" + "b" * 64 + ".tmp")
    fresh_tmp.mkdir()
    other = tmp_path / ("otherapp_" + "a" * 64)
    other.mkdir()
    lookalike = tmp_path / "kubectl-kvreset_notahash"
    lookalike.mkdir()
    assert preamble.remove_stale(current, keep=1) == []  # unmarked and recent: may be a running older build
    # an interrupted extraction's .tmp is removed once it is older than the grace period
    assert preamble.remove_stale(current, keep=1, now=fresh_tmp.stat().st_mtime + 7200) == [fresh_tmp]
    removed = preamble.remove_stale(current, keep=1, now=stale.stat().st_mtime + 2 * 86400)
    assert removed == [stale] and not stale.exists() and not (tmp_path / f".{stale.name}_lock").exists()
    assert current.exists() and other.exists() and lookalike.exists()


def test_preamble_never_removes_an_extraction_in_use(tmp_path: Path) -> None:
    preamble = load_tool("preamble")
    current = tmp_path / ("kubectl-kvreset_" + "c" * 64)
    running = tmp_path / ("kubectl-kvreset_" + "a" * 64)
    idle = tmp_path / ("kubectl-kvreset_" + "b" * 64)
    for d in (current, running, idle):
        (d / "site-packages").mkdir(parents=True)
    fd = preamble.hold_in_use(running)  # a process still running the older build
    assert fd is not None
    (idle / preamble.IN_USE).touch()  # marked, but nobody holds it
    try:
        assert preamble.remove_stale(current, keep=1) == [idle]
        assert running.exists() and not idle.exists()
    finally:
        import os

        os.close(fd)
    assert preamble.remove_stale(current, keep=1) == [running]


def test_preamble_keeps_the_most_recent_builds(tmp_path: Path) -> None:
    import os

    preamble = load_tool("preamble")
    current = tmp_path / ("kubectl-kvreset_" + "c" * 64)
    builds = [tmp_path / ("kubectl-kvreset_" + ch * 64) for ch in "1234"]
    for i, d in enumerate([current, *builds]):
        (d / "site-packages").mkdir(parents=True)
        (d / preamble.IN_USE).touch()
        os.utime(d / preamble.IN_USE, (1000.0 + i, 1000.0 + i))  # builds[3] used last
    # an interrupted removal (renamed aside) is finished
    aside = tmp_path / f"{preamble.TRASH}kubectl-kvreset_{'9' * 64}.123"
    (aside / "site-packages").mkdir(parents=True)
    removed = preamble.remove_stale(current)  # KEEP = 3: this one and the two used last
    assert sorted(removed) == sorted(builds[:2]) and not aside.exists()
    assert all(d.exists() for d in (current, builds[2], builds[3]))
    assert preamble.KEEP == 3


def test_preamble_cleans_only_with_the_gate_held_exclusively(tmp_path: Path) -> None:
    import fcntl
    import os

    preamble = load_tool("preamble")
    gate = tmp_path / ".kubectl-kvreset.gate"
    other = os.open(gate, os.O_CREAT | os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_SH)  # another run between shiv's check and its in-use mark
    try:
        assert preamble.exclusive_gate(gate) is None
    finally:
        os.close(other)
    fd = preamble.exclusive_gate(gate)
    assert fd is not None
    os.close(fd)


def test_boot_chooses_shiv_root_home_or_a_private_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    boot = load_tool("boot")
    assert boot.choose_root({"SHIV_ROOT": str(tmp_path / "r")}) == (tmp_path / "r", None)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    assert boot.choose_root({}) == (home / ".shiv", None)
    monkeypatch.setenv("HOME", str(tmp_path / "missing"))
    monkeypatch.setattr(boot.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    root, notice = boot.choose_root({})
    assert root == tmp_path / "tmp" / f"kubectl-kvreset-{os.getuid()}" and notice and "\n" not in notice
    assert (root.stat().st_mode & 0o777) == 0o700 and not (tmp_path / "missing").exists()
    root.chmod(0o755)
    assert "open to other users" in (boot.secure_private_dir(root) or "")
    root.rmdir()
    root.symlink_to(tmp_path)
    assert "symlink" in (boot.secure_private_dir(root) or "")
    with pytest.raises(SystemExit):
        boot.choose_root({})


def test_zipapp_main_guard_is_old_python_syntax() -> None:
    text = (ROOT / "krew" / "zipapp_main.py").read_text()
    compile(text, "__main__.py", "exec")
    # no f-strings, annotations or walrus: it must parse on the Pythons it turns away
    assert 'f"' not in text and "f'" not in text and ":=" not in text and "->" not in text
    assert text.index("sys.version_info < (3, 10)") < text.index("import _kvreset_boot") < \
        text.index("import _bootstrap")
