"""What the running servers are asked, and how often: ``/version`` and ``/server_info`` once per
owner and pod template, again for a pod whose answers contradict its template's; the live
configuration wins over the spec; no secret of ``/server_info`` reaches any output.

Counts come from the simulator's ``api_requests`` (deterministic), never from timings."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.driver import BENCH_MANIFEST
from tests.simctl import SimCluster

NS = "bench"
OWNER = "deployment/bench-vllm"
#: vLLM 0.26.0 (the bench image) serves three reset routes.
ROUTES_026 = 3
OFFLOAD = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
           "kv_connector_extra_config": {"cpu_bytes_to_use": 2**30}}


@pytest.fixture
def bench() -> Iterator[object]:
    started: list[SimCluster] = []

    def start(replicas: int, pods: list[dict[str, object]] | None = None,
              manifest: Path = BENCH_MANIFEST) -> SimCluster:
        cluster = SimCluster([manifest], namespace=NS, ready_delay=0.02,
                             scenario={"replicas": {OWNER: replicas}, "pods": pods or []},
                             extra_args=("--no-sandbox",))
        started.append(cluster)
        cluster.wait_ready(timeout=120)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    d = Counter(after)
    d.subtract(before)
    return {k: v for k, v in d.items() if v}


def test_64_pods_cost_their_reset_routes_and_at_most_a_tenth_of_a_request_more(bench) -> None:
    pods = 64
    cluster = bench(pods)
    before = cluster.state()["api_requests"]
    code, rows, err = cluster.run_json("clear", "--all", "-n", NS)
    assert code == 0, err
    assert len(rows) == pods and {r["result"] for r in rows} == {"emptied"}
    req = _delta(cluster.state()["api_requests"], before)
    # one call per reset route the version has, on every pod
    assert req.pop("create pods/proxy") == pods * ROUTES_026
    # the rest: one pod list and the template's probes (version, live configuration and, as
    # 0.26.0 answers the reset for engine 0 only, /metrics for the data-parallel engine count)
    assert req == {"list pods": 1, "get pods/proxy": 3}, req
    assert sum(req.values()) / pods <= 0.1
    assert all(p["ports"]["8000"]["reset_calls"] == 1 for p in cluster.live_pods())

    before = cluster.state()["api_requests"]
    code, rows, err = cluster.run_json("detect", "--all", "-n", NS)
    assert code == 0, err
    assert {r["version"] for r in rows} == {"0.26.0"}
    assert _delta(cluster.state()["api_requests"], before) == {"list pods": 1, "get pods/proxy": 3}
    assert sum(p["ports"]["8000"]["metrics_calls"] for p in cluster.live_pods()) == 2  # one per command


def test_a_pod_whose_answers_contradict_its_template_is_probed_on_its_own(bench) -> None:
    """A `:latest` image pulled again: one pod of the template runs 0.23.0, the others 0.26.0."""
    cluster = bench(4, [{"match": {"ordinal": 2}, "vllm_version": "0.23.0"}])
    versions = {p["name"]: p["version"] for p in cluster.live_pods()}
    code, rows, err = cluster.run_json("clear", "--all", "-n", NS)
    assert code in (0, 3), err
    assert {r["pod"]: r["version"] for r in rows} == versions
    odd = [r for r in rows if "did not fit the version its template reported" in (r["message"] or "")]
    assert odd, rows
    # on 0.23.0 the empty 200 is unconfirmed; on 0.26.0 it is emptied: each by its own version
    for r in rows:
        assert r["result"] == ("unconfirmed" if versions[r["pod"]] == "0.23.0" else "emptied"), r
    # 0.23.0 lacks /reset_encoder_cache: the row does not report its 404 as a failure
    assert not any("reset_encoder_cache" in (r["message"] or "") for r in rows)


def test_a_connector_only_the_server_reports_is_listed_and_planned(bench) -> None:
    """The spec shows no connector; the server runs the CPU OffloadingConnector (a --config
    file or an image default set it): detect lists its tiers with a note, clear plans for them."""
    cluster = bench(2, [{"live_kv_transfer_config": OFFLOAD}])
    code, rows, err = cluster.run_json("detect", "--all", "-n", NS)
    assert code == 0, err
    for r in rows:
        assert r["connectors"] == ["OffloadingConnector"] and r["tiers"] == ["gpu", "cpu"], r
        assert any("the running server reports" in n and "OffloadingConnector" in n for n in r["notes"]), r
    code, rows, err = cluster.run_json("clear", "--all", "-n", NS, "--dry-run")
    assert code == 0, err
    for r in rows:
        assert any(e.startswith("cpu") for e in r["empties"]), r  # 0.26.0 resets the CPU spec's tier
        assert any("the running server reports" in n for n in r["notes"]), r
    code, rows, err = cluster.run_json("clear", "--all", "-n", NS)
    assert code == 0, err
    assert all(r["cpu"] == "emptied" and "the running server reports" in r["message"] for r in rows), rows


def test_an_unknown_build_follows_its_openapi_and_its_connector_reset_is_unconfirmed(bench) -> None:
    """``/version`` says ``dev`` (a source build); the server has 0.26.0's routes and the CPU
    OffloadingConnector: /openapi.json decides the routes and reset_external, the CPU tier's
    reset is unconfirmed (exit 3), never emptied."""
    cluster = bench(2, [{"vllm_version": "dev", "behaves_as": "0.26.0", "live_kv_transfer_config": OFFLOAD}])
    before = cluster.state()["api_requests"]
    code, rows, err = cluster.run_json("clear", "--all", "-n", NS)
    assert code == 3, err
    for r in rows:
        assert r["version"] == "dev" and r["gpu"] == "emptied" and r["cpu"] == "unconfirmed", r
        assert r["result"] == "unconfirmed" and "/openapi.json decided" in r["message"], r
    req = _delta(cluster.state()["api_requests"], before)
    assert req["create pods/proxy"] == 2 * ROUTES_026  # every route its openapi lists, once
    # /version, /server_info, /openapi.json and /metrics (an unknown build counts as answering
    # for engine 0 only): once for the template
    assert req["get pods/proxy"] == 4
    assert all(p["ports"]["8000"]["last_reset_query"] == "reset_external=true" for p in cluster.live_pods())


SECRET = "s3cr3t-planted-value"


def test_no_secret_of_server_info_reaches_any_output(bench, tmp_path: Path) -> None:
    # the pods' environment carries VLLM_API_KEY (as vLLM's API key is usually given) and a token
    manifest = tmp_path / "secret.yaml"
    manifest.write_text(BENCH_MANIFEST.read_text().replace(
        '        - name: VLLM_SERVER_DEV_MODE\n          value: "1"\n',
        f'        - name: VLLM_SERVER_DEV_MODE\n          value: "1"\n        - name: VLLM_API_KEY\n'
        f'          value: "{SECRET}"\n        - name: HF_TOKEN\n          value: "{SECRET}"\n'))
    assert SECRET in manifest.read_text()
    live = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
            "kv_connector_extra_config": {"lmcache.remote_url": f"redis://user:{SECRET}@redis.cache:6379",
                                          "auth_token": SECRET, "lmcache.local_cpu": True}}
    cluster = bench(2, [{"live_kv_transfer_config": live}], manifest)
    # vLLM itself leaves names with KEY out of vllm_env; the fake does too, and nothing
    # this tool prints may carry the value either way
    outputs = []
    for args in (("detect", "--all"), ("clear", "--all", "--dry-run"), ("clear", "--all")):
        for fmt in ("table", "wide", "json", "yaml"):
            done = cluster.run(*args, "-n", NS, "-o", fmt, "-v", "9")
            outputs.append(done.stdout + done.stderr)
    text = "\n".join(outputs)
    assert "LMCacheConnectorV1" in text  # the live configuration was read and used
    assert SECRET not in text
    assert "VLLM_API_KEY" not in text


def test_server_info_of_the_fake_keeps_vllm_api_key_out() -> None:
    from tests.sim.fakevllm import FakeVLLM

    f = FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model="m", env={"VLLM_API_KEY": SECRET})
    body = f.handle("GET", "/server_info", "config_format=json", {}, b"")[2]
    assert SECRET.encode() not in body and "vllm_env" in json.loads(body)
