"""Tests of the simulator as a whole: real pod runtimes behind the proxy, ``python -m tests.sim serve``,
threads after stop, the state of many pods on a shared PVC."""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.sim import pods as simpods
from tests.sim.__main__ import Simulator, bwrap_works
from tests.sim.scenario import parse_scenario
from tests.sim.simapikit import (
    MANIFEST,
    REPO,
    STANDIN,
    Client,
    fixture,
)


@pytest.fixture(scope="module")
def real_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    pytest.importorskip("tests.sim.pods")
    f02 = fixture("02")
    s = Simulator([str(f02)], namespace="llm", dev_mode="on", ready_delay=0.05,
                  sandbox=bwrap_works(),
                  state_dir=tmp_path_factory.mktemp("real") / "state")
    s.start()
    yield s
    s.stop()


def test_real_pods_reset_through_proxy(real_sim: Simulator) -> None:
    api = Client(real_sim)
    decode = [r for r in real_sim.cluster.records() if r.owner and
              r.owner[1].endswith("decode")]
    assert len(decode) == 2 and all(r.ready for r in decode)
    rec = decode[0]
    code, body, _ = api.call(
        "POST", f"/api/v1/namespaces/llm/pods/{rec.name}:8000/proxy/reset_prefix_cache"
        "?reset_external=true", b"")
    assert code == 200, body
    code, body, _ = api.call("GET", f"/api/v1/namespaces/llm/pods/{rec.name}:8200/proxy/version")
    assert code == 200 and body == {"version": "0.23.0"}
    code, st, _ = api.call("GET", "/sim/v1/state")
    mine = next(p for p in st["pods"] if p["name"] == rec.name)
    assert mine["owner"]["kind"] == "Deployment" and mine["ready"] is True
    assert mine["dev_mode"] == "on"
    assert mine["ports"]["8200"]["reset_calls"] == 1
    assert mine["ports"]["8200"]["last_transport"] == "proxy"
    assert mine["ports"]["8200"]["last_reset_query"] == "reset_external=true"
    assert mine["ports"]["8200"]["prefix_cache_blocks"] == 0
    other = next(p for p in st["pods"] if p["name"] == decode[1].name)
    assert other["ports"]["8200"]["reset_calls"] == 0
    assert mine["env"]["VLLM_NIXL_SIDE_CHANNEL_HOST"] == rec.pod_ip


def test_cli_serve_subprocess(tmp_path: Path) -> None:
    m = tmp_path / "m.yaml"
    m.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: other}\n"
                 "spec: {containers: [{name: c, image: busybox}]}\n---\n# only a comment\n")
    kc = tmp_path / "kc.yaml"
    state = tmp_path / "state"
    proc = subprocess.Popen([sys.executable, "-m", "tests.sim", "serve", "--manifest", str(m),
                             "--kubeconfig", str(kc), "--no-sandbox", "--namespace", "ns9",
                             "--state-dir", str(state), "--ready-delay", "0"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line == "ready\n"
        cfg: dict[str, Any] = yaml.safe_load(kc.read_text())
        assert cfg["contexts"][0]["context"]["namespace"] == "ns9"
        server = cfg["clusters"][0]["cluster"]["server"]
        import base64
        ca = base64.b64decode(cfg["clusters"][0]["cluster"]["certificate-authority-data"])
        ctx = ssl.create_default_context(cadata=ca.decode())
        req = urllib.request.Request(server + "/api/v1/namespaces/other/pods/p", headers={
            "Authorization": f"Bearer {cfg['users'][0]['user']['token']}"})
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            pod = json.loads(r.read())
        assert pod["metadata"]["namespace"] == "other"
    finally:
        proc.terminate()
        rc = proc.wait(timeout=15)
    assert rc == 0
    assert state.is_dir()  # kept: given with --state-dir


def test_threads_do_not_leak_on_stop(tmp_path: Path) -> None:
    before = threading.active_count()
    m = tmp_path / "m.yaml"
    m.write_text(MANIFEST)
    s = Simulator([str(m)], state_dir=None, ready_delay=0, backend=STANDIN)
    s.start()
    sd = s.state_dir
    s.stop()
    assert not sd.exists()  # temporary state dir removed
    time.sleep(0.3)
    assert threading.active_count() <= before + 2


def test_state_with_many_pods_on_a_shared_pvc(tmp_path: Path) -> None:
    """/sim/v1/state walks a PVC shared by every pod once per snapshot, not once per pod."""
    if not bwrap_works():
        pytest.skip("bubblewrap cannot run here: the FS tier comes from the recorded argv")
    f05 = fixture("05-")
    s = Simulator([str(f05)], namespace="llm", dev_mode="on", ready_delay=0.0, sandbox=True,
                  scenario=parse_scenario({"replicas": {"deployment/gpu-vllm-decode": 128}}),
                  state_dir=tmp_path / "state")
    s.start(wait=120)
    walked: list[str] = []
    real_walk = simpods.os.walk

    def counting_walk(top: str, *args: Any, **kwargs: Any) -> Any:
        walked.append(str(top))
        return real_walk(top, *args, **kwargs)

    try:
        simpods.os.walk = counting_walk  # type: ignore[assignment]
        try:
            code, st, _ = Client(s).call("GET", "/sim/v1/state")
        finally:
            simpods.os.walk = real_walk  # type: ignore[assignment]
        assert code == 200 and len(st["pods"]) == 128
        files = st["pods"][0]["fs_tier_files"]
        assert len(files) == 128 * 4 + 1 and all(f.startswith("/mnt/files-storage/")
                                                 for f in files)
        assert st["pods"][-1]["fs_tier_files"] == files
        # one walk of each directory per snapshot, however many pods mount it
        assert walked and len(walked) == len(set(walked)) and len(walked) < 128, walked
    finally:
        s.stop()
