"""Pods that run the real servers installed by ``make peers`` (``serve --real-servers LIST``).

A pod of the simulated cluster whose container runs one of these servers runs it for real, in a
bubblewrap sandbox with the pod's filesystem view (tests/sim/sandbox.py ``pod_view_argv``: its
ConfigMaps, Secrets, emptyDirs and PVCs at their mount paths, its /dev/shm), the container's
resolved environment, and the pod's hosts file at /etc/hosts (tests/sim/network.py), while
sharing the machine's network so that it can listen on its pod address. Per peer (``LIST``):

- ``redis``: a container with ``redis-server`` in the argv, or a ``redis``/``valkey`` image
  without command, runs Debian's ``redis-server`` with the container's args, plus
  ``--bind POD_IP --protected-mode no``.
- ``mooncake``: ``mooncake_master`` / ``mooncake_client`` run the venv's binary;
  ``--rpc_address``/``--host`` = POD_IP; the HTTP metadata server, which binds 0.0.0.0 whatever
  the flags say, gets a free port and the manifest's port is relayed to it from POD_IP.
- ``lmcache``: ``lmcache_controller``, ``-m lmcache.v1.standalone`` (a worker without vLLM),
  ``lmcache server`` (the MP server) run the command as written, with the LMCache venv first on
  PATH.
- ``sglang``: ``python3 -m sglang.launch_server`` / ``sglang serve`` run SGLang's CPU engine on
  the tiny model, ``python -m sglang_router.launch_router`` the router (tests/sim/realsglang.py).
- ``vllm``: the vLLM container (tests/sim/podspecs.py ``is_vllm_container``) runs vLLM's CPU
  build serving the tiny model (tests/peers/tinymodel.py) with ``--load-format dummy`` under the
  manifest's served model name(s) and port.

``all`` means every peer that is installed. A scenario rule may set ``real_server: true`` (or
``false``) for one pod instead. In a pod where another container runs a real server, a vLLM
container that runs no real vLLM gets the simulator's fake vLLM (for example a standalone LMCache
worker beside a fake vLLM, as the stand-in for vLLM's in-process LMCache engine); its ports are
answered through the pod proxy, not through port-forward.

**The pod's network, emulated.** Each pod would have its own network namespace, where binding
``0.0.0.0`` is harmless; here every pod shares the machine's loopback, so a server must bind its
pod address. Python servers get a ``sitecustomize`` (:data:`tests.sim.realsite.SITECUSTOMIZE`,
on ``PYTHONPATH``) that maps a bind of ``0.0.0.0``/``""``/``*`` to the pod address (``socket`` and ``zmq``), and
turns the "UDP connect to a public address to learn my IP" idiom (LMCache ``rpc_utils.get_ip``,
vLLM ``get_ip``) into the pod address, as the pod's default route would; any TCP connection or
datagram to an address outside 127.0.0.0/8 is refused with ``ENETUNREACH``. Nothing leaves the
loopback. C servers get flags (above).

**vLLM on CPU.** Flags the CPU build cannot run are refused when the manifests load, naming the
flag (:func:`cpu_refusals`): tensor/pipeline parallel size > 1, data parallel other than internal
load balancing (:data:`tests.sim.realpeers.DP_OUTSIDE_FLAGS`), expert parallel, ``--kv-offloading-size`` and the
OffloadingConnector, NIXL, P2P NCCL and Mooncake (transfer) connectors (vLLM
``vllm/platforms/cpu.py``). ``--data-parallel-size N`` alone runs: N engines behind the one API port, about
3.5 GB each (run such a pod alone). Other flags that matter to the plugin are passed on
(:data:`VLLM_PASS_FLAGS`); the rest are dropped and listed in the pod's notes. The env adds
``VLLM_TARGET_DEVICE=cpu``, ``VLLM_CPU_KVCACHE_SPACE=1``, ``VLLM_CPU_OMP_THREADS_BIND=nobind``,
``HF_HUB_OFFLINE=1`` and ``VLLM_HOST_IP`` = the pod address; the pod's ``VLLM_SERVER_DEV_MODE``
is kept as it is (so an invalid value crashes the real server too). A vLLM whose
``--kv-transfer-config`` names ``LMCacheMPConnector`` gets the LMCache venv's site-packages
appended after its own (``KVRESET_SIM_APPEND_SITE``, read by the ``sitecustomize``), so vLLM
0.32.0 loads LMCache 0.5.6's connector class and its own torch and zmq win; the ``lmcache
server`` it names must run with ``--supported-transfer-mode auto`` (``tests/peers/test_real_mp_reset.py``:
otherwise the CPU worker's ``engine_driven`` context is refused and vLLM
never gets ready). A vLLM whose connector is LMCache's in-process one (``LMCacheConnectorV1``,
:data:`tests.sim.realpeers.LMCACHE_IN_PROCESS`) gets the same packages, and its ``sitecustomize``
makes LMCache's ``CreateGPUConnector`` return LMCache's own ``MockGPUConnector`` for vLLM (``lmcache/v1/
gpu_connector``: 0.5.6 has no connector for vLLM's paged memory on a CPU device, logs "No
supported cpu connector found" and runs in degraded mode, never hitting): LMCache's keys,
lookups, hits and clears are then real, only the KV bytes are not copied. The servers LMCache runs
in the vLLM process, read from the pod's ``LMCACHE_CONFIG_FILE`` (the internal API on
``internal_api_server_port_start`` + 0..N, the controller's ``lmcache_worker_ports``), are the
pod's ports too.

**Lifecycle.** Servers start when the pod starts; the pod is Ready while each server's own
health answer is good (:meth:`RealServer.healthy`: Redis ``PING`` -> ``PONG``, vLLM
``/health`` 200, the MP server ``/healthcheck``, Mooncake's ``/metrics``, an HTTP answer from the
LMCache controller's and worker's ports), probed every second by the cluster. A server that
exits is restarted with a back-off (1, 2, 4 .. 16 s), as the kubelet restarts a container, so a
server started before its peer catches up. Stopping: every process of the sandbox but bubblewrap
itself gets SIGTERM, then, after :data:`STOP_GRACE` seconds, the sandbox's process group and pid
namespace get SIGKILL; the cluster stops workers (rank 0) before their stores (rank 1). When
the simulator itself is killed (SIGKILL, no stop at all), ``--die-with-parent`` kills each
sandbox's bubblewrap, whose pid namespace takes every server process with it; what they shared
(vLLM's ``psm_*`` segments and semaphores, torch's) is in the pod's /dev/shm directory under the
state dir, never in the machine's /dev/shm, and their sockets and temporary files in the
sandbox's own /tmp tmpfs, so the launcher's removal of the state dir (tests/simctl.py
``SimCluster.stop``) leaves nothing (tests/peers/test_sim_sigkill.py).
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import threading
from pathlib import Path
from typing import Any

import yaml

from .mpstore import mp_extra
from .pods import PodContext, PodRuntime
from .realpeers import (
    LMCACHE_IN_PROCESS,
    PEER_NAMES,
    _base_prefix,
    _connector_names,
    _flag_value,
    _peers,
    _venv_of,
    _vllm_container,
    _without_flags,
    check_manifest_object,
    cpu_refusals,
    parse_real_servers,
    peer_of,
    real_kind,
)
from .realprocess import (
    Launch,
    RealServer,
    _free_port,
)
from .realsglang import launch_parts, sglang_command, write_standins
from .realsite import (
    SITECUSTOMIZE,
)
from .sandbox import DEFAULT_PATH, container_host_path, pod_view_argv, volume_binds
from .serveargs import container_argv

__all__ = ["PEER_NAMES", "RealPodRuntime", "RealServer", "cpu_refusals", "check_manifest_object",
           "make_runtime", "parse_real_servers", "real_kind"]

STORE_KINDS = {"redis", "mooncake-master", "lmcache-controller", "lmcache-mp"}
SIM_DIR = "/.sim/real"
MODEL_DIR = "/.sim/model"

VLLM_PASS_FLAGS = {
    "--served-model-name": "many", "--port": 1, "--kv-events-config": 1,
    "--enable-prefix-caching": 0, "--no-enable-prefix-caching": 0, "--kv-transfer-config": 1,
    "--max-num-seqs": 1, "--prefix-caching-hash-algo": 1, "--api-key": 1,
    "--data-parallel-size": 1, "-dp": 1, "--enable-prompt-tokens-details": 0,
    "--enable-log-requests": 0, "--disable-log-requests": 0, "--disable-log-stats": 0,
}
"""vLLM flags passed on to the real server (value count; ``many``: values up to the next flag)."""


_TINY_LOCK = threading.Lock()


def _tiny_model(state_dir: Path) -> Path:
    out = state_dir / "models" / "tiny"
    with _TINY_LOCK:
        from tests.peers.tinymodel import write_tiny_model
        return write_tiny_model(out)


class RealPodRuntime(PodRuntime):
    """A pod whose containers run real servers (module docstring). Containers that run none of
    them run nothing (noted). Implements the runtime protocol of tests/sim/controllers.py plus
    ``connect(port)`` (a TCP connection to the server, for port-forward, exec and Service
    relays), ``is_ready()`` (every server healthy), ``probe()`` (restart exited servers) and
    ``stop_rank`` (0: a worker/engine, 1: a store, stopped after the workers)."""

    def __init__(self, ctx: PodContext) -> None:
        super().__init__(ctx)
        self.servers: list[RealServer] = []
        self.stop_rank = 0
        self.real_ports: dict[int, RealServer] = {}
        self._fake_ports: set[int] = set()

    # ---- start ----
    def start(self) -> None:
        """Work out each container's server and launch it; never raises (reasons in notes)."""
        try:
            self._start_real()
        except Exception as exc:  # noqa: BLE001 - a pod must never take the server down
            self.notes.append(f"start failed: {type(exc).__name__}: {exc}")
        finally:
            self._started = True

    def _start_real(self) -> None:
        ctx, spec = self.ctx, self.ctx.spec or {}
        allowed = set(ctx.overrides.get("real_servers") or [])
        forced = ctx.overrides.get("real_server")
        fake_vllm: list[dict[str, Any]] = []
        for c in [c for c in spec.get("containers") or [] if isinstance(c, dict)]:
            name = str(c.get("name") or "")
            env = dict(ctx.env_by_container.get(name) or {})
            if _vllm_container(c):
                self._apply_dev_override(env)
                self._vllm_container = name
            self._env[name] = env
            argv = container_argv(c, env)
            kind = real_kind(c, argv)
            if kind is None or (forced is not True and peer_of(kind) not in allowed):
                if _vllm_container(c):
                    fake_vllm.append(c)
                else:
                    self.notes.append(f"container {name}: runs no real server")
                continue
            if _peers().missing(peer_of(kind)):
                self.notes.append(f"container {name}: {peer_of(kind)} is not installed "
                                  "(run make peers); it runs nothing")
                continue
            launch = self._launch(kind, c, name, env, argv)
            if launch is None:
                continue
            if kind in STORE_KINDS:
                self.stop_rank = 1
            binds = volume_binds(c, ctx.volume_dirs)
            self._recorded[name] = list(launch.argv)
            server = RealServer(launch, ctx.pod_ip, self._bwrap(binds, launch),
                                ctx.work_dir / "logs" / f"{name}.log")
            self.servers.append(server)
            for p in launch.ports:
                self.real_ports[p] = server
        for s in self.servers:
            s.start()
        if fake_vllm:
            self._start_fake(fake_vllm)

    def _start_fake(self, containers: list[dict[str, Any]]) -> None:
        """The vLLM containers that run no real vLLM get the simulator's fake vLLM, as in a pod
        without real servers (a pod whose other container runs, say, a real LMCache worker)."""
        full = self.ctx
        spec = dict(full.spec or {})
        spec["containers"] = containers
        self.ctx = dataclasses.replace(full, spec=spec)
        try:
            PodRuntime._start(self)
        finally:
            self.ctx = full
        self._fake_ports = set(PodRuntime.served_ports(self))

    def _bwrap(self, binds: list[Any], launch: Launch) -> list[str]:
        ctx = self.ctx
        view = pod_view_argv(binds, ctx.shm_dir)
        # the machine's network (the pod's address is one of its loopback addresses), its own
        # pid namespace (so nothing outlives it), and no new session (one process group)
        view = [t for t in view if t not in ("--unshare-all", "--new-session")]
        view[1:1] = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        run = ctx.work_dir / "real"
        run.mkdir(parents=True, exist_ok=True)
        (run / "sitecustomize.py").write_text(SITECUSTOMIZE)
        hosts = ctx.overrides.get("hosts_file")
        # /sys read-only: vLLM's CPU worker asks lscpu for the CPU topology
        view += ["--ro-bind", "/sys", "/sys", "--ro-bind", str(run), SIM_DIR]
        if hosts:
            view += ["--ro-bind", str(hosts), "/etc/hosts"]
        for host, dest in launch.extra_binds:
            view += ["--ro-bind", host, dest]
        view += ["--hostname", ctx.name[:63] or "pod", "--chdir", "/", "--clearenv"]
        for k, v in sorted(launch.env.items()):
            view += ["--setenv", k, v]
        return view

    def _base_env(self, env: dict[str, str], bins: list[str]) -> dict[str, str]:
        out = dict(env)
        path = out.get("PATH") or DEFAULT_PATH
        out["PATH"] = ":".join([*bins, path])
        out.setdefault("HOSTNAME", self.ctx.name)
        out["HOME"] = "/tmp/home"
        out["KVRESET_SIM_POD_IP"] = self.ctx.pod_ip
        out["POD_IP"] = out.get("POD_IP") or self.ctx.pod_ip
        out["PYTHONPATH"] = ":".join(p for p in (SIM_DIR, out.get("PYTHONPATH", "")) if p)
        out.setdefault("PYTHONUNBUFFERED", "1")
        return out

    def _venv_binds(self, exe: str) -> list[tuple[str, str]]:
        venv = _venv_of(exe)
        out = [(str(venv), str(venv))]
        base = _base_prefix(venv)
        if base is not None and not str(base).startswith(("/usr", "/bin", "/lib")):
            out.append((str(base), str(base)))
        return out

    def _launch(self, kind: str, c: dict[str, Any], name: str, env: dict[str, str],
                argv: list[str] | None) -> Launch | None:
        peers = _peers()
        ip = self.ctx.pod_ip
        if kind == "redis":
            exe = peers.redis_server()
            rest = (argv or [])[(argv or []).index(next(a for a in argv if a.endswith("redis-server"))) + 1:] \
                if argv and any(a.endswith("redis-server") for a in argv) else list(c.get("args") or [])
            port = int(_flag_value(rest, "--port") or 6379)
            full = [str(exe), *rest, "--bind", ip, "--protected-mode", "no", "--dir", "/tmp"]
            if _flag_value(rest, "--save") is None:
                full += ["--save", ""]
            if _flag_value(rest, "--appendonly") is None:
                full += ["--appendonly", "no"]
            return Launch(kind, name, full, self._base_env(env, []), [port], ("redis", port, ""))
        if kind.startswith("mooncake"):
            binary = "mooncake_master" if kind == "mooncake-master" else "mooncake_client"
            exe = peers.mooncake_master() if kind == "mooncake-master" else peers.mooncake_client()
            assert argv is not None
            i = next(i for i, a in enumerate(argv) if os.path.basename(a) == binary)
            rest = list(argv[i + 1:])
            moved: dict[int, int] = {}
            if kind == "mooncake-master":
                rpc = int(_flag_value(rest, "rpc_port") or 50051)
                metrics = int(_flag_value(rest, "metrics_port") or 9003)
                rest = _without_flags(rest, "rpc_address", "metrics_host")
                rest += [f"--rpc_address={ip}", f"--metrics_host={ip}"]
                ports = [rpc, metrics]
                if (_flag_value(rest, "enable_http_metadata_server") or "").lower() in ("true", "1"):
                    hp = int(_flag_value(rest, "http_metadata_server_port") or 8080)
                    free = _free_port()
                    rest = _without_flags(rest, "http_metadata_server_port")
                    rest += [f"--http_metadata_server_port={free}"]
                    moved[hp] = free
                    ports.append(hp)
                probe: tuple[str, int, str] | None = ("http", metrics, "/metrics")
            else:
                port = int(_flag_value(rest, "port") or 50052)
                rest = _without_flags(rest, "host")
                rest += [f"--host={ip}"]
                ports = [port]
                probe = None
            full = [str(exe), *rest]
            launch = Launch(kind, name, full, self._base_env(env, [str(Path(str(exe)).parent)]),
                            ports, probe, moved, self._venv_binds(str(exe)))
            return launch
        if kind.startswith("lmcache"):
            exe = peers.lmcache_python()
            assert argv is not None and exe is not None
            bindir = str(Path(exe).parent)
            full = list(argv)
            base = os.path.basename(full[0])
            if base.startswith("python"):
                full[0] = exe
            elif base in ("lmcache_controller", "lmcache"):
                full[0] = str(Path(bindir) / base)
            ports: list[int] = []  # type: ignore[no-redef]
            probe = None
            if kind == "lmcache-controller":
                port = int(_flag_value(full, "--port") or 9000)
                ports = [port]
                mon = _flag_value(full, "--monitor-ports")
                try:
                    ports += [int(v) for v in json.loads(mon or "{}").values()]
                except (ValueError, TypeError, AttributeError):
                    pass
                probe = ("http-any", port, "/")
            elif kind == "lmcache-mp":
                http_port = int(_flag_value(full, "--http-port") or 8080)
                ports = [int(_flag_value(full, "--port") or 5555), http_port]
                prom = _flag_value(full, "--prometheus-port")
                if prom:
                    ports.append(int(prom))
                probe = ("http", http_port, "/healthcheck")
            else:
                cfg = self._worker_config(c, full)
                api = cfg.get("internal_api_server_port_start")
                if cfg.get("internal_api_server_enabled") and api is not None:
                    ports = [int(api) + 1]
                    probe = ("http-any", int(api) + 1, "/")
                ports += [int(p) for p in cfg.get("lmcache_worker_ports") or []]
            wenv = self._base_env(env, [bindir])
            wenv.setdefault("PYTHONHASHSEED", "0")
            return Launch(kind, name, full, wenv, ports, probe, {}, self._venv_binds(exe))
        if kind == "vllm":
            return self._vllm_launch(c, name, env)
        if kind.startswith("sglang"):
            return self._sglang_launch(kind, name, env, argv)
        return None

    def _sglang_launch(self, kind: str, name: str, env: dict[str, str],
                       argv: list[str] | None) -> Launch | None:
        """SGLang's CPU server or sglang-router (tests/sim/realsglang.py)."""
        exe = _peers().sglang_python()
        found = sglang_command(argv)
        if exe is None or found is None:
            return None
        model = _tiny_model(Path(self.ctx.overrides.get("sim_state_dir") or self.ctx.work_dir))
        parts = launch_parts(kind, found[1], MODEL_DIR, self.ctx.pod_ip, env)
        extra = self.ctx.work_dir / "real"
        write_standins(extra)
        wenv = self._base_env(parts["env"], [str(Path(exe).parent)])
        if kind == "sglang":
            wenv["PYTHONPATH"] = ":".join([SIM_DIR, f"{SIM_DIR}/sgl-standins", *[
                p for p in wenv["PYTHONPATH"].split(":") if p and p != SIM_DIR]])
        full = [exe, "-m", parts["module"], *parts["tail"]]
        binds = [*self._venv_binds(exe), (str(model), MODEL_DIR)]
        launch = Launch(kind, name, full, wenv, parts["ports"], parts["probe"], {}, binds)
        if parts["dropped"]:
            launch.notes.append("flags not passed to SGLang on CPU: " + " ".join(sorted(set(parts["dropped"]))))
        return launch

    def _worker_config(self, c: dict[str, Any], argv: list[str]) -> dict[str, Any]:
        path = _flag_value(argv, "--config") or (self._env.get(str(c.get("name")), {})
                                                  .get("LMCACHE_CONFIG_FILE"))
        if not path:
            return {}
        host = container_host_path(path, volume_binds(c, self.ctx.volume_dirs))
        try:
            data = yaml.safe_load(host.read_text()) if host is not None else None
        except (OSError, yaml.YAMLError):
            data = None
        return data if isinstance(data, dict) else {}

    def _vllm_launch(self, c: dict[str, Any], name: str, env: dict[str, str]) -> Launch | None:
        peers = _peers()
        exe = peers.vllm()
        binds = volume_binds(c, self.ctx.volume_dirs)
        serve = self._find_serve_args(c, name, env, binds)
        if serve is None:
            self.notes.append(f"container {name}: no vllm serve command found")
            return None
        recorded = list(serve.argv)
        refused = cpu_refusals(recorded)
        if refused:
            self.notes += [f"container {name}: {r}" for r in refused]
            self._crashed = True
            return None
        start = next((i for i, t in enumerate(recorded) if t == "serve"), 0) + 1
        args = recorded[start:]
        passed: list[str] = []
        dropped: list[str] = []
        i = 0
        while i < len(args):
            tok = args[i]
            flag = tok.split("=", 1)[0]
            if not tok.startswith("-"):
                i += 1     # the model (positional) is replaced by the tiny one
                continue
            count = VLLM_PASS_FLAGS.get(flag)
            n = 0
            if "=" not in tok:
                while i + 1 + n < len(args) and not args[i + 1 + n].startswith("--"):
                    n += 1
            if count is None:
                dropped.append(flag)
            elif flag != "--port":
                passed += args[i:i + 1 + n]
            i += 1 + n
        if "--served-model-name" not in passed:
            passed += ["--served-model-name", serve.served_model_name or serve.model]
        model = _tiny_model(Path(self.ctx.overrides.get("sim_state_dir") or self.ctx.work_dir))
        port = serve.api_ports[0] if serve.api_ports else serve.port
        full = [str(exe), "serve", MODEL_DIR, *passed, "--port", str(port), "--host",
                self.ctx.pod_ip, "--load-format", "dummy", "--dtype", "float32",
                "--max-model-len", "512", "--enforce-eager"]
        venv_bin = str(Path(str(exe)).parent)
        venv = self._base_env(env, [venv_bin])
        venv.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
                     "HF_HUB_OFFLINE": "1", "VLLM_HOST_IP": self.ctx.pod_ip,
                     "OMP_NUM_THREADS": venv.get("OMP_NUM_THREADS", "1")})
        venv.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        binds_extra = [*self._venv_binds(str(exe)), (str(model), MODEL_DIR)]
        ports = [port]
        in_process = [n for n in _connector_names(serve.kv_transfer_config) if n in LMCACHE_IN_PROCESS]
        if mp_extra(serve.kv_transfer_config) is not None or in_process:
            # LMCacheMPConnector: vLLM 0.32 imports LMCache's class when lmcache is importable;
            # LMCacheConnectorV1 imports LMCache's engine (tests/peers/test_real_lmcache_inprocess.py:
            # appended after vLLM's packages, so vLLM's torch and zmq win)
            lm = peers.lmcache_python()
            if lm is None:
                what = in_process[0] if in_process else "LMCacheMPConnector"
                self.notes.append(f"container {name}: {what} needs the lmcache peer (make peers)")
                self._crashed = True
                return None
            site = sorted((_venv_of(lm) / "lib").glob("python3*/site-packages"))
            venv["KVRESET_SIM_APPEND_SITE"] = ":".join(str(p) for p in site)
            binds_extra += [b for b in self._venv_binds(lm) if b not in binds_extra]
        if in_process:
            venv["KVRESET_SIM_LMCACHE_MOCK_GPU"] = "1"
            venv.setdefault("PYTHONHASHSEED", "0")
            # LMCache's own servers in the vLLM process: the internal API (the scheduler's on
            # internal_api_server_port_start, worker rank r's on start + 1 + r) and the
            # controller's worker ports
            cfg = self._worker_config(c, [])
            api = cfg.get("internal_api_server_port_start")
            engines = max(1, int(_flag_value(recorded, "--data-parallel-size", "-dp") or 1))
            if cfg.get("internal_api_server_enabled") and api is not None:
                ports += [int(api) + r for r in range(engines + 1)]
            ports += [int(p) for p in cfg.get("lmcache_worker_ports") or []]
        launch = Launch("vllm", name, full, venv, ports, ("http", port, "/health"), {}, binds_extra)
        if dropped:
            launch.notes.append("flags not passed to the CPU build: " + " ".join(sorted(set(dropped))))
        self._version = "0.32.0"
        return launch

    # ---- runtime protocol ----
    def is_ready(self) -> bool:
        """Every server answers its health check (False without servers)."""
        return bool(self.servers) and all(s.healthy() for s in self.servers)

    def probe(self) -> None:
        """Restart servers that exited (after their back-off)."""
        for s in self.servers:
            s.poll()

    def served_ports(self) -> list[int]:
        """The ports the real servers and fake vLLMs serve (sorted; none once stopped)."""
        return [] if self._stopped else sorted(set(self.real_ports) | self._fake_ports)

    def connect(self, port: int) -> socket.socket | None:
        """A TCP connection to the server on ``port`` at the pod address (its moved port for
        a server that binds 0.0.0.0), or None when nothing of this pod serves it or it refuses."""
        server = self.real_ports.get(int(port))
        if server is None or self._stopped:
            return None
        target = (self.ctx.pod_ip, int(port))
        if int(port) in server.launch.moved:
            target = ("127.0.0.1", server.launch.moved[int(port)])
        try:
            s = socket.create_connection(target, timeout=5)
        except OSError:
            return None
        s.settimeout(None)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def request(self, port: int, method: str, path: str, query: str, headers: dict[str, str],
                body: bytes, *, scheme: str = "http", transport: str = "proxy"
                ) -> tuple[int, list[tuple[str, str]], bytes] | None:
        """An HTTP request to the real server on ``port`` (for the pod proxy); None when the
        connection is refused or breaks (the proxy then answers 503 connection refused). A
        fake vLLM's port is answered by the fake."""
        if int(port) in self._fake_ports and int(port) not in self.real_ports:
            return PodRuntime.request(self, port, method, path, query, headers, body, scheme=scheme,
                                      transport=transport)
        sock = self.connect(port)
        if sock is None:
            return None
        conn = http.client.HTTPConnection(self.ctx.pod_ip, int(port), timeout=300)
        conn.sock = sock
        try:
            hdrs = {k: v for k, v in headers.items() if k.lower() not in ("host", "content-length")}
            hdrs["Host"] = f"{self.ctx.pod_ip}:{port}"
            conn.request(method, path + (f"?{query}" if query else ""), body=body or None,
                         headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, list(resp.getheaders()), data
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def exec_view(self, container: str) -> Any:
        """As :meth:`PodRuntime.exec_view`, with the real servers' ports on localhost."""
        view = super().exec_view(container)
        if view is None:
            return None
        from dataclasses import replace
        return replace(view, ports=self.served_ports())

    def state(self, listing_cache: dict[str, list[str]] | None = None) -> dict[str, Any]:
        """The pod runtime's state plus ``real_servers``: one entry per server
        (:meth:`RealServer.state`: kind, argv, pid, running, restarts, ports, log path)."""
        out = super().state(listing_cache)
        out["ports"] = {**{p: v for p, v in (out.get("ports") or {}).items() if int(p) in self._fake_ports},
                        **{str(p): {"real": True, "kind": s.launch.kind}
                           for p, s in sorted(self.real_ports.items())}}
        out["real_servers"] = [s.state() for s in self.servers]
        for s in self.servers:
            out["notes"] = list(out.get("notes") or []) + s.launch.notes
        return out

    def stop(self) -> None:
        """Stop every server of the pod (in parallel); later requests get None."""
        self._stopped = True
        threads = [threading.Thread(target=s.stop) for s in self.servers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def wants_real(ctx: PodContext) -> bool:
    """True when a container of the pod runs a server named in the pod's ``real_servers``
    override (or the pod's scenario says ``real_server: true``); ``real_server: false`` opts a
    pod out."""
    forced = ctx.overrides.get("real_server")
    if forced is False:
        return False
    allowed = set(ctx.overrides.get("real_servers") or [])
    if not allowed and forced is not True:
        return False
    for c in (ctx.spec or {}).get("containers") or []:
        if not isinstance(c, dict):
            continue
        kind = real_kind(c, container_argv(c, ctx.env_by_container.get(str(c.get("name")), {})))
        if kind is not None and (forced is True or peer_of(kind) in allowed):
            return True
    return False


def make_runtime(ctx: PodContext) -> PodRuntime:
    """The runtime of a pod: :class:`RealPodRuntime` when it runs a real server
    (:func:`wants_real`), else the simulated :class:`tests.sim.pods.PodRuntime`."""
    return RealPodRuntime(ctx) if wants_real(ctx) else PodRuntime(ctx)

