"""SGLang pods of ``--real-servers sglang`` without the install: what is recognised as SGLang or
its router, the CPU server's arguments, and the CPU stand-ins (tests/sim/realsglang.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.sim.realpeers import real_kind
from tests.sim.realsglang import CPU_FLAGS, launch_parts, sglang_args, sglang_command, sglang_env, write_standins


def test_commands_recognised() -> None:
    plain = ["python3", "-m", "sglang.launch_server", "--model-path", "M", "--port", "8000"]
    assert sglang_command(plain) == ("sglang", ["--model-path", "M", "--port", "8000"])
    assert sglang_command(["sglang", "serve", "--port", "1"]) == ("sglang", ["--port", "1"])
    script = "set -e\nexec python3 -m sglang.launch_server --model-path M \\\n  --port 8000 && echo done\n"
    assert sglang_command(["/bin/bash", "-c", script]) == ("sglang", ["--model-path", "M", "--port", "8000"])
    router = ["python", "-m", "sglang_router.launch_router", "--worker-urls", "http://a:8000"]
    assert sglang_command(router) == ("sglang-router", ["--worker-urls", "http://a:8000"])
    assert sglang_command(["vllm", "serve", "M"]) is None
    # an llm-d image counts as vLLM by its name; the command says SGLang
    c = {"name": "modelserver", "image": "ghcr.io/llm-d/llm-d-cuda:v1.0.0", "command": plain}
    assert real_kind(c, plain) == "sglang"


def test_server_args_and_env() -> None:
    args = ["--model-path", "Qwen/Qwen3-0.6B", "--port", "8000", "--host", "0.0.0.0", "--tp", "1",
            "--dp-size", "2", "--enable-cache-report", "--admin-api-key", "K"]
    tail, port, dp, dropped = sglang_args(args, "/.sim/model", "127.9.1.1")
    assert (port, dp, dropped) == (8000, 2, ["--tp"])
    assert tail[:2] == ["--model-path", "/.sim/model"]
    assert tail[-len(CPU_FLAGS):] == CPU_FLAGS
    assert ["--served-model-name", "Qwen/Qwen3-0.6B"] == tail[tail.index("--served-model-name"):][:2]
    assert "--admin-api-key" in tail and ["--host", "127.9.1.1"] == tail[tail.index("--host"):][:2]
    env = sglang_env({}, 2)
    assert env["SGLANG_USE_CPU_ENGINE"] == "1" and env["SGLANG_CPU_OMP_THREADS_BIND"].count("|") == 1
    assert "SGLANG_CPU_OMP_THREADS_BIND" not in sglang_env({}, 1)
    parts = launch_parts("sglang-router", ["--host", "0.0.0.0", "--port", "8000"], "", "127.9.1.2", {})
    assert parts["ports"] == [8000, 29000]
    assert parts["tail"] == ["--port", "8000", "--health-check-endpoint", "/ready", "--host", "127.9.1.2",
                             "--prometheus-host", "127.9.1.2"]
    assert env["KVRESET_SIM_SGLANG_CPU_HICACHE"] == "1"
    own = launch_parts("sglang-router", ["--health-check-endpoint=/health"], "", "127.9.1.2", {})["tail"]
    assert own.count("--health-check-endpoint=/health") == 1 and "/ready" not in own


def test_standins(tmp_path: Path) -> None:
    where = write_standins(tmp_path)
    probe = textwrap.dedent("""\
        import sgl_kernel, torchvision
        from torchvision.transforms import InterpolationMode
        from torchvision.io import decode_image
        try:
            sgl_kernel.fused_add_rmsnorm(1)
        except NotImplementedError as e:
            print("sgl_kernel.fused_add_rmsnorm" in str(e))
        try:
            decode_image(b"")
        except NotImplementedError as e:
            print("torchvision.io.decode_image" in str(e))
        print(InterpolationMode.BICUBIC is not None)
        """)
    out = subprocess.run([sys.executable, "-c", probe], env={"PYTHONPATH": str(where)}, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True", "True"]
