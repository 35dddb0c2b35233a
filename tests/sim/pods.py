"""The runtime of one simulated pod: what its containers exec, and the servers on its ports.

The API server (tests/sim/server.py) creates one :class:`PodRuntime` per pod, calls
:meth:`PodRuntime.start` once, routes pod-proxy / exec / port-forward HTTP requests to
:meth:`PodRuntime.request` and merges :meth:`PodRuntime.state` into ``/sim/v1/state``.

How a pod's servers are found, independently of the plugin's own reading (tests/sim/README.md):

1. For every container (and every init container with ``restartPolicy: Always``, a native
   sidecar) the argv it would exec is built: ``command`` + ``args`` with ``$(VAR)`` expansion, or
   the image's entrypoint + ``args`` (tests/sim/images.py).
2. With ``sandbox=True`` the argv runs for real under bubblewrap (tests/sim/sandbox.py) where
   ``vllm`` / ``python3 -m vllm.entrypoints...`` are recorders; the recorded argv is what vLLM
   would have received. With ``sandbox=False`` nothing runs: ``overrides["ports"]`` decide, else
   a literal ``vllm serve`` / ``api_server`` argv is read as written, or found as the first such
   command in a ``sh -c`` / ``bash -c`` script (words split as the shell would, line
   continuations and comments removed; variables and control flow are not interpreted).
3. The recorded argv is read by tests/sim/serveargs.py (ports, DP multi-port, connectors, tiers)
   and one :class:`tests.sim.fakevllm.FakeVLLM` answers on each API port. Routing sidecars
   (recognised by image name) are emulated by tests/sim/sidecar.py, an InfiniStore server
   (``infinistore ...``) by tests/sim/fakeinfinistore.py (its control plane only), the HTTP
   frontend of an LMCache MP server (``lmcache server``) by tests/sim/fakemp.py, the seam tests'
   toy server and store (``toy-serve``, ``toy-kv``) by tests/sim/faketoy.py.
4. Caches start warm: GPU prefix blocks, CPU offload blocks where a CPU tier exists, a few files in
   every FS tier root (vLLM's ``vllm/v1/kv_offload/file_mapper.py`` layout), and
   ``/dev/shm/vllm_offload_<engine_id>.mmap`` for a CPU tier on vLLM >= 0.20.

Per-pod ``overrides`` (all optional; the scenario file passes them through):

- ``vllm_version`` (str): the version every fake vLLM of the pod claims.
- ``dev_mode`` (``"on"|"off"|"invalid"``): edits VLLM_SERVER_DEV_MODE in the vLLM container's env
  before anything runs (on: ``"1"``, off: removed, invalid: ``"true"`` -> crash loop).
- ``busy`` (int): the first N reset calls on each vLLM port find blocks still held
  (``success:false`` on >= 0.26; an empty 200 that did nothing before); ``reset_running_requests=
  true`` preempts and succeeds unless ``busy_forced`` (bool) is set, then 500.
- ``reset_delay_ms`` (int): every reset call sleeps this long (outside locks).
- ``metrics_status`` (int): ``/metrics`` answers this HTTP status (e.g. 500).
- ``metrics_fail_first`` (int): the first N ``/metrics`` scrapes of each port answer 500.
- ``metrics_bloat_mb`` (int): ``/metrics`` answers about this many MB of valid text whose extra
  samples each carry a 1 MB ``model_name`` (a hostile or broken server).
- ``ports`` (list of int): API ports to serve when the command is not run (``sandbox=False``).
- ``warm_blocks`` (int, default 512): GPU prefix-cache blocks at start;
  ``warm_cpu_blocks`` (int, default 4 x warm_blocks): CPU offload blocks at start.
- ``fs_files`` (int, default 4): block files each FS tier root gets at start.
- ``behaves_as`` (str): the release whose routes and answers the servers have while ``/version``
  says ``vllm_version`` (an unknown build: ``dev``, a fork's name).
- ``live_kv_transfer_config`` (object): the ``kv_transfer_config`` the servers report in
  ``/server_info?config_format=json`` instead of the one their command line gives (what a
  ``--config`` file or an image default set, unseen in the spec).
- ``infinistore_keys`` (int, default 0): keys an InfiniStore server's map holds at start;
  ``infinistore_no_kvmap_len`` (bool): its ``GET /kvmap_len`` answers 404.
- ``toy_keys`` (int, default 5): keys a toy store (``toy-kv``, tests/sim/faketoy.py) holds at
  start; a toy server (``toy-serve``) takes ``busy``, ``warm_blocks`` and ``cold`` as a vLLM does.
- ``cold`` (bool): start with empty caches (no GPU or CPU blocks, nothing written to FS tiers;
  the /dev/shm offload file is still created, as vLLM creates it at start). The simulator sets
  it for every pod that is not of its owner's first generation (replacements after a rollout,
  a deletion or a scale-up), unless the scenario gives ``cold`` itself.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import threading
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .fakeinfinistore import FakeInfiniStore, infinistore_manage_port
from .fakemp import FakeMpServer, mp_http_port
from .fakesglang import VERSION as SGLANG_VERSION
from .fakesglang import FakeSGLang, sglang_args
from .faketoy import FakeToyServer, FakeToyStore, toy_fake
from .fakevllm import FakeVLLM, Response, dev_mode_state
from .images import DEFAULT_VERSION, image_entrypoint, image_vllm_version, is_sidecar_image
from .mooncakestore import DEFAULT_ADMIN_PORT, MooncakeStoreHook
from .mpstore import DEFAULT_HTTP_PORT as MP_HTTP_PORT
from .mpstore import LMCacheMPHook, mp_extra
from .podtiers import PodTiers, _Server
from .sandbox import Bind, container_host_path, run_recorded, volume_binds
from .serveargs import ServeArgs, container_argv, expand_k8s_vars, vllm_args_of
from .serveargs import parse_vllm_argv as _parse_vllm_argv
from .sidecar import RoutingSidecar
from .sidecarargs import parse_sidecar_args

__all__ = ["ExecView", "PodContext", "PodRuntime"]

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"

#: What may answer on a pod's port.
_PortServer = FakeVLLM | RoutingSidecar | FakeInfiniStore | FakeMpServer | FakeToyServer | FakeToyStore | FakeSGLang


@dataclass
class PodContext:
    """Everything a pod runtime needs, provided by the API server.

    ``spec``: the pod ``.spec`` as stored; ``env_by_container``: resolved env per container name
    (a var whose Secret/ConfigMap is missing is absent); ``volume_dirs``: volume name -> host
    directory (PVC dirs shared between pods, emptyDir per pod, hostPath; other kinds absent);
    ``shm_dir``: per-pod host dir for /dev/shm; ``work_dir``: per-pod scratch; ``overrides``:
    scenario overrides (see module docstring); ``default_version``: ``serve --vllm-version``
    (beats the image, loses to ``overrides["vllm_version"]``); ``sandbox``: run commands under
    bubblewrap (False: never run them).
    """

    namespace: str
    name: str
    uid: str
    pod_ip: str
    spec: dict[str, Any]
    env_by_container: dict[str, dict[str, str]]
    volume_dirs: dict[str, Path]
    shm_dir: Path
    work_dir: Path
    overrides: dict[str, Any] = field(default_factory=dict)
    default_version: str | None = None
    sandbox: bool = True


@dataclass(frozen=True)
class ExecView:
    """The part of a pod an exec needs: ``env`` (name -> value), ``binds`` (volume mounts),
    ``shm_dir`` (host dir of /dev/shm), ``ports`` (served ports, sorted), ``workdir``."""

    env: dict[str, str]
    binds: list[Bind]
    shm_dir: Path
    ports: list[int]
    workdir: str


def _list_files(host: Path, cache: dict[str, list[str]]) -> list[str]:
    """Files under ``host`` as relative ``/``-separated paths (os.walk, no stat per entry
    beyond what walk needs), memoised in ``cache`` by host path."""
    key = str(host)
    found = cache.get(key)
    if found is None:
        found = []
        for dirpath, _dirs, files in os.walk(key):
            rel = os.path.relpath(dirpath, key)
            base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            found.extend(base + f for f in files)
        cache[key] = found
    return found


_SHELLS = {"sh", "bash", "dash", "ash", "zsh"}
_SHELL_OPERATORS = {"&&", "||", ";", "|", "&", ";;"}


def script_serve_argv(argv: list[str]) -> list[str] | None:
    """The first vLLM server command of a ``sh -c SCRIPT`` / ``bash -c SCRIPT`` argv, read
    without running the script (the no-sandbox reading): ``SCRIPT`` split into words as the
    shell would (quotes, ``\\``-newline continuations, ``#`` comments), then the words from the
    first ``vllm serve`` / ``python -m vllm.entrypoints...`` up to a shell operator. None when
    argv is not such a script or holds no server command."""
    if len(argv) < 3 or argv[0].rsplit("/", 1)[-1] not in _SHELLS:
        return None
    try:
        at = argv.index("-c", 1)
    except ValueError:
        return None
    if at + 1 >= len(argv):
        return None
    try:
        words = shlex.split(argv[at + 1].replace("\\\n", " "), comments=True)
    except ValueError:
        return None
    for i in range(len(words)):
        if vllm_args_of(words[i:]) is not None:
            end = next((j for j in range(i, len(words)) if words[j] in _SHELL_OPERATORS), len(words))
            return words[i:end]
    return None


def _mentions_vllm(container: dict[str, Any]) -> bool:
    text = " ".join(str(x) for x in (container.get("command") or []) + (container.get("args") or []))
    return "vllm" in text or image_entrypoint(str(container.get("image") or "")) is not None


class PodRuntime(PodTiers):
    """The simulated processes of one pod (see module docstring). Thread-safe after start()."""

    def __init__(self, ctx: PodContext) -> None:
        self.ctx = ctx
        self._lock = threading.Lock()
        self._ports: dict[int, _PortServer] = {}
        self._crashed = False
        #: vLLM containers whose VLLM_SERVER_DEV_MODE vLLM refuses: each crash-loops on its own
        #: (the pod's other containers keep running; the pod is not Ready)
        self._crashed_containers: list[str] = []
        self._started = False
        self._stopped = False
        self._recorded: dict[str, list[str]] = {}
        self._env: dict[str, dict[str, str]] = {}
        self._vllm_container: str | None = None
        self._servers: list[_Server] = []
        self._version = DEFAULT_VERSION
        self._dev = "off"
        self._fs_roots: list[tuple[str, Path]] = []
        self._shm_host: Path = ctx.shm_dir
        self.notes: list[str] = []

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Record every container's argv, build the fake vLLMs and sidecars, warm the caches.

        Never raises for odd specs: a container that cannot be read serves nothing and the reason
        is kept in ``notes`` (exposed in :meth:`state`).
        """
        try:
            self._start()
        except Exception as exc:  # noqa: BLE001 - a pod must never take the server down
            self.notes.append(f"start failed: {type(exc).__name__}: {exc}")
        finally:
            self._started = True

    def _start(self) -> None:
        spec = self.ctx.spec or {}
        containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
        sidecars = [
            c for c in spec.get("initContainers") or []
            if isinstance(c, dict) and c.get("restartPolicy") == "Always"
        ]
        ports: dict[int, _PortServer] = {}
        sidecar_specs: list[tuple[str, Any]] = []

        for c in sidecars + containers:
            self._read_container(c, ports, sidecar_specs)
        self._override_ports(containers)
        self._pick_version(containers)
        # Native sidecars start first, so they hold their ports if a vLLM server asks for the same.
        for _name, sc in sidecar_specs:
            for port, vport in zip(sc.ports, sc.vllm_ports, strict=True):
                ports.setdefault(port, RoutingSidecar(port=port, vllm_port=vport, secure=sc.secure,
                                                      upstream=self._call))

        for server in self._servers:
            self._serve(server, ports)

        with self._lock:
            self._ports = ports

    def _read_container(self, c: dict[str, Any], ports: dict[int, Any],
                        sidecar_specs: list[tuple[str, Any]]) -> None:
        """One container at start: a routing sidecar (its args kept for later), an InfiniStore or
        LMCache MP server (its fake on ``ports``), else a vLLM server when its argv is one."""
        ctx = self.ctx
        name = str(c.get("name") or "")
        env = dict(ctx.env_by_container.get(name) or {})
        image = str(c.get("image") or "")
        try:
            if is_sidecar_image(image):
                args = [expand_k8s_vars(str(a), env) for a in (c.get("args") or [])]
                command = [expand_k8s_vars(str(a), env) for a in (c.get("command") or [])]
                self._env[name] = env
                self._recorded[name] = command + args
                sidecar_specs.append((name, parse_sidecar_args(args, image)))
                return
            manage = infinistore_manage_port(container_argv(c, env))
            if manage is not None:  # the InfiniStore server: its control plane, emulated
                self._env[name] = env
                self._recorded[name] = container_argv(c, env) or []
                ports[manage] = FakeInfiniStore(
                    manage, keys=int(ctx.overrides.get("infinistore_keys") or 0),
                    kvmap_len_route=not ctx.overrides.get("infinistore_no_kvmap_len"))
                return
            argv = [expand_k8s_vars(str(a), env) for a in (c.get("command") or []) + (c.get("args") or [])]
            toy = toy_fake(argv, self._cache_overrides(name))
            if toy is not None:  # the seam tests' toy server or store (tests/sim/faketoy.py)
                self._env[name] = env
                self._recorded[name] = argv
                ports[toy.port] = toy
                return
            mp_port = mp_http_port(argv)
            if mp_port is not None:  # an LMCache MP server's HTTP frontend (tests/sim/fakemp.py)
                self._env[name] = env
                self._recorded[name] = argv
                ports[mp_port] = FakeMpServer.for_pod(mp_port, image, self._cache_overrides(name))
                return
            sglang = sglang_args(argv)
            if sglang is not None:  # an SGLang server (tests/sim/fakesglang.py)
                self._env[name] = env
                self._recorded[name] = argv
                if sglang.port in ports:
                    self.notes.append(f"port {sglang.port} of {name} already taken")
                else:
                    ports[sglang.port] = FakeSGLang(sglang, self._cache_overrides(name),
                                                    version=str(ctx.overrides.get("sglang_version") or SGLANG_VERSION),
                                                    storage_dir=self._sglang_files(c, env, sglang),
                                                    seed=f"{ctx.uid}/{name}")
                return
            if _mentions_vllm(c):
                self._apply_dev_override(env)
            self._env[name] = env
            binds = volume_binds(c, ctx.volume_dirs)
            serve = self._find_serve_args(c, name, env, binds)
            if serve is not None and serve.config_error:
                self.notes.append(f"container {name}: --config {serve.config_file}: {serve.config_error}")
            if serve is not None:
                self._servers.append(_Server(name, serve, binds, env, image))
        except Exception as exc:  # noqa: BLE001
            self.notes.append(f"container {name}: {type(exc).__name__}: {exc}")

    def _sglang_files(self, c: dict[str, Any], env: dict[str, str], sglang: Any) -> Path | None:
        """The host directory of an SGLang file backend's pages (``HiCacheFile``'s order: the env
        variable, the extra config's ``file_storage_path``, ``/tmp/hicache``), or None."""
        if not (sglang.hicache and sglang.storage_backend == "file"):
            return None
        path = env.get("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR")
        if not path and sglang.extra_config:
            try:
                path = (json.loads(sglang.extra_config) or {}).get("file_storage_path")
            except (ValueError, AttributeError):
                path = None
        path = str(path or "/tmp/hicache")
        host = container_host_path(path, volume_binds(c, self.ctx.volume_dirs), self.ctx.shm_dir)
        return host if host is not None else self.ctx.work_dir / "rootfs" / path.lstrip("/")

    def _override_ports(self, containers: list[dict[str, Any]]) -> None:
        """The ``ports`` override (not sandboxed): one server on exactly those ports."""
        ctx = self.ctx
        override_ports = ctx.overrides.get("ports")
        if not ctx.sandbox and override_ports:
            base = self._servers[0] if self._servers else None
            if base is None:
                first = next((c for c in containers if not is_sidecar_image(str(c.get("image") or ""))), None)
                if first is not None:
                    name = str(first.get("name") or "")
                    base = _Server(name, ServeArgs(argv=()), volume_binds(first, ctx.volume_dirs),
                                   self._env.get(name, {}), str(first.get("image") or ""))
            if base is not None:
                plist = tuple(int(p) for p in override_ports)
                serve_args = dataclasses.replace(base.args, api_ports=plist, dp_ranks=())
                self._servers = [_Server(base.container, serve_args, base.binds, base.env, base.image)]

    def _pick_version(self, containers: list[dict[str, Any]]) -> None:
        """The vLLM container, version, dev mode and /dev/shm of the pod (without a server: the
        image of the container that mentions vLLM)."""
        ctx = self.ctx
        if self._servers:
            main = self._servers[0]
            self._vllm_container = main.container
            self._version = str(
                ctx.overrides.get("vllm_version") or ctx.default_version or image_vllm_version(main.image)
                or DEFAULT_VERSION
            )
            self._dev = dev_mode_state(main.env.get(DEV_MODE_ENV))
            self._crashed_containers = [s.container for s in self._servers
                                        if dev_mode_state(s.env.get(DEV_MODE_ENV)) == "invalid"]
            self._crashed = bool(self._crashed_containers)
            shm = container_host_path("/dev/shm", main.binds, ctx.shm_dir)
            self._shm_host = shm if shm is not None else ctx.shm_dir
        else:
            guess = next((c for c in containers
                          if _mentions_vllm(c) and not is_sidecar_image(str(c.get("image") or ""))), None)
            image = str(guess.get("image") or "") if guess else ""
            self._version = str(
                ctx.overrides.get("vllm_version") or ctx.default_version or image_vllm_version(image) or DEFAULT_VERSION
            )
            if guess is not None:
                self._vllm_container = str(guess.get("name") or "")
                self._dev = dev_mode_state(self._env.get(self._vllm_container, {}).get(DEV_MODE_ENV))

    def _serve(self, server: _Server, ports: dict[int, Any]) -> None:
        """The fake vLLMs of one server on its API ports (with their store hooks), tiers warmed."""
        dev = dev_mode_state(server.env.get(DEV_MODE_ENV))
        if dev == "invalid" and server is not self._servers[0]:
            return  # this container crash-loops: nothing listens on its ports
        connectors = server.args.connectors(server.env, self._version)
        hook = None
        if any(c.name == "MooncakeStoreConnector" for c in connectors):
            hook = MooncakeStoreHook(dict(server.env), self._pod_file_reader(server.binds),
                                     self.ctx.overrides.get("hosts_file"),
                                     int(self.ctx.overrides.get("mooncake_admin_port") or DEFAULT_ADMIN_PORT))
        mp = mp_extra(server.args.live_kv_transfer_config(server.env, self._version))
        mp_hook = None if mp is None else LMCacheMPHook(
            mp, dict(server.env), self.ctx.overrides.get("hosts_file"),
            int(self.ctx.overrides.get("lmcache_mp_http_port") or MP_HTTP_PORT))
        kv = server.args.kv_transfer_config or {}
        for index, port in enumerate(server.args.api_ports):
            if port in ports:
                self.notes.append(f"port {port} of {server.container} already taken")
                continue
            ports[port] = FakeVLLM(
                port=port, version=self._version, dev_mode=dev == "on", model=server.args.model,
                served_model_name=server.args.served_model_name, connectors=connectors,
                overrides=self._cache_overrides(server.container), tls=server.args.tls, env=server.env,
                engines=server.args.engines,
                first_engine=(server.args.dp_ranks[index] if index < len(server.args.dp_ranks)
                              else server.args.first_engine),
                api_servers=server.args.api_servers,
                kv_transfer_config=self.ctx.overrides.get("live_kv_transfer_config")
                or server.args.live_kv_transfer_config(server.env, self._version),
                store_hook=hook,
                mp_hook=mp_hook,
                fs_block_dirs=[self._host_dir(server, root) / f"{self._fs_base(server.args, kv)}_r0"
                               for conn in connectors for root in conn.fs_roots],
            )
        if dev != "invalid":
            self._warm_tiers(server, connectors)

    def _cache_overrides(self, container: str | None = None) -> dict[str, Any]:
        """The overrides given to the fake vLLMs of ``container``: the pod's, then those of the
        rules that matched that container (``containers``: name -> overrides, from a rule's
        ``match.container``); ``cold`` zeroes the warm GPU and CPU blocks."""
        ov = dict(self.ctx.overrides)
        per_container = ov.pop("containers", None) or {}
        ov.update(per_container.get(container, {}) if container is not None else {})
        if ov.get("cold"):
            ov["warm_blocks"] = 0
            ov["warm_cpu_blocks"] = 0
        return ov

    def _apply_dev_override(self, env: dict[str, str]) -> None:
        mode = self.ctx.overrides.get("dev_mode")
        if mode == "on":
            env[DEV_MODE_ENV] = "1"
        elif mode == "off":
            env.pop(DEV_MODE_ENV, None)
        elif mode == "invalid":
            env[DEV_MODE_ENV] = "true"

    def _pod_file_reader(self, binds: list[Bind]) -> Any:
        """``path -> text`` of a file in the container, read from the pod's own volumes."""
        def read(path: str) -> str:
            host = container_host_path(path, binds, self.ctx.shm_dir)
            if host is None:
                raise OSError(f"{path}: not on a volume of the pod")
            return host.read_text()
        return read

    def _find_serve_args(self, c: dict[str, Any], name: str, env: dict[str, str],
                         binds: list[Bind]) -> ServeArgs | None:
        read_file = self._pod_file_reader(binds)
        parse_vllm_argv = partial(_parse_vllm_argv, read_file=read_file)
        argv = container_argv(c, env)
        if argv is None:
            self.notes.append(f"container {name}: no command and unknown image entrypoint")
            return None
        if not self.ctx.sandbox:
            parsed = parse_vllm_argv(argv)
            if parsed is None:
                script = script_serve_argv(argv)
                if script is not None:
                    argv, parsed = script, parse_vllm_argv(script)
            if parsed is not None:
                self._recorded[name] = argv
            return parsed
        result = run_recorded(argv, env, binds, self.ctx.shm_dir, self.ctx.work_dir / "containers" / name)
        if result.error:
            self.notes.append(f"container {name}: {result.error}")
        if result.timed_out:
            self.notes.append(f"container {name}: command timed out")
        if not result.recordings and result.returncode not in (0, None) and not result.timed_out \
                and not result.error:
            self.notes.append(f"container {name}: exited {result.returncode} without starting "
                              f"vLLM: {result.stderr.strip()[-300:]}")
        chosen: ServeArgs | None = None
        for rec in result.recordings:
            parsed = parse_vllm_argv(rec)
            if parsed is not None:
                chosen = parsed
                self._recorded[name] = rec
        if chosen is None and result.recordings:
            self._recorded[name] = result.recordings[-1]
        return chosen

    # ------------------------------------------------------------------ requests
    @property
    def crashed(self) -> bool:
        """True when the vLLM container would crash-loop (invalid VLLM_SERVER_DEV_MODE such as
        ``"true"`` or ``""``: ``bool(int(value))`` in ``vllm/envs.py`` raises); the pod then serves nothing."""
        return self._crashed

    def _main_crashed(self) -> bool:
        # the first vLLM container crash-loops: the pod serves nothing (a later one that crashes
        # only leaves its own ports unserved)
        return self._crashed and self._vllm_container in self._crashed_containers

    def _call(self, port: int, method: str, path: str, query: str, headers: dict[str, str], body: bytes,
              scheme: str, transport: str) -> Response | None:
        with self._lock:
            server = self._ports.get(port)
        if server is None or self._main_crashed():
            return None
        return server.handle(method, path, query, headers, body, scheme=scheme, transport=transport)

    def request(self, port: int, method: str, path: str, query: str, headers: dict[str, str], body: bytes, *,
                scheme: str = "http", transport: str = "proxy") -> tuple[int, list[tuple[str, str]], bytes] | None:
        """An HTTP request to the pod's ``port``; None when nothing listens there (or the pod
        crashed / is stopped / has not started). ``path`` has no query; ``query`` has no ``?``.
        ``transport`` (``proxy``, ``exec``, ``portforward``) is recorded on reset calls. Thread-safe.
        """
        if self._stopped:
            return None
        return self._call(int(port), method, path or "/", query or "", dict(headers or {}), body or b"",
                          scheme, transport)

    # ------------------------------------------------------------------ state
    def state(self, listing_cache: dict[str, list[str]] | None = None) -> dict[str, Any]:
        """The per-pod part of ``/sim/v1/state``: env (of the vLLM container), vllm_container,
        recorded_argv, version, dev_mode, ports (keyed by port number as a string), fs_tier_files,
        shm_files (container paths, sorted) and notes (why something serves nothing).

        ``listing_cache`` (host directory -> its files, relative, ``/``-separated) lets one
        ``/sim/v1/state`` walk a PVC shared by many pods once instead of once per pod; pass the
        same dict for every pod of one snapshot (None: walk without sharing)."""
        with self._lock:
            ports = dict(self._ports)
        env = self._env.get(self._vllm_container or "", {})
        cache = listing_cache if listing_cache is not None else {}
        fs_files: set[str] = set()
        for croot, host in self._fs_roots:
            prefix = croot.rstrip("/") + "/"
            fs_files.update(prefix + rel for rel in _list_files(host, cache))
        shm_files: list[str] = []
        if self._shm_host.is_dir():
            shm_files = sorted(f"/dev/shm/{f.name}" for f in self._shm_host.iterdir()
                               if f.name.startswith("vllm_offload"))
        return {
            "env": dict(env),
            "vllm_container": self._vllm_container,
            "recorded_argv": {k: list(v) for k, v in self._recorded.items()},
            "version": self._version,
            "dev_mode": self._dev,
            "crashed": self._crashed,
            "crashed_containers": list(self._crashed_containers),
            "ports": {str(p): s.snapshot() for p, s in sorted(ports.items())},
            "fs_tier_files": sorted(fs_files),
            "shm_files": shm_files,
            "notes": list(self.notes),
        }

    # ------------------------------------------------------------------ exec
    def served_ports(self) -> list[int]:
        """The ports something listens on in this pod (sorted; none once crashed or stopped)."""
        with self._lock:
            return [] if (self._main_crashed() or self._stopped) else sorted(self._ports)

    def exec_view(self, container: str) -> ExecView | None:
        """What an exec into ``container`` sees (tests/sim/execsandbox.py): its resolved env
        (with the scenario's dev_mode edit, as its command saw it), its volume binds, the pod's
        /dev/shm host dir, the ports the pod serves (none once crashed or stopped) and its
        ``workingDir``. None when the pod has no such container (regular or init)."""
        spec = self.ctx.spec or {}
        found = None
        for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            if isinstance(c, dict) and c.get("name") == container:
                found = c
                break
        if found is None:
            return None
        env = dict(self._env.get(container) or self.ctx.env_by_container.get(container) or {})
        binds = volume_binds(found, self.ctx.volume_dirs)
        with self._lock:
            ports = [] if (self._main_crashed() or self._stopped) else sorted(self._ports)
        return ExecView(env=env, binds=binds, shm_dir=self.ctx.shm_dir, ports=ports,
                        workdir=str(found.get("workingDir") or "/"))

    def stop(self) -> None:
        """Stop serving (every later request gets None; :meth:`state` still reports the last
        counters, a replaced pod stays listed). Files stay: FS tiers live on volumes
        shared with other pods, and the server owns the per-pod directories."""
        self._stopped = True
