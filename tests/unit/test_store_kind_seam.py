"""The store-kind seam: a new kind of store is one module under ``stores/kinds/`` plus its line
in ``stores/registry.py`` (its import and its entry), nothing else.

The package is copied to a temporary directory, a toy kind is added there (a store named by an
LMCache ``remote_url`` ``toy://host[:port]``, default port 7777, emptied store-wide by one HTTP
call ``POST /toy/clear`` that answers ``{"removed": N}``, counted by ``GET /toy/count``), and a
child Python on that copy shows the store step planning and running it: the pod's configuration
names the store (:func:`~kubectl_kvreset.stores.config.stores_of`), the consent rule plans one
store-wide call (:func:`~kubectl_kvreset.stores.calls.plan_calls`), the call runs through the
plugin's own :func:`~kubectl_kvreset.stores.clear.run_call` against a fake API server whose pod
proxy answers as the toy store (a fake HTTP callable behind ``pods/proxy``), and the
``StoreClear`` row (:func:`~kubectl_kvreset.job.storeclear.store_row`) says ``emptied``. The
simulator is not used: the level is the job's pure steps.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import kubectl_kvreset

TOY_MODULE = '''"""A toy store: ``POST /toy/clear`` empties it, ``GET /toy/count`` counts its keys."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ..records import StoreResult
from .base import Kind, KindName, Reach

if TYPE_CHECKING:
    from ..address import Address
    from ..records import Endpoint, FoundStore, StoreCall


class ToyError(Exception):
    """The toy store answered something else than 200 and a JSON count."""


def _count(http, path, method="GET"):  # type: ignore[no-untyped-def]
    status, body = http(method, path, ())
    if status != 200:
        raise ToyError(f"{method} {path} answered {status}")
    return int(json.loads(body)["removed" if method == "POST" else "count"])


class Toy(Kind):
    """The toy store: ``toy://host[:7777]``, cleared store-wide on its own port."""

    name = KindName("toy")
    schemes: Mapping[str, int | None] = {"toy": 7777}
    clears = True
    errors = (ToyError,)

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

SCRIPT = '''
import json, sys
import kubectl_kvreset
assert kubectl_kvreset.__file__.startswith(sys.argv[1]), kubectl_kvreset.__file__
from kubectl_kvreset.job.storeclear import store_row
from kubectl_kvreset.kube.errors import HttpAnswer
from kubectl_kvreset.stores.calls import plan_calls
from kubectl_kvreset.stores.clear import run_call
from kubectl_kvreset.stores.config import stores_of
from kubectl_kvreset.stores.records import Endpoint, FoundStore, Resolution, StoreUser

kv = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
[use] = stores_of(kv, {"LMCACHE_REMOTE_URL": "toy://toy.lmc"}, {}, model="org/m")

class Pod:  # the VllmPod fields the store step reads
    def __init__(self, name):
        self.namespace, self.name, self.container = "lmc", name, "vllm"

res = Resolution("service", "lmc", "toy", 7777, (Endpoint("lmc", "toy-0", 7777),))
alone = FoundStore(use.kind, use.address, res, (StoreUser(Pod("vllm-0"), use, True),))
shared = FoundStore(use.kind, use.address, res, (StoreUser(Pod("vllm-0"), use, True),
                                                 StoreUser(Pod("other-0"), use, False)))
[call] = plan_calls([alone], shared=False)
[held] = plan_calls([shared], shared=False)

class Kube:  # the API server: pods/proxy to the toy store, whose state is a key count
    keys = 5
    seen = []
    def get_object(self, *a):
        return {"spec": {"containers": [{"name": "toy", "args": []}]}}
    def pod_proxy(self, namespace, pod, port, method, path, query=(), **k):
        self.seen.append(f"{method} {namespace}/{pod}:{port}{path}")
        if method == "POST" and path == "/toy/clear":
            removed, Kube.keys = Kube.keys, 0
            return HttpAnswer(200, {}, json.dumps({"removed": removed}).encode())
        if path == "/toy/count":
            return HttpAnswer(200, {}, json.dumps({"count": Kube.keys}).encode())
        return HttpAnswer(404, {}, b"no such route")

kube = Kube()
dry = run_call(kube, call, dry_run=True)
done = run_call(kube, call)
print(json.dumps({"kind": use.kind.value, "scope": use.scope, "address": use.address.display(),
                  "method": call.method, "blocked": call.blocked, "held": held.blocked,
                  "dry": [dry.result, dry.before, dry.after], "seen": kube.seen,
                  "row": store_row(call, done)}))
'''


def _registry_line(text: str) -> str:
    """``registry.py`` with the toy kind's import and entry added (before ``Other``)."""
    text = text.replace("from .kinds.redis import Redis, Valkey\n",
                        "from .kinds.redis import Redis, Valkey\nfrom .kinds.toy import Toy\n", 1)
    assert "    Other(),\n" in text
    return text.replace("    Other(),\n", "    Toy(),\n    Other(),\n", 1)


def test_a_toy_kind_is_one_module_and_its_registry_line(tmp_path: Path) -> None:
    source = Path(kubectl_kvreset.__file__).parent
    copy = tmp_path / "kubectl_kvreset"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "stores" / "kinds" / "toy.py").write_text(TOY_MODULE)
    registry = copy / "stores" / "registry.py"
    before = registry.read_text()
    registry.write_text(_registry_line(before))
    changed = [line for line in registry.read_text().splitlines() if line not in before.splitlines()]
    assert changed == ["from .kinds.toy import Toy", "    Toy(),"]

    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert (got["kind"], got["scope"], got["address"]) == ("toy", "store", "toy://toy.lmc:7777")
    assert (got["method"], got["blocked"]) == ("POST /toy/clear", None)
    # the consent rule is the store-wide one: another pod using the toy store holds the clear back
    assert "store-wide clear" in got["held"] and "lmc/other-0" in got["held"] and "--shared-stores" in got["held"]
    assert got["dry"] == ["planned", 5, 5]
    assert got["seen"] == ["GET lmc/toy-0:7777/toy/count", "GET lmc/toy-0:7777/toy/count",
                           "POST lmc/toy-0:7777/toy/clear", "GET lmc/toy-0:7777/toy/count"]
    row = got["row"]
    assert (row["store"], row["result"], row["before"], row["after"]) == ("toy", "emptied", 5, 0)
    assert (row["address"], row["scope"], row["via"]) == ("toy://toy.lmc:7777", "store", "lmc/toy-0:7777")


def test_every_kind_module_is_in_the_registry() -> None:
    """A kind class written but not listed would be silently unused."""
    import importlib
    import pkgutil

    from kubectl_kvreset.stores import kinds
    from kubectl_kvreset.stores.kinds.base import Kind
    from kubectl_kvreset.stores.registry import KINDS

    listed = {type(k) for k in KINDS}
    for info in pkgutil.iter_modules(kinds.__path__):
        module = importlib.import_module(f"{kinds.__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, Kind) and value is not Kind \
                    and value.__module__ == module.__name__:
                assert value in listed, f"{value.__name__} of {module.__name__} is not in stores/registry.py"
    names = [k.name.value for k in KINDS]
    assert len(names) == len(set(names))
    schemes = [s for k in KINDS for s in k.schemes]
    assert len(schemes) == len(set(schemes))
