"""PodRuntime tests over the llm-d fixtures and version behaviours."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.beside import LLM_D_FIXTURES, llm_d_fixture, needs_beside
from tests.sim.pods import PodContext, PodRuntime
from tests.sim.sandbox import bwrap_available

needs_fixtures = needs_beside(LLM_D_FIXTURES)
needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap (bwrap) missing or cannot create namespaces")

LWS_ENV = {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0", "LWS_LEADER_ADDRESS": "wide-ep-0.wide-ep.default"}


def load_templates(fixture_prefix: str) -> dict[str, dict[str, Any]]:
    """Workload name -> pod spec, for the Deployments / LWS worker templates of one fixture."""
    path = llm_d_fixture(fixture_prefix)
    out: dict[str, dict[str, Any]] = {}
    for doc in yaml.safe_load_all(path.read_text()):
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "Deployment":
            out[doc["metadata"]["name"]] = doc["spec"]["template"]["spec"]
        elif doc.get("kind") == "LeaderWorkerSet":
            lwt = doc["spec"]["leaderWorkerTemplate"]
            out[doc["metadata"]["name"]] = (lwt.get("leaderTemplate") or lwt["workerTemplate"])["spec"]
    return out


def make_ctx(spec: dict[str, Any], tmp: Path, *, sandbox: bool = True, overrides: dict[str, Any] | None = None,
             version: str | None = None, extra_env: dict[str, str] | None = None, uid: str = "uid-1",
             pod: str = "pod-a") -> PodContext:
    """A PodContext as the API server would build it (env values, podIP fieldRefs, volumes)."""
    pod_dir = tmp / pod
    volumes: dict[str, Path] = {}
    for vol in spec.get("volumes") or []:
        if "emptyDir" in vol:
            volumes[vol["name"]] = pod_dir / "volumes" / vol["name"]
        elif "persistentVolumeClaim" in vol:
            volumes[vol["name"]] = tmp / "pvc" / vol["persistentVolumeClaim"]["claimName"]
    for d in volumes.values():
        d.mkdir(parents=True, exist_ok=True)
    env_by: dict[str, dict[str, str]] = {}
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if not isinstance(c, dict):
            continue
        env: dict[str, str] = {}
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
            elif e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "status.podIP":
                env[e["name"]] = "10.1.2.3"
        env.update(extra_env or {})
        env_by[c["name"]] = env
    return PodContext(
        namespace="default", name=pod, uid=uid, pod_ip="10.1.2.3", spec=spec, env_by_container=env_by,
        volume_dirs=volumes, shm_dir=pod_dir / "shm", work_dir=pod_dir / "work", overrides=dict(overrides or {}),
        default_version=version, sandbox=sandbox,
    )


def started(ctx: PodContext) -> PodRuntime:
    rt = PodRuntime(ctx)
    rt.start()
    return rt


def roles(rt: PodRuntime) -> dict[int, str]:
    return {int(p): s["role"] for p, s in rt.state()["ports"].items()}


def post(rt: PodRuntime, port: int, path: str = "/reset_prefix_cache", query: str = "",
         transport: str = "proxy") -> tuple[int, list[tuple[str, str]], bytes] | None:
    return rt.request(port, "POST", path, query, {}, b"", transport=transport)


# --------------------------------------------------------------------------- fixtures, sandboxed


@needs_fixtures
@needs_bwrap
def test_fixture01_aggregated(tmp_path: Path) -> None:
    spec = load_templates("01-")["optimized-baseline-nvidia-gpu-vllm-decode"]
    rt = started(make_ctx(spec, tmp_path))
    st = rt.state()
    assert st["vllm_container"] == "modelserver"
    assert st["recorded_argv"]["modelserver"] == [
        "vllm", "serve", "Qwen/Qwen3-32B", "--disable-access-log-for-endpoints=/health,/metrics,/v1/models",
        "--tensor-parallel-size=2"]
    assert roles(rt) == {8000: "vllm"}
    assert st["version"] == "0.23.0"
    assert st["dev_mode"] == "off"
    assert post(rt, 8000) == (404, [("content-type", "application/json")], b'{"detail":"Not Found"}')
    assert rt.request(8001, "GET", "/health", "", {}, b"") is None
    assert st["env"]["USER"] == "llm-d"


@needs_fixtures
@needs_bwrap
def test_fixture02_pd_ports_and_sidecar_forwarding(tmp_path: Path) -> None:
    t = load_templates("02-")
    decode = started(make_ctx(t["pd-disaggregation-nvidia-gpu-vllm-decode"], tmp_path,
                              overrides={"dev_mode": "on"}, pod="decode"))
    prefill = started(make_ctx(t["pd-disaggregation-nvidia-gpu-vllm-prefill"], tmp_path, pod="prefill"))
    assert roles(decode) == {8000: "sidecar", 8200: "vllm"}
    assert roles(prefill) == {8000: "vllm"}
    argv = decode.state()["recorded_argv"]["modelserver"]
    assert argv[:3] == ["vllm", "serve", "openai/gpt-oss-120b"] and argv[-1] == "--port=8200"
    assert decode.state()["env"]["VLLM_SERVER_DEV_MODE"] == "1"
    # through the sidecar: vLLM's status and body, both ports count the call
    assert post(decode, 8000, query="reset_external=true", transport="exec") == (200, [], b"")  # 0.23: empty 200
    ports = decode.state()["ports"]
    assert ports["8000"]["reset_calls"] == 1 and ports["8200"]["reset_calls"] == 1
    assert ports["8200"]["prefix_cache_blocks"] == 0
    assert ports["8200"]["last_transport"] == "exec"
    assert ports["8000"]["last_reset_query"] == "reset_external=true"
    # the sidecar answers /health itself; other paths are vLLM's
    assert decode.request(8000, "GET", "/health", "", {}, b"") == (200, [], b"")
    assert decode.request(8000, "GET", "/version", "", {}, b"")[2] == b'{"version":"0.23.0"}'  # type: ignore[index]
    # dev mode off on prefill: 404 from vLLM itself
    assert post(prefill, 8000)[0] == 404  # type: ignore[index]


@needs_fixtures
@needs_bwrap
def test_fixture03_modelservice(tmp_path: Path) -> None:
    t = load_templates("03-")
    decode = started(make_ctx(t["pd-llm-d-modelservice-decode"], tmp_path, pod="d"))
    assert roles(decode) == {8000: "sidecar", 8200: "vllm"}
    assert decode.state()["recorded_argv"]["vllm"][:5] == ["vllm", "serve", "facebook/opt-125m", "--port", "8200"]
    epp = started(make_ctx(t["pd-llm-d-modelservice-epp"], tmp_path, pod="e"))
    assert roles(epp) == {}
    assert epp.state()["vllm_container"] is None


@needs_fixtures
@needs_bwrap
def test_fixture05_tiers_warm_and_version_semantics(tmp_path: Path) -> None:
    spec = load_templates("05-")["gpu-vllm-decode"]
    rt = started(make_ctx(spec, tmp_path, overrides={"dev_mode": "on"}))
    st = rt.state()
    assert roles(rt) == {8000: "vllm"}
    assert st["version"] == "0.23.0"
    assert st["ports"]["8000"]["offload_cpu_blocks"] > 0
    assert st["ports"]["8000"]["prefix_cache_blocks"] == 512
    files = st["fs_tier_files"]
    assert any(f.endswith("/config.json") and f.startswith("/mnt/files-storage/Qwen_Qwen3-32B_") for f in files)
    bins = [f for f in files if f.endswith(".bin")]
    assert len(bins) == 4 and all("_r0/" in f and "_g0/" in f for f in bins)
    # the files really are on the PVC's host directory
    pvc = tmp_path / "pvc" / "llm-d-kv-cache-storage"
    # vLLM's run record: model_name is the model, and its canonical JSON hashes to the name
    (cfg,) = pvc.rglob("config.json")
    record = json.loads(cfg.read_text())
    assert record["model_name"] == "Qwen/Qwen3-32B" and cfg.read_text().startswith('{\n  "')
    canonical = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    assert cfg.parent.name == "Qwen_Qwen3-32B_" + hashlib.sha256(canonical).hexdigest()[:12]
    assert len([p for p in pvc.rglob("*") if p.is_file()]) == 5
    assert len(st["shm_files"]) == 1 and st["shm_files"][0].startswith("/dev/shm/vllm_offload_")
    # /dev/shm of this pod is the dshm volume (mounted over the pod shm dir)
    assert list((tmp_path / "pod-a" / "volumes" / "dshm").glob("vllm_offload_*.mmap"))
    # Tiering on 0.23: reset_external clears the GPU cache but not the CPU tier; FS never
    assert post(rt, 8000, query="reset_external=true") == (200, [], b"")
    after = rt.state()
    assert after["ports"]["8000"]["prefix_cache_blocks"] == 0
    assert after["ports"]["8000"]["offload_cpu_blocks"] == st["ports"]["8000"]["offload_cpu_blocks"]
    assert after["fs_tier_files"] == files and after["shm_files"] == st["shm_files"]
    # 0.24 clears the CPU tier (but still not FS files)
    rt24 = started(make_ctx(spec, tmp_path, overrides={"dev_mode": "on", "vllm_version": "0.24.0"},
                            pod="p24", uid="u24"))
    post(rt24, 8000, query="reset_external=true")
    s24 = rt24.state()
    assert s24["ports"]["8000"]["offload_cpu_blocks"] == 0
    # both pods share the PVC: 1 config (same model/layout) + 4 block files each
    assert len([f for f in s24["fs_tier_files"] if f.endswith(".bin")]) == 8


@needs_fixtures
@needs_bwrap
def test_fixture06_lws_dp_multiport(tmp_path: Path) -> None:
    t = load_templates("06-")
    decode = started(make_ctx(t["wide-ep-llm-d-decode"], tmp_path, extra_env=LWS_ENV, pod="d"))
    prefill = started(make_ctx(t["wide-ep-llm-d-prefill"], tmp_path, extra_env=LWS_ENV, pod="p"))
    assert roles(decode) == {**{p: "sidecar" for p in range(8000, 8008)}, **{p: "vllm" for p in range(8200, 8208)}}
    assert roles(prefill) == {p: "vllm" for p in range(8000, 8008)}
    assert 8208 not in roles(decode) and 8008 not in roles(prefill)
    argv = decode.state()["recorded_argv"]["vllm"]
    # the real shell expanded the LWS/DP variables
    assert argv[argv.index("--data-parallel-size") + 1] == "16"
    assert argv[argv.index("--data-parallel-address") + 1] == "wide-ep-0.wide-ep.default"
    assert argv[argv.index("--kv_transfer_config") + 1].startswith('{"kv_connector":"NixlConnector",')
    assert decode.state()["version"] == "0.26.0"  # llm-d-cuda-dev:sha-... is not in the table
    assert prefill.state()["version"] == "0.23.0"  # llm-d-cuda:v0.8.0
    # sidecar rank i forwards to vLLM rank i
    decode2 = started(make_ctx(t["wide-ep-llm-d-decode"], tmp_path, extra_env=LWS_ENV, pod="d2",
                               overrides={"dev_mode": "on"}))
    assert post(decode2, 8003) == (200, [("content-type", "application/json")], b'{"success":true}')
    ports = decode2.state()["ports"]
    assert ports["8203"]["reset_calls"] == 1 and ports["8203"]["prefix_cache_blocks"] == 0
    assert ports["8200"]["reset_calls"] == 0 and ports["8200"]["prefix_cache_blocks"] == 512


@needs_fixtures
@needs_bwrap
def test_fixture06_script_only_touches_pod_shm(tmp_path: Path) -> None:
    spec = load_templates("06-")["wide-ep-llm-d-prefill"]
    ctx = make_ctx(spec, tmp_path, extra_env=LWS_ENV)
    dshm = ctx.volume_dirs["dshm"]
    (dshm / "stale").write_text("x")
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    started(ctx)
    assert not (dshm / "stale").exists()  # the script's `find /dev/shm -type f -delete` ran in the pod
    assert outside.read_text() == "keep"


# --------------------------------------------------------------------------- without the sandbox


@needs_fixtures
def test_no_sandbox_literal_argv_and_override_ports(tmp_path: Path) -> None:
    t02 = load_templates("02-")
    rt = started(make_ctx(t02["pd-disaggregation-nvidia-gpu-vllm-decode"], tmp_path, sandbox=False, pod="a"))
    assert roles(rt) == {8000: "sidecar", 8200: "vllm"}
    spec05 = load_templates("05-")["gpu-vllm-decode"]
    script = started(make_ctx(spec05, tmp_path, sandbox=False, pod="b"))
    # a bash -c script is not run: its `exec vllm serve ...` is read (default port 8000)
    assert roles(script) == {8000: "vllm"}
    assert script.state()["recorded_argv"]["modelserver"][:3] == ["vllm", "serve", "Qwen/Qwen3-32B"]
    assert script.state()["vllm_container"] == "modelserver"
    ported = started(make_ctx(spec05, tmp_path, sandbox=False, overrides={"ports": [8000, 8001]}, pod="c"))
    assert roles(ported) == {8000: "vllm", 8001: "vllm"}
    assert ported.state()["recorded_argv"]["modelserver"][:2] == ["vllm", "serve"]


def _simple_spec(env: list[dict[str, str]] | None = None, image: str = "vllm/vllm-openai:v0.26.0",
                 args: list[str] | None = None) -> dict[str, Any]:
    return {"containers": [{"name": "vllm", "image": image, "args": args or ["org/m", "--port", "8100"],
                            "env": env or []}]}


@pytest.mark.parametrize("sandbox", [False, pytest.param(True, marks=needs_bwrap)])
def test_crash_on_invalid_dev_mode(tmp_path: Path, sandbox: bool) -> None:
    rt = started(make_ctx(_simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": "true"}]), tmp_path, sandbox=sandbox))
    assert rt.crashed
    assert rt.state()["dev_mode"] == "invalid"
    assert rt.request(8100, "GET", "/health", "", {}, b"") is None
    empty = started(make_ctx(_simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": ""}]), tmp_path,
                             sandbox=sandbox, pod="b"))
    assert empty.crashed
    ok = started(make_ctx(_simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": " 1"}]), tmp_path,
                          sandbox=sandbox, pod="c"))
    assert not ok.crashed and post(ok, 8100)[0] == 200  # type: ignore[index]
    forced = started(make_ctx(_simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]), tmp_path,
                              sandbox=sandbox, overrides={"dev_mode": "invalid"}, pod="d"))
    assert forced.crashed and forced.state()["env"]["VLLM_SERVER_DEV_MODE"] == "true"


def test_version_precedence_and_busy(tmp_path: Path) -> None:
    spec = _simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}], image="vllm/vllm-openai:v0.25.0")
    assert started(make_ctx(spec, tmp_path, sandbox=False)).state()["version"] == "0.25.0"
    assert started(make_ctx(spec, tmp_path, sandbox=False, version="0.12.0", pod="b")).state()["version"] == "0.12.0"
    rt = started(make_ctx(spec, tmp_path, sandbox=False, version="0.12.0", pod="c",
                          overrides={"vllm_version": "0.26.0", "busy": 1}))
    assert rt.state()["version"] == "0.26.0"
    assert post(rt, 8100)[2] == b'{"success":false}'  # type: ignore[index]
    assert post(rt, 8100)[2] == b'{"success":true}'  # type: ignore[index]
    # 0.12 ignores reset_external (the CPU tier stays) and 0.25 answers an empty 200
    cpu_args = ["org/m", "--port", "8100", "--kv-offloading-size", "4"]
    v12 = started(make_ctx(_simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}], args=cpu_args),
                           tmp_path, sandbox=False, version="0.12.0", pod="d"))
    assert post(v12, 8100, query="reset_external=true") == (200, [], b"")
    assert v12.state()["ports"]["8100"]["offload_cpu_blocks"] == 2048
    assert v12.state()["shm_files"] == []  # the shared-mmap CPU tier arrived in 0.20
    v26 = started(make_ctx(_simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}], args=cpu_args),
                           tmp_path, sandbox=False, pod="e"))
    assert post(v26, 8100, query="reset_external=true")[2] == b'{"success":true}'  # type: ignore[index]
    assert v26.state()["ports"]["8100"]["offload_cpu_blocks"] == 0
    assert len(v26.state()["shm_files"]) == 1


def test_odd_specs_never_raise(tmp_path: Path) -> None:
    for spec in ({}, {"containers": None}, {"containers": [{"name": "x"}]},
                 {"containers": [{"name": "y", "image": "busybox", "command": ["sleep", "1"]}]},
                 {"containers": ["garbage"]}):
        rt = started(make_ctx(spec, tmp_path, sandbox=False))
        assert rt.state()["ports"] == {} and not rt.crashed


def test_concurrent_requests_and_stop(tmp_path: Path) -> None:
    spec = _simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}])
    rt = started(make_ctx(spec, tmp_path, sandbox=False))
    errors: list[str] = []

    def worker() -> None:
        for _ in range(25):
            r = post(rt, 8100, query="reset_external=true")
            if r is None or r[0] != 200:
                errors.append(repr(r))
            rt.request(8100, "GET", "/metrics", "", {}, b"")

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    port = rt.state()["ports"]["8100"]
    assert port["reset_calls"] == 200 and port["metrics_calls"] == 200
    rt.stop()
    assert rt.request(8100, "GET", "/health", "", {}, b"") is None
    assert rt.state()["ports"]["8100"]["reset_calls"] == 200
    json.dumps(rt.state())  # state is plain JSON


def test_sidecar_tls_default_and_missing_vllm_port(tmp_path: Path) -> None:
    spec: dict[str, Any] = {
        "initContainers": [{"name": "routing-proxy", "image": "ghcr.io/llm-d/llm-d-routing-sidecar:v0.2.0",
                            "restartPolicy": "Always", "args": ["--port=8000"]}],
        "containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.26.0", "args": ["m", "--port", "8001"],
                        "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}]}],
    }
    rt = started(make_ctx(spec, tmp_path, sandbox=False))
    assert roles(rt) == {8000: "sidecar", 8001: "vllm"}  # legacy sidecar: --vllm-port defaults to 8001
    plain = rt.request(8000, "POST", "/reset_prefix_cache", "", {}, b"")
    assert plain is not None and plain[0] == 400 and b"HTTPS server" in plain[2]
    tls = rt.request(8000, "POST", "/reset_prefix_cache", "", {}, b"", scheme="https")
    assert tls == (200, [("content-type", "application/json")], b'{"success":true}')
    assert rt.state()["recorded_argv"]["routing-proxy"] == ["--port=8000"]
    # a sidecar whose vLLM port has no server answers 502 (Go ReverseProxy), /health still 200
    spec["initContainers"][0]["args"] = ["--port=8000", "--vllm-port=9999", "--secure-proxy=false"]
    lonely = started(make_ctx(spec, tmp_path, sandbox=False, pod="b"))
    assert lonely.request(8000, "GET", "/v1/models", "", {}, b"") == (502, [], b"")
    assert lonely.request(8000, "GET", "/health", "", {}, b"") == (200, [], b"")
    # ordinary (non-sidecar) init containers are not run and serve nothing
    spec["initContainers"][0].pop("restartPolicy")
    assert roles(started(make_ctx(spec, tmp_path, sandbox=False, pod="c"))) == {8001: "vllm"}


def test_cold_override_empties_warm_caches(tmp_path: Path) -> None:
    spec = _simple_spec([{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}])
    warm = started(make_ctx(spec, tmp_path, sandbox=False, pod="w"))
    cold = started(make_ctx(spec, tmp_path, sandbox=False, pod="c", overrides={"cold": True}))
    port = next(iter(warm.state()["ports"]))
    assert warm.state()["ports"][port]["prefix_cache_blocks"] == 512
    assert cold.state()["ports"][port]["prefix_cache_blocks"] == 0
