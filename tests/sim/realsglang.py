"""A real SGLang 0.5.23 and sglang-router 0.3.2 (``make peers``: .peers/sglang) as pod containers
(tests/sim/realservers.py, ``--real-servers sglang``).

Recognised commands (the plain command and args forms llm-d's SGLang pods use, and the same in a
``bash -c``/``sh -c`` script): ``python3 -m sglang.launch_server ...``, ``sglang serve ...``, and
``python -m sglang_router.launch_router ...``.

**SGLang on CPU.** The server runs SGLang's CPU engine (``SGLANG_USE_CPU_ENGINE=1``) on the tiny
model (tests/peers/tinymodel.py) with dummy weights. Two packages it imports have no CPU build on
the index, so stand-ins are put first on its ``PYTHONPATH`` (:func:`write_standins`): ``sgl_kernel``
(sglang-kernel holds only CUDA libraries; SGLang's CPU path imports it at start,
``sglang/srt/mem_cache/cache_move.py``), whose module ``__getattr__`` gives functions that raise
``NotImplementedError`` naming themselves (none is called by the radix cache, ``/flush_cache``,
metrics or data parallel), and ``torchvision`` (PyPI's is a CUDA build), every submodule importable,
every attribute a placeholder that raises when called. The CPU flags are added
(:data:`CPU_FLAGS`); the manifest's flags that matter to a cache reset are passed on
(:data:`SGLANG_PASS_FLAGS`), the rest dropped and listed in the pod's notes. ``--dp-size N`` gets
``SGLANG_CPU_OMP_THREADS_BIND`` with one CPU per rank (SGLang asserts one entry per rank,
``sglang/srt/utils/common.py`` ``get_cpu_ids_by_node``); each rank is about 2 GiB more.

**HiCache on CPU.** Every SGLang server gets ``KVRESET_SIM_SGLANG_CPU_HICACHE=1``, which makes the
pod's ``sitecustomize`` (tests/sim/realsite.py) build the host KV pool unpinned and bind the
``direct`` io backend's ``transfer_kv_direct`` to a plain torch index copy
(``sglang/srt/mem_cache/pool_host/mha.py`` imports it only on CUDA/ROCm/XPU). A manifest then runs
``--enable-hierarchical-cache --hicache-io-backend direct --hicache-mem-layout layer_first`` with
any storage backend SGLang's CPU build has, e.g. ``--hicache-storage-backend file`` with
``SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR`` on a volume of the pod (a PVC: one directory for
every pod of the claim, tests/sim/podvolumes.py).

**sglang-router.** Its periodic worker health checks go to ``/ready`` unless the manifest chooses
(:func:`router_args`).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from .argvflag import _flag_value

__all__ = ["CPU_FLAGS", "SGLANG_PASS_FLAGS", "router_args", "sglang_args", "sglang_command",
           "sglang_env", "write_standins"]

SGLANG_PASS_FLAGS = {
    "--port": 1, "--served-model-name": 1, "--dp-size": 1, "--dp": 1, "--data-parallel-size": 1,
    "--enable-cache-report": 0, "--enable-metrics": 0, "--api-key": 1, "--admin-api-key": 1,
    "--disable-radix-cache": 0, "--page-size": 1, "--max-running-requests": 1,
    "--enable-hierarchical-cache": 0, "--hicache-ratio": 1, "--hicache-size": 1,
    "--hicache-storage-backend": 1, "--hicache-write-policy": 1, "--hicache-io-backend": 1,
    "--hicache-mem-layout": 1, "--hicache-storage-prefetch-policy": 1, "--log-level": 1,
    "--enable-cache-report-details": 0, "--chunked-prefill-size": 1, "--schedule-policy": 1,
}
"""SGLang server flags passed on to the CPU server (value count)."""

CPU_FLAGS = ["--device", "cpu", "--load-format", "dummy", "--disable-cuda-graph",
             "--mem-fraction-static", "0.1", "--attention-backend", "torch_native",
             "--sampling-backend", "pytorch", "--grammar-backend", "none", "--max-total-tokens", "4096"]
"""What SGLang's CPU engine needs to serve the tiny model with dummy weights."""

_SGL_KERNEL = '''"""Stand-in for sgl_kernel on a CPU (set up by the simulator): every function raises."""


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise NotImplementedError("sgl_kernel.%s: not available (CPU stand-in)" % name)

    missing.__name__ = name
    return missing
'''

_TORCHVISION = '''"""Stand-in for torchvision on the CPU torch (set up by the simulator): every submodule
imports, every attribute is a placeholder that raises when called."""
import importlib.abc as _abc
import importlib.machinery as _mach
import sys as _sys
import types as _types

__version__ = "0.0.0+kvreset.standin"


class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(cls.__qualname__ + "." + name)

    def __call__(cls, *args, **kwargs):
        raise NotImplementedError("%s: torchvision is not available (CPU stand-in)" % cls.__qualname__)


def _placeholder(name):
    return _Meta(name.rsplit(".", 1)[-1], (), {"__qualname__": name})


def _module_getattr(modname):
    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _placeholder(modname + "." + name)
    return __getattr__


__getattr__ = _module_getattr(__name__)


class _Finder(_abc.MetaPathFinder, _abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.startswith("torchvision."):
            return _mach.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__getattr__ = _module_getattr(spec.name)
        return mod

    def exec_module(self, module):
        pass


_sys.meta_path.insert(0, _Finder())
'''


def write_standins(run: Path) -> Path:
    """Write the ``sgl_kernel`` and ``torchvision`` stand-ins under ``run/sgl-standins`` (module
    docstring); returns that directory (for ``PYTHONPATH``)."""
    out = run / "sgl-standins"
    for pkg, text in (("sgl_kernel", _SGL_KERNEL), ("torchvision", _TORCHVISION)):
        (out / pkg).mkdir(parents=True, exist_ok=True)
        (out / pkg / "__init__.py").write_text(text)
    return out


def _script_argv(argv: list[str]) -> list[str]:
    """A ``sh -c``/``bash -c`` script split as the shell would (only its first command that
    mentions sglang, up to ``&&``/``;``/``|``); other argv as they are."""
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("sh", "bash") and argv[1] in ("-c", "-ec", "-lc"):
        words = []
        try:
            for line in argv[2].replace("\\\n", " ").splitlines():
                words += [*shlex.split(line, comments=True), ";"]
        except ValueError:
            return argv
        cmd: list[str] = []
        for w in [*words, ";"]:
            if w in ("&&", ";", "||", "|", "&"):
                if any("sglang" in t for t in cmd):
                    return [t for t in cmd if t != "exec"]
                cmd = []
            else:
                cmd.append(w)
    return argv


def sglang_command(argv: list[str] | None) -> tuple[str, list[str]] | None:
    """``(kind, args after the module/subcommand)`` for an SGLang command line: kind ``sglang``
    (``-m sglang.launch_server``, ``sglang serve``) or ``sglang-router``
    (``-m sglang_router.launch_router``); None for anything else."""
    words = _script_argv(list(argv or []))
    for i, tok in enumerate(words):
        if tok == "-m" and i + 1 < len(words):
            if words[i + 1] == "sglang.launch_server":
                return "sglang", words[i + 2:]
            if words[i + 1] == "sglang_router.launch_router":
                return "sglang-router", words[i + 2:]
        if os.path.basename(tok) == "sglang" and i + 1 < len(words) and words[i + 1] == "serve":
            return "sglang", words[i + 2:]
    return None


def sglang_args(args: list[str], model_dir: str, pod_ip: str) -> tuple[list[str], int, int, list[str]]:
    """The CPU server's arguments for the manifest's ``args``: ``(argv tail, port, dp size,
    dropped flags)``; the model is ``model_dir`` (served under the manifest's
    ``--served-model-name``, else its ``--model-path``)."""
    passed: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        flag = tok.split("=", 1)[0]
        n = 0
        if tok.startswith("-") and "=" not in tok:
            while i + 1 + n < len(args) and not args[i + 1 + n].startswith("--"):
                n += 1
        if not tok.startswith("-"):
            i += 1
            continue
        if flag in SGLANG_PASS_FLAGS and flag != "--port":
            passed += args[i:i + 1 + n]
        elif flag not in ("--port", "--host", "--model-path", "--model", "--tokenizer-path"):
            dropped.append(flag)
        i += 1 + n
    port = int(_flag_value(args, "--port") or 30000)
    dp = int(_flag_value(args, "--dp-size", "--dp", "--data-parallel-size") or 1)
    if "--served-model-name" not in passed:
        passed += ["--served-model-name", _flag_value(args, "--model-path", "--model") or "default"]
    tail = ["--model-path", model_dir, *passed, "--host", pod_ip, "--port", str(port), *CPU_FLAGS]
    return tail, port, dp, dropped


def sglang_env(env: dict[str, str], dp: int) -> dict[str, str]:
    """``env`` plus what the CPU engine needs (module docstring)."""
    out = dict(env)
    out.update({"SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    out.setdefault("OMP_NUM_THREADS", "1")
    out["KVRESET_SIM_SGLANG_CPU_HICACHE"] = "1"   # HiCache's host pool on a CPU (tests/sim/realsite.py)
    if dp > 1 and "SGLANG_CPU_OMP_THREADS_BIND" not in out:
        cpus = max(1, os.cpu_count() or 1)
        out["SGLANG_CPU_OMP_THREADS_BIND"] = "|".join(str(r % cpus) for r in range(dp))
    return out


def router_args(args: list[str], pod_ip: str) -> tuple[list[str], list[int]]:
    """sglang-router's arguments: the manifest's with ``--host`` and ``--prometheus-host`` = the
    pod address (its Rust listeners bind what they are told, the Prometheus one 0.0.0.0:29000 by
    default); ``(argv tail, [port, Prometheus port])`` (defaults 30000 and 29000, sglang-router's
    ``router_args.py``). Unless the manifest chooses (``--health-check-endpoint``,
    ``--disable-health-check``), the router's periodic worker checks go to ``/ready``, not its
    default ``/health``: on SGLang 0.5.23 ``/health`` runs a one-token generation
    (sglang/srt/entrypoints/http_server.py ``health_generate``, ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION``
    on by default), and a ``/flush_cache`` landing during it answers 400 ``Flush cache failed.``:
    a flake for every test that flushes a worker a router fronts. The real race stays: a real
    router checks ``/health`` every 60 s by default."""
    out: list[str] = []
    skip = False
    for tok in args:
        if skip:
            skip = False
            continue
        if tok in ("--host", "--prometheus-host"):
            skip = True
            continue
        if tok.startswith(("--host=", "--prometheus-host=")):
            continue
        out.append(tok)
    port = int(_flag_value(args, "--port") or 30000)
    prom = int(_flag_value(args, "--prometheus-port") or 29000)
    if not any(t.split("=", 1)[0] in ("--health-check-endpoint", "--disable-health-check") for t in out):
        out += ["--health-check-endpoint", "/ready"]
    return [*out, "--host", pod_ip, "--prometheus-host", pod_ip], [port, prom]


def launch_parts(kind: str, args: list[str], model_dir: str, pod_ip: str,
                 env: dict[str, str]) -> dict[str, Any]:
    """Everything :class:`tests.sim.realprocess.Launch` needs for ``kind`` except the paths:
    ``module``, ``tail``, ``ports``, ``probe``, ``env``, ``dropped``."""
    if kind == "sglang":
        tail, port, dp, dropped = sglang_args(args, model_dir, pod_ip)
        return {"module": "sglang.launch_server", "tail": tail, "ports": [port],
                "probe": ("http", port, "/ready"), "env": sglang_env(env, dp), "dropped": dropped}
    tail, ports = router_args(args, pod_ip)
    renv = dict(env)
    renv.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    return {"module": "sglang_router.launch_router", "tail": tail, "ports": ports,
            "probe": ("http-any", ports[0], "/health"), "env": renv, "dropped": []}
