"""What the seams refuse, whatever an engine or a store kind does: a container two engines
claim (or one claims and cannot read) is nobody's, a store kind's ``emptied`` counts only with
the store's own count at 0, a kind's unexpected exception becomes a ``failed`` row, and two kinds
never share a name, a scheme or a connector."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest

import kubectl_kvreset.engines as engines
from kubectl_kvreset.engines.base import ConfigReader, Engine, ServeConfig, ServerCommandError
from kubectl_kvreset.engines.vllm.engine import VllmEngine
from kubectl_kvreset.stores import clear as store_clear
from kubectl_kvreset.stores import registry
from kubectl_kvreset.stores.kinds.names import StoreKind
from kubectl_kvreset.stores.records import StoreResult

BOTH = {"name": "both", "image": "x", "command": ["sh", "-c"],
        "args": ["vllm serve m --port 8000 & python3 -m sglang.launch_server --port 30000; wait"]}
BAD_VLLM = {"name": "bad", "image": "x", "command": ["sh", "-c"],
            "args": ["vllm serve m --port 8000 --kv-transfer-config '{bad' & "
                     "python3 -m sglang.launch_server --port 30000; wait"]}


class AnySglang(Engine):
    """A stand-in second engine: claims every container whose words hold ``sglang.launch_server``."""

    name = "sglang-standin"

    def server_config(self, container: Mapping[str, Any], env: Mapping[str, str],
                      config_reader: ConfigReader | None = None) -> ServeConfig | None:
        words = " ".join(str(w) for w in [*(container.get("command") or []), *(container.get("args") or [])])
        if "sglang.launch_server" not in words:
            return None
        return ServeConfig(argv=("python3",), entrypoint="sglang", model=None, served_model_name=None,
                           api_ports=(30000,), scheme="http", kv_transfer_config=None, kv_offloading_size_gib=None,
                           kv_offloading_backend=None, data_parallel_size_local=None, config_file=None,
                           unresolved_vars=(), notes=())


@pytest.fixture
def two_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engines, "ENGINES", (VllmEngine(), AnySglang()))


def test_a_container_two_engines_claim_is_refused(two_engines: None) -> None:
    with pytest.raises(ServerCommandError, match="more than one engine"):
        engines.engine_for(BOTH, {})


def test_one_engine_unable_to_read_its_command_is_not_hidden_by_another_claim(two_engines: None) -> None:
    with pytest.raises(ServerCommandError):
        engines.engine_for(BAD_VLLM, {})


def test_one_engine_alone_still_reads_its_container() -> None:
    found = engines.engine_for({"name": "v", "image": "x", "command": ["vllm", "serve", "m", "--port", "8001"]}, {})
    assert found is not None and found[0].name == "vllm" and found[1].api_ports == (8001,)


@pytest.mark.parametrize(("given", "result"), [
    (StoreResult("emptied", 5, 0), "emptied"),
    (StoreResult("emptied", 5, None), "unconfirmed"),
    (StoreResult("emptied", None, None), "unconfirmed"),
    (StoreResult("emptied", 5, 2), "left"),
    (StoreResult("failed", 5, None, message="x"), "failed"),
    (StoreResult("planned", 5, None), "planned"),
])
def test_emptied_only_with_the_store_count_at_zero(given: StoreResult, result: str) -> None:
    got = store_clear.vouched(given)
    assert got.result == result
    if result != given.result:
        assert got.message and ("missing" in got.message or "remain" in got.message)


def test_a_kind_raising_the_unexpected_gives_a_failed_row() -> None:
    def broken(*_: Any) -> StoreResult:
        raise NotImplementedError("no clear")

    call: Any = SimpleNamespace(store=SimpleNamespace(kind=StoreKind.REDIS))
    got = store_clear._one(None, call, broken, None, False, 1.0)  # type: ignore[arg-type]
    assert got.result == "failed" and "NotImplementedError" in (got.message or "")


def test_a_kind_with_no_count_after_is_unconfirmed_through_the_call() -> None:
    call: Any = SimpleNamespace(store=SimpleNamespace(kind=StoreKind.REDIS))
    got = store_clear._one(None, call, lambda *_: StoreResult("emptied", 3, None), None, False, 1.0)  # type: ignore[arg-type]
    assert got.result == "unconfirmed"


@pytest.mark.parametrize("what", ["name", "remote_url scheme", "connector"])
def test_two_kinds_never_share_a_key(what: str) -> None:
    a, b = registry.KINDS[0], registry.KINDS[1]
    with pytest.raises(ValueError, match="both claim"):
        registry._unique(what, [("same", a), ("same", b)])


def test_the_registry_has_no_shared_key() -> None:
    for what, pairs in (("scheme", [(s, k) for k in registry.KINDS for s in k.schemes]),
                        ("connector", [(c, k) for k in registry.KINDS for c in k.connectors])):
        assert len({key for key, _ in pairs}) == len(pairs), what


def test_an_engine_without_dev_mode_counts_as_serving_its_routes() -> None:
    from dataclasses import replace

    from kubectl_kvreset.job.planning import dev_mode_on
    from kubectl_kvreset.pods import NOT_NEEDED, DevMode, describe_pod_containers

    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
           "spec": {"containers": [{"name": "v", "image": "x", "command": ["vllm", "serve", "m"]}]},
           "status": {"phase": "Running"}}
    server = describe_pod_containers(pod)[0]
    assert dev_mode_on(server) is None
    assert dev_mode_on(replace(server, dev_mode=DevMode(None, NOT_NEEDED, True, True))) is True
