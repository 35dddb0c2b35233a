"""Both seams end to end: on a temporary copy of the package a toy engine is added (one module in
``engines/`` plus its import and its line in ``ENGINES``) and a toy store kind (one module in
``stores/kinds/`` plus its import and its line in ``stores/registry.py``), and ``clear`` run from
that copy (``python -m kubectl_kvreset``) against the simulator uses them: the simulator's toy
server (``toy-serve``, tests/sim/faketoy.py) gets the toy engine's reset route and goes cold, the
toy store (``toy-kv``) its kind's clear and counts 0, and the rows name engine ``toy`` and store
``toykv``. A toy server that stays busy gives a row that is not ``emptied``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.manifests import build
from tests.simctl import SimCluster

ROOT = Path(__file__).resolve().parents[2]
NS = "toyns"
STORE_URL = f"toykv://toy-store.{NS}:7777"

TOY_ENGINE = '''"""A toy engine: ``toy-serve --port N [--kv-store toykv://HOST:PORT]``; ``POST /toy/reset``
empties its prefix cache (``{"emptied": true}``; ``{"busy": true}`` while requests run)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from ..tiers import KVLayout, Tier, TierKind
from .base import ConfigReader, Engine, ResetAnswer, ResetOutcome, ServeConfig

STORE = "ToyKV"


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


class ToyEngine(Engine):
    """The toy server: one port, its GPU tier and the toy store it names, one reset route."""

    name = "toy"
    version_route = "/toy/version"
    reset_route = "/toy/reset"

    def server_config(self, container: Mapping[str, Any], env: Mapping[str, str],
                      config_reader: ConfigReader | None = None) -> ServeConfig | None:
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        if not argv or argv[0] != "toy-serve":
            return None
        store = _flag(argv, "--kv-store")
        kv = {"kv_connector": STORE, "kv_connector_extra_config": {"url": store}} if store else None
        return ServeConfig(argv=tuple(argv), entrypoint="toy-serve", model=None, served_model_name=None,
                           api_ports=(int(_flag(argv, "--port") or 8000),), scheme="http", kv_transfer_config=kv,
                           kv_offloading_size_gib=None, kv_offloading_backend=None, data_parallel_size_local=None,
                           config_file=None, unresolved_vars=(), notes=())

    def kv_layout(self, config: ServeConfig, env: Mapping[str, str]) -> KVLayout:
        gpu = Tier(TierKind.GPU, None, None)
        if config.kv_transfer_config is None:
            return KVLayout((), (gpu,), None)
        url = config.kv_transfer_config["kv_connector_extra_config"]["url"]
        return KVLayout((STORE,), (gpu, Tier(TierKind.SHARED, STORE, None, store="toykv", endpoint=url)), None)

    def read_version(self, body: bytes) -> str | None:
        return body.decode("utf-8", "replace").strip() or None

    def release(self, version: str | None) -> Version | None:
        try:
            return Version(version) if version else None
        except InvalidVersion:
            return None

    def read_reset_answer(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ResetAnswer:
        try:
            doc = json.loads(body) if status == 200 else {}
        except ValueError:
            doc = {}
        if isinstance(doc, dict) and doc.get("emptied") is True:
            return ResetAnswer(ResetOutcome.CLEARED, "toy: emptied", False)
        if isinstance(doc, dict) and doc.get("busy") is True:
            return ResetAnswer(ResetOutcome.BUSY, "toy: busy", True)
        return ResetAnswer(ResetOutcome.UNEXPECTED, f"toy answered {status}", False)
'''

TOY_KIND = '''"""A toy store: named by a ``ToyKV`` connector's ``url`` (``toykv://host[:7777]``), emptied
store-wide by ``POST /toy/clear`` (``{"removed": N}``), counted by ``GET /toy/count``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..records import StoreResult, StoreUse
from .base import AddressReader, Kind, KindName, Reach

if TYPE_CHECKING:
    from ..address import Address
    from ..records import Endpoint, FoundStore, StoreCall


class ToyKVError(Exception):
    """The toy store answered something else than 200 and a JSON count."""


def _count(http, path, method="GET"):  # type: ignore[no-untyped-def]
    status, body = http(method, path, ())
    if status != 200:
        raise ToyKVError(f"{method} {path} answered {status}")
    return int(json.loads(body)["removed" if method == "POST" else "count"])


class ToyKV(Kind):
    """The toy store: ``toykv://host[:7777]``, cleared store-wide on its own port."""

    name = KindName("toykv")
    connectors = ("ToyKV",)
    schemes: Mapping[str, int | None] = {"toykv": 7777}
    clears = True
    errors = (ToyKVError,)

    def connector_use(self, extra: Mapping[str, Any], env: Mapping[str, str], files: Mapping[str, Any],
                      read: AddressReader) -> StoreUse:
        notes: list[str] = []
        addr = read(extra.get("url") or "", "--kv-store", notes)
        return StoreUse(self.name, addr, "store", source="--kv-store", notes=tuple(notes))

    def method(self, store: FoundStore, model: str | None) -> str:
        return "POST /toy/clear"

    def clear(self, reach: Reach, call: StoreCall, ep: Endpoint, dry_run: bool) -> StoreResult:
        port = ep.port or 7777
        http = reach.http(ep, port)
        via = f"{ep.namespace}/{ep.name}:{port}"
        before = _count(http, "/toy/count")
        if dry_run:
            return StoreResult("planned", before, before, via=via)
        _count(http, "/toy/clear", "POST")
        after = _count(http, "/toy/count")
        return StoreResult("emptied" if after == 0 else "left", before, after, via=via)

    def remedy(self, address: Address | None, model: str | None = None) -> str:
        return f"POST http://{self.host(address)}:7777/toy/clear"
'''


def _add(path: Path, after: str, line: str) -> None:
    """Insert ``line`` after the only line ``after`` of the file at ``path``."""
    text = path.read_text()
    assert text.count(after) == 1, (path, after)
    path.write_text(text.replace(after, after + line))


def toy_tree(tmp_path: Path) -> Path:
    """A copy of the package with the toy engine and the toy store kind added, each as one new
    module plus its import and its registry line (asserted: nothing else changes)."""
    tree = tmp_path / "tree"
    pkg = tree / "kubectl_kvreset"
    shutil.copytree(ROOT / "kubectl_kvreset", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    engines, registry = pkg / "engines" / "__init__.py", pkg / "stores" / "registry.py"
    before = {p: p.read_text().splitlines() for p in (engines, registry)}
    (pkg / "engines" / "toy.py").write_text(TOY_ENGINE)
    _add(engines, "from .base import ConfigReader, Engine, ServeConfig, ServerCommandError\n",
         "from .toy import ToyEngine\n")
    _add(engines, "    VllmEngine(),\n", "    ToyEngine(),\n")
    (pkg / "stores" / "kinds" / "toykv.py").write_text(TOY_KIND)
    _add(registry, "from .kinds.redis import Redis, Valkey\n", "from .kinds.toykv import ToyKV\n")
    _add(registry, "    InfiniStore(),\n", "    ToyKV(),\n")
    for path, lines in before.items():
        added = [line for line in path.read_text().splitlines() if line not in lines]
        assert len(added) == 2 and len(path.read_text().splitlines()) == len(lines) + 2, added
    return tree


def _manifest() -> str:
    return "".join([
        f"apiVersion: v1\nkind: Namespace\nmetadata: {{name: {NS}}}\n---\n",
        build.deployment_yaml("toy", f"""\
            - name: server
              image: toy:1
              command: [toy-serve, --port, "8000", --kv-store, "{STORE_URL}"]
              ports: [{{name: http, containerPort: 8000}}]
            """, NS),
        build.deployment_yaml("toy-store", """\
            - name: kv
              image: toykv:1
              command: [toy-kv, --port, "7777"]
              ports: [{name: kv, containerPort: 7777}]
            """, NS),
        textwrap.dedent(f"""\
            apiVersion: v1
            kind: Service
            metadata: {{name: toy-store, namespace: {NS}}}
            spec:
              selector: {{app: toy-store}}
              ports: [{{name: kv, port: 7777, targetPort: kv}}]
            """),
    ])


def _clear(cluster: SimCluster, tree: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """``clear`` run from ``tree`` (not the built CLI) against the simulator, ``-o json``."""
    env = {**cluster.env(), "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "kubectl_kvreset", "clear", "-n", NS, "--all", *args,
                           "-o", "json"], env=env, cwd=tree, capture_output=True, text=True, timeout=120)
    rows = json.loads(done.stdout) if done.stdout.strip() else []
    return done.returncode, rows, done.stderr


def _port(cluster: SimCluster, owner: str, port: int) -> dict[str, Any]:
    pods = [p for p in cluster.live_pods() if (p.get("owner") or {}).get("name") == owner]
    assert len(pods) == 1, pods
    return pods[0]["ports"][str(port)]  # type: ignore[no-any-return]


@pytest.fixture
def toy_cluster(sim: Any, tmp_path: Path) -> Any:
    """``start(scenario=None)``: the simulator running the toy server and the toy store."""
    path = tmp_path / "toy.yaml"
    path.write_text(_manifest())
    return lambda scenario=None: sim([path], namespace=NS, scenario=scenario)


def test_clear_uses_the_toy_engine_and_the_toy_store_kind(toy_cluster: Any, tmp_path: Path) -> None:
    tree = toy_tree(tmp_path)
    cluster = toy_cluster()
    server, store = _port(cluster, "toy", 8000), _port(cluster, "toy-store", 7777)
    assert (server["role"], server["reset_calls"], store["role"], store["keys"]) == ("toy", 0, "toy-kv", 5)
    assert server["prefix_cache_blocks"] > 0  # warm

    code, rows, err = _clear(cluster, tree, "--dry-run")
    assert code == 0, (err, rows)
    [planned] = [r for r in rows if r["kind"] == "PlannedReset"]
    assert (planned["engine"], planned["steps"], planned["empties"]) == ("toy", ["POST /toy/reset"], ["gpu"]), planned
    [counted] = [r for r in rows if r["kind"] == "StoreClear"]
    assert (counted["store"], counted["result"], counted["before"], counted["after"]) == ("toykv", "planned", 5, 5)
    assert _port(cluster, "toy", 8000)["reset_calls"] == 0 and _port(cluster, "toy-store", 7777)["keys"] == 5

    code, rows, err = _clear(cluster, tree)
    assert code == 0, (err, rows)
    [reset] = [r for r in rows if r["kind"] == "CacheReset"]
    [cleared] = [r for r in rows if r["kind"] == "StoreClear"]
    assert (reset["engine"], reset["port"], reset["result"], reset["gpu"]) == ("toy", 8000, "emptied", "emptied"), reset
    assert reset["shared"] == "emptied by clear-store" and "StoreClear toykv" in reset["message"], reset
    assert (cleared["store"], cleared["address"], cleared["scope"]) == ("toykv", STORE_URL, "store"), cleared
    assert (cleared["method"], cleared["result"], cleared["before"], cleared["after"]) == \
        ("POST /toy/clear", "emptied", 5, 0), cleared

    server, store = _port(cluster, "toy", 8000), _port(cluster, "toy-store", 7777)
    assert (server["reset_calls"], server["prefix_cache_blocks"], server["last_transport"]) == (1, 0, "proxy")
    assert "POST /toy/reset" in server["calls"] and "GET /toy/version" in server["calls"]
    assert not any(c.startswith(("POST /reset_", "GET /server_info")) for c in server["calls"]), server["calls"]
    assert store["keys"] == 0 and store["calls"].count("POST /toy/clear") == 1


def test_a_busy_toy_server_is_not_emptied(toy_cluster: Any, tmp_path: Path) -> None:
    tree = toy_tree(tmp_path)
    cluster = toy_cluster({"pods": [{"match": {"owner": "deployment/toy"}, "busy": 1000}]})
    code, rows, err = _clear(cluster, tree, "--busy-timeout", "1s")
    assert code != 0, (err, rows)
    [reset] = [r for r in rows if r["kind"] == "CacheReset"]
    assert reset["engine"] == "toy" and reset["result"] != "emptied" and reset["gpu"] != "emptied", reset
    assert reset["result"] == "busy" and reset["busy_answers"] >= 1, reset
    # the engine's own words, and no option it cannot honour
    assert reset["message"].startswith("toy kept answering busy for "), reset
    assert "--preempt-running" not in reset["message"] and "vLLM" not in reset["message"], reset
    assert [lt["remedy"] for lt in reset["left"]] == ["retry later, or raise --busy-timeout"], reset
    server = _port(cluster, "toy", 8000)
    assert server["prefix_cache_blocks"] > 0 and server["busy_answers"] >= 1
