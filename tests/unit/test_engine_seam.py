"""The engine seam: a new engine is one module plus its registry entry (an import and one line in
``ENGINES``). On a temporary copy of the tree a toy engine is added (its container runs
``toy-serve --port N``, its reset is one POST route); discovery finds its pod, the plan sends its
route, the job's reset call reads its answer with the toy's rules (against a fake HTTP caller,
not the simulator), and the import-linter contracts hold with it (engines independent of each
other) and break when it imports vLLM's package."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kubectl_kvreset.engines import ENGINES, engine_for, engine_named
from kubectl_kvreset.engines.base import Engine
from kubectl_kvreset.engines.vllm.engine import VllmEngine
from kubectl_kvreset.pods import VllmPod, describe_pod_containers

from .test_layers import lint_imports

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kubectl_kvreset"

TOY = '''"""A toy engine: ``toy-serve --port N``; ``POST /toy/reset`` answers ``{"emptied": true}``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from ..tiers import KVLayout, Tier, TierKind
from .base import ConfigReader, Engine, ResetAnswer, ResetOutcome, ServeConfig


class ToyEngine(Engine):
    """The toy server: one port, one GPU tier, one reset route, no dev mode."""

    name = "toy"
    version_route = "/toy/version"
    reset_route = "/toy/reset"

    def server_config(self, container: Mapping[str, Any], env: Mapping[str, str],
                      config_reader: ConfigReader | None = None) -> ServeConfig | None:
        argv = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
        if not argv or argv[0] != "toy-serve":
            return None
        port = int(argv[argv.index("--port") + 1]) if "--port" in argv else 9000
        return ServeConfig(argv=tuple(argv), entrypoint="toy-serve", model=None, served_model_name=None,
                           api_ports=(port,), scheme="http", kv_transfer_config=None, kv_offloading_size_gib=None,
                           kv_offloading_backend=None, data_parallel_size_local=None, config_file=None,
                           unresolved_vars=(), notes=())

    def kv_layout(self, config: ServeConfig, env: Mapping[str, str]) -> KVLayout:
        return KVLayout((), (Tier(TierKind.GPU, None, None),), None)

    def read_version(self, body: bytes) -> str | None:
        return body.decode("utf-8", "replace").strip() or None

    def release(self, version: str | None) -> Version | None:
        try:
            return Version(version) if version else None
        except InvalidVersion:
            return None

    def read_reset_answer(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ResetAnswer:
        if status == 200 and body == b'{"emptied": true}':
            return ResetAnswer(ResetOutcome.CLEARED, "toy: emptied", False)
        return ResetAnswer(ResetOutcome.UNEXPECTED, f"toy answered {status}", False)
'''

#: Run in the copied tree: discovery (through a fake ``Kube``), the probe and the plan (through a
#: fake HTTP caller), then the job's reset call; prints what each saw as one JSON line.
SCRIPT = r'''
import json, sys
import kubectl_kvreset
from kubectl_kvreset.discovery import discover_all
from kubectl_kvreset.job.execute import reset_route
from kubectl_kvreset.job.planning import pod_plan
from kubectl_kvreset.job.probes import probe_pods
from kubectl_kvreset.kube import HttpAnswer
from types import SimpleNamespace

POD = {"metadata": {"name": "toy-0", "namespace": "ns", "uid": "u1", "labels": {}},
       "spec": {"containers": [{"name": "server", "image": "toy:1", "command": ["toy-serve", "--port", "9100"]},
                               {"name": "side", "image": "busybox", "command": ["sleep", "inf"]}]},
       "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}

class Kube:
    timeout_s = None
    def list_items(self, version, plural, namespace, label_selector=None):
        assert plural == "pods", plural
        return [POD]

class Caller:
    def __init__(self):
        self.calls = []
    def call(self, ref, port, method, path, query=(), *, scheme="http", timeout_s=None, max_bytes=None, **kw):
        self.calls.append([method, path, port, [list(q) for q in query]])
        if (method, path) == ("GET", "/toy/version"):
            return HttpAnswer(200, {}, b"1.0.0")
        if (method, path) == ("POST", "/toy/reset"):
            return HttpAnswer(200, {}, b'{"emptied": true}')
        return HttpAnswer(404, {}, b"not found")
    def sleep(self, s):
        pass
    def stop(self):
        return False

pods, others = discover_all(Kube(), "ns")
caller = Caller()
probes = probe_pods(caller, pods, 2, None, lambda p: p.dev_mode.enabled)
plans = [pod_plan(p, got, "none", False) for p, got in zip(pods, probes)]
plan = SimpleNamespace(scope=SimpleNamespace(caller=caller), options=SimpleNamespace(busy_timeout_s=1.0))
results = [reset_route(plan, pp, pp.pod.ports[0], route) for pp in plans for route in pp.routes]
print(json.dumps({
    "package": kubectl_kvreset.__file__,
    "pods": [[p.name, p.container, p.engine.name, [x.port for x in p.ports], p.dev_mode.describe()] for p in pods],
    "others": [o.container for o in others],
    "routes": [list(pp.routes) for pp in plans],
    "versions": [pp.version for pp in plans],
    "steps": [[s.action for s in pp.steps.steps] for pp in plans],
    "outcomes": [[r.route, r.outcome.value if r.outcome else None, r.answer.detail if r.answer else None]
                 for r in results],
    "calls": caller.calls,
}))
'''


def _add_toy(tree: Path, toy: str = TOY) -> None:
    """The toy engine as one module and its registry entry (its import and one ``ENGINES`` line)."""
    (tree / "kubectl_kvreset" / "engines" / "toy.py").write_text(toy)
    registry = tree / "kubectl_kvreset" / "engines" / "__init__.py"
    text = registry.read_text()
    assert text.count("    VllmEngine(),\n") == 1 and text.count("from .vllm.engine import VllmEngine\n") == 1
    text = text.replace("from .vllm.engine import VllmEngine\n",
                        "from .toy import ToyEngine\nfrom .vllm.engine import VllmEngine\n")
    registry.write_text(text.replace("    VllmEngine(),\n", "    VllmEngine(),\n    ToyEngine(),\n"))


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package and of setup.cfg, with the toy engine added."""
    shutil.copytree(PACKAGE, tmp_path / "kubectl_kvreset", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    _add_toy(tmp_path)
    return tmp_path


def test_toy_engine_is_discovered_planned_and_reset(tree: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tree, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["package"].startswith(str(tree))
    assert got["pods"] == [["toy-0", "server", "toy", [9100], "not needed"]]
    assert got["others"] == []  # the toy container is the registry's, not an unknown engine's
    assert got["routes"] == [["/toy/reset"]]
    assert got["versions"] == ["1.0.0"]
    assert got["steps"] == [["api-reset"]]
    assert got["outcomes"] == [["/toy/reset", "cleared", "toy: emptied"]]
    assert ["GET", "/toy/version", 9100, []] in got["calls"]
    assert ["POST", "/toy/reset", 9100, []] in got["calls"]
    assert not any(path.startswith("/reset_") or path == "/server_info" for _, path, _, _ in got["calls"])


def test_contracts_hold_with_the_toy_engine(tree: Path) -> None:
    cfg = tree / "setup.cfg"
    text = cfg.read_text()
    assert "    kubectl_kvreset.engines.vllm\n" in text
    cfg.write_text(text.replace("    kubectl_kvreset.engines.vllm\n",
                                "    kubectl_kvreset.engines.vllm\n    kubectl_kvreset.engines.toy\n", 1))
    done = lint_imports(tree)
    assert done.returncode == 0, done.stdout + done.stderr


def test_toy_importing_vllm_breaks_independence(tree: Path) -> None:
    cfg = tree / "setup.cfg"
    cfg.write_text(cfg.read_text().replace("    kubectl_kvreset.engines.vllm\n",
                                           "    kubectl_kvreset.engines.vllm\n    kubectl_kvreset.engines.toy\n", 1))
    _add_toy(tree, TOY.replace("from .base import", "from .vllm.api import read_reset_answer  # noqa: F401\n"
                                                    "from .base import"))
    done = lint_imports(tree)
    assert done.returncode != 0
    assert "Engines are independent of each other BROKEN" in done.stdout, done.stdout


def test_registry() -> None:
    assert [e.name for e in ENGINES] == ["vllm", "sglang"]
    assert isinstance(engine_named("vllm"), VllmEngine) and isinstance(engine_named("vllm"), Engine)
    with pytest.raises(KeyError, match="no engine named 'toy'"):
        engine_named("toy")
    assert engine_for({"name": "c", "image": "busybox", "command": ["sleep", "inf"]}, {}) is None
    found = engine_for({"name": "c", "image": "x", "command": ["vllm", "serve", "m", "--port", "8200"]}, {})
    assert found is not None and found[0].name == "vllm" and found[1].api_ports == (8200,)


def test_pod_carries_its_engine() -> None:
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"containers": [{"name": "vllm", "image": "x", "command": ["vllm", "serve", "m"]}]}}
    (described,) = describe_pod_containers(pod)
    assert isinstance(described, VllmPod) and described.engine.name == "vllm"
    assert described.dev_mode.describe() == "off (unset)"
