"""The warm KV tiers of a simulated vLLM pod (tests/sim/pods.py): the host directory of a tier's
root, the files a filesystem tier holds at start, their names and fields."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.version import Version

from .connectorinfo import ConnectorInfo
from .fakevllmbase import parse_version
from .sandbox import Bind, container_host_path
from .serveargs import ServeArgs


@dataclass
class _Server:
    """One vLLM server of a pod: its container, serve args, volume mounts, env and image."""

    container: str
    args: ServeArgs
    binds: list[Bind]
    env: dict[str, str]
    image: str


class PodTiers:
    """Warm tiers of a pod (a mixin of :class:`tests.sim.pods.PodRuntime`)."""

    # ------------------------------------------------------------------ warm tiers
    def _host_dir(self, server: _Server, container_path: str) -> Path:
        host = container_host_path(container_path, server.binds, self.ctx.shm_dir)
        if host is None:
            host = self.ctx.work_dir / "rootfs" / container_path.lstrip("/")
        return host

    def _warm_tiers(self, server: _Server, connectors: list[ConnectorInfo]) -> None:
        v = parse_version(self._version)
        kv = server.args.kv_transfer_config or {}
        for conn in connectors:
            for root in conn.fs_roots:
                host = self._host_dir(server, root)
                self._fs_roots.append((str(PurePosixPath("/") / root.lstrip("/")), host))
                if not self.ctx.overrides.get("cold"):
                    self._write_fs_files(host, server.args, kv)
        if any(c.cpu_tier for c in connectors) and v >= Version("0.20.0"):
            engine = str(kv.get("engine_id") or uuid.uuid5(uuid.NAMESPACE_URL, f"{self.ctx.uid}/{server.container}"))
            ranks = server.args.dp_ranks or (None,)
            shm = container_host_path("/dev/shm", server.binds, self.ctx.shm_dir) or self.ctx.shm_dir
            shm.mkdir(parents=True, exist_ok=True)
            for rank in ranks:
                eid = engine if rank is None else f"{engine}_dp{rank}"
                path = shm / f"vllm_offload_{eid}.mmap"
                with open(path, "wb") as fh:
                    fh.truncate(1 << 20)

    def _write_fs_files(self, root: Path, args: ServeArgs, kv: dict[str, Any]) -> None:
        """A handful of files laid out as vLLM's FS tier does (``vllm/v1/kv_offload/file_mapper.py``):
        ``<root>/<model with / -> _>_<hash12>/config.json`` and
        ``<root>/<model>_<hash12>_r0/<h[0:3]>/<h[3:5]>_g0/<h>.bin``.

        As ``vllm/v1/kv_offload/file_mapper.py::FileMapper`` and ``tiering/fs/manager.py``: the
        record's fields (``model_name`` is the model, never ``--served-model-name``), hashed as
        canonical JSON (sorted keys, no spaces) for ``<hash12>``, written with ``indent=2``."""
        base = self._fs_base(args, kv)
        cfg_dir = root / base
        cfg_dir.mkdir(parents=True, exist_ok=True)
        (cfg_dir / "config.json").write_text(json.dumps(self._fs_fields(args, kv), indent=2, sort_keys=True))
        count = int(self.ctx.overrides.get("fs_files", 4))
        for i in range(count):
            h = hashlib.sha256(f"{self.ctx.uid}/{args.model}/{i}".encode()).hexdigest()
            d = root / f"{base}_r0" / h[0:3] / f"{h[3:5]}_g0"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{h}.bin").write_bytes(b"\0" * 256)

    @staticmethod
    def _fs_fields(args: ServeArgs, kv: dict[str, Any]) -> dict[str, Any]:
        extra = kv.get("kv_connector_extra_config") if isinstance(kv.get("kv_connector_extra_config"), dict) else {}
        block = int((extra or {}).get("block_size", 16) or 16)
        return {"model_name": args.model, "tokens_per_hash": block, "blocks_per_file": 1, "tp_size": 1,
                "pp_size": 1, "pcp_size": 1, "dcp_size": 1, "dtype": "torch.bfloat16",
                "kv_cache_groups": [{"tokens_per_block": block, "layer_names": ["model.layers.0.self_attn.attn"]}],
                "inference_engine": "vllm"}

    @classmethod
    def _fs_base(cls, args: ServeArgs, kv: dict[str, Any]) -> str:
        """``<model with / -> _>_<hash12>``: the FS tier's directory of this model (the record's
        canonical JSON hashed, as ``vllm/v1/kv_offload/file_mapper.py::FileMapper``)."""
        canonical = json.dumps(cls._fs_fields(args, kv), sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
        return f"{args.model.replace('/', '_')}_{digest}"
