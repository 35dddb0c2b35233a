"""The ``sitecustomize`` a real Python server of a pod runs with (on ``PYTHONPATH``): a pod's network
namespace emulated on the shared loopback (tests/sim/realservers.py)."""

from __future__ import annotations

SITECUSTOMIZE = r'''"""A pod's network namespace, emulated on the shared loopback (tests/sim/realservers.py)."""
import errno as _errno
import ipaddress as _ip
import os as _os
import socket as _socket

_POD_IP = _os.environ.get("KVRESET_SIM_POD_IP", "")

# packages importable after the server's own (a real vLLM with LMCacheMPConnector imports lmcache
# from the LMCache venv, while its own torch and zmq win)
for _extra in filter(None, _os.environ.get("KVRESET_SIM_APPEND_SITE", "").split(":")):
    import sys as _sys

    if _extra not in _sys.path:
        _sys.path.append(_extra)


# LMCache in the vLLM process (LMCacheConnectorV1) on the CPU build: LMCache 0.5.6 has no CPU
# connector for vLLM's paged memory ("No supported cpu connector found", then degraded mode, never
# a hit), so its own mock connector stands in for the device copy: keys, lookups, hits and clears
# are LMCache's real ones, the KV bytes are not copied
if _os.environ.get("KVRESET_SIM_LMCACHE_MOCK_GPU"):
    import importlib.abc as _iabc
    import importlib.machinery as _imach
    import sys as _sys

    def _mock_gpu(module):
        real = module.CreateGPUConnector

        def CreateGPUConnector(config, metadata, engine, layout_hints=None):
            from lmcache.utils import EngineType
            if engine == EngineType.VLLM:
                return module.MockGPUConnector(kv_shape=metadata.kv_shape)
            return real(config, metadata, engine, layout_hints)

        module.CreateGPUConnector = CreateGPUConnector

    class _MockGpuFinder(_iabc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "lmcache.v1.gpu_connector":
                return None
            spec = _imach.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module, _run=run):
                _run(module)
                _mock_gpu(module)

            spec.loader.exec_module = exec_module
            return spec

    _sys.meta_path.insert(0, _MockGpuFinder())


# SGLang's HiCache on the CPU engine (SGLang pods only): the host KV pool is allocated pinned by
# default (``pin_memory=True``, sglang/srt/mem_cache/pool_host/mha.py), which a CPU-only torch
# refuses, and the ``direct`` io backend's ``layer_first`` copy ``transfer_kv_direct`` comes from
# ``sgl_kernel.kvcacheio`` on CUDA/ROCm and ``pool_host/_kvcacheio.py`` on XPU only, so on a CPU it
# is unbound: the pool is built unpinned and the copy is a plain torch index copy
if _os.environ.get("KVRESET_SIM_SGLANG_CPU_HICACHE"):
    import importlib.abc as _iabc
    import importlib.machinery as _imach
    import sys as _sys

    def _transfer_kv_direct(src_layers, dst_layers, src_indices, dst_indices, page_size=1):
        for src, dst in zip(src_layers, dst_layers):
            dst[dst_indices.to(dst.device)] = src[src_indices.to(src.device)].to(dst.device)

    def _cpu_host_pool(module):
        module.transfer_kv_direct = _transfer_kv_direct
        cls = module.MHATokenToKVPoolHost
        init = cls.__init__

        def __init__(self, *args, **kwargs):
            if len(args) > 5:   # (buffer_info, ratio, host_size, page_size, layout, pin_memory, ...)
                args = args[:5] + (False,) + args[6:]
            else:
                kwargs["pin_memory"] = False
            init(self, *args, **kwargs)

        cls.__init__ = __init__

    class _SglHostPoolFinder(_iabc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "sglang.srt.mem_cache.pool_host.mha":
                return None
            spec = _imach.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            run = spec.loader.exec_module

            def exec_module(module, _run=run):
                _run(module)
                _cpu_host_pool(module)

            spec.loader.exec_module = exec_module
            return spec

    _sys.meta_path.insert(0, _SglHostPoolFinder())


def _loopback(host):
    try:
        return _ip.ip_address(host).is_loopback
    except ValueError:
        return False


def _wildcard(host):
    return host in ("", "0.0.0.0", "*")


if _POD_IP:
    _bind, _connect, _connect_ex, _sendto = (_socket.socket.bind, _socket.socket.connect,
                                             _socket.socket.connect_ex, _socket.socket.sendto)

    def bind(self, address):
        if self.family == _socket.AF_INET and isinstance(address, tuple) and _wildcard(address[0]):
            address = (_POD_IP,) + tuple(address[1:])
        return _bind(self, address)

    def _target(self, address):
        if self.family not in (_socket.AF_INET, _socket.AF_INET6) or not isinstance(address, tuple):
            return address
        host = address[0]
        try:
            resolved = _socket.getaddrinfo(host, address[1], self.family)[0][4][0]
        except (OSError, IndexError):
            return address
        if _loopback(resolved):
            return address
        if self.type & _socket.SOCK_DGRAM and self.family == _socket.AF_INET:
            # "which address do I have?": the pod's own, as its default route would say
            try:
                _bind(self, (_POD_IP, 0))
            except OSError:
                pass
            return (_POD_IP, address[1])
        raise OSError(_errno.ENETUNREACH, "only loopback addresses are reachable from a pod "
                      "of the simulated cluster: %s" % (host,))

    def connect(self, address):
        return _connect(self, _target(self, address))

    def connect_ex(self, address):
        try:
            address = _target(self, address)
        except OSError as exc:
            return exc.errno
        return _connect_ex(self, address)

    def sendto(self, data, *args):
        address = args[-1]
        if self.family == _socket.AF_INET and isinstance(address, tuple):
            try:
                host = _socket.gethostbyname(address[0])
            except OSError:
                host = address[0]
            if not _loopback(host):
                raise OSError(_errno.ENETUNREACH, "only loopback addresses are reachable")
        return _sendto(self, data, *args)

    _socket.socket.bind, _socket.socket.connect = bind, connect
    _socket.socket.connect_ex, _socket.socket.sendto = connect_ex, sendto

    try:
        import zmq as _zmq
    except Exception:
        _zmq = None
    if _zmq is not None:
        _zbind = _zmq.Socket.bind

        def zbind(self, addr):
            if isinstance(addr, bytes):
                addr = addr.decode()
            for wild in ("tcp://*:", "tcp://0.0.0.0:"):
                if isinstance(addr, str) and addr.startswith(wild):
                    addr = "tcp://%s:%s" % (_POD_IP, addr[len(wild):])
            return _zbind(self, addr)

        _zmq.Socket.bind = zbind
'''
