"""The prefix cache of one fake vLLM engine and the connector tiers behind it, block by block,
as the real 0.32.0 server counts them (checked by the referee's canary probes,
``tests/referee/test_canary_referee.py``, against the real CPU build's answers recorded in
``tests/referee/data/real-0.32.0-canary.json``).

- **Blocks.** A prompt's blocks are hashed in a chain (a block's hash covers every token before
  it, and the ``cache_salt`` enters the first block's hash, as vLLM's
  ``vllm/v1/core/kv_cache_utils.py::hash_block_tokens`` takes the salt as an extra key of the
  first block). Only the tokens before the last one are looked up, so a repeat of an n-token
  prompt shows ``floor((n - 1) / block) * block`` cached tokens (the block holding the last
  token never counts: 128 -> 0, 129 -> 128, 257 -> 256 with 128-token blocks).
- **Tiers.** The engine's own cache (``device``) is looked up first; the blocks after the
  leading device hits are looked up in the connector tiers in turn: the CPU offload tier
  (``host``), the FS offload tier (``disk``: block files under the tier's root, so deleting
  them empties it) and an external store (vLLM's example disk connector:
  ``external_unspecified``). Device hits count in ``vllm:prefix_cache_hits``; connector hits in
  ``vllm:external_prefix_cache_hits``; both in ``vllm:prompt_tokens_cached`` and by source in
  ``vllm:prompt_tokens_cached_by_source{source}`` (the source names are 0.32.0's: ``device``,
  ``host``, ``p2p``, ``disk``, ``external_unspecified``; which connector reports ``host`` or
  ``disk`` is assumed from the names, the CPU build runs no offloading connector). After a
  request every block of the prompt is stored in the device cache and in every tier the
  engine has.
- **Salt.** ``cache_salt`` must be a non-empty string of at most 128 characters without ``@``,
  ``/``, ``\\`` or NUL (0.32.0's 400 messages, which end with ``(parameter=cache_salt)``:
  :func:`salt_error`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["SOURCES", "EngineCache", "FsBlocks", "block_hashes", "salt_error"]

#: The ``source`` label values of ``vllm:prompt_tokens_cached_by_source`` in 0.32.0.
SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")

_SALT_RULE = ("Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL. "
              "(parameter=cache_salt)")


def salt_error(salt: object) -> str | None:
    """vLLM 0.32.0's 400 message for a ``cache_salt`` it refuses, None when it takes it (a salt
    absent from the request is None here and taken)."""
    if salt is None:
        return None
    if not isinstance(salt, str) or salt == "":
        return "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)"
    if len(salt) > 128 or any(ch in salt for ch in "@/\\\x00"):
        return _SALT_RULE
    return None


def block_hashes(tokens: list[str], block: int, salt: str | None = None) -> list[str]:
    """Chained hashes of the full blocks of ``tokens`` (the salt in the first block's hash)."""
    out, prev = [], "salt:" + (salt or "")
    for i in range(0, len(tokens) - len(tokens) % block, block):
        prev = hashlib.sha256((prev + "\x00" + "\x1f".join(tokens[i:i + block])).encode()).hexdigest()
        out.append(prev)
    return out


@dataclass
class FsBlocks:
    """The FS offload tier of one engine: one file per block under each directory of ``dirs``
    (``<dir>/<h[0:3]>/<h[3:5]>_g0/<h>.bin``, the layout of vLLM's FS tier,
    ``vllm/v1/kv_offload/file_mapper.py``), so ``clear-fs`` deleting them empties the tier."""

    dirs: tuple[Path, ...]

    def _path(self, d: Path, h: str) -> Path:
        return d / h[0:3] / f"{h[3:5]}_g0" / f"{h}.bin"

    def has(self, h: str) -> bool:
        """True when a block file of ``h`` is in any directory."""
        return any(self._path(d, h).is_file() for d in self.dirs)

    def store(self, hashes: list[str]) -> None:
        """Write the block files of ``hashes`` (256 zero bytes each) into the first directory."""
        if not self.dirs:
            return
        for h in hashes:
            p = self._path(self.dirs[0], h)
            if not p.exists():
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(b"\0" * 256)


@dataclass
class EngineCache:
    """One engine's cached blocks per tier and its token counters (Prometheus counters: they
    never go down). ``host``/``external`` are None when the engine has no such tier, ``fs``
    None without an FS tier. ``running``/``waiting``: requests in the engine (gauges)."""

    host: set[str] | None = None
    fs: FsBlocks | None = None
    external: set[str] | None = None
    device: set[str] = field(default_factory=set)
    queries: float = 0.0
    hits: float = 0.0
    ext_queries: float = 0.0
    ext_hits: float = 0.0
    by_source: dict[str, float] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0.0))
    running: int = 0
    waiting: int = 0

    @property
    def has_connector(self) -> bool:
        """True when some connector tier sits behind the device cache."""
        return self.host is not None or self.fs is not None or self.external is not None

    def prefill(self, tokens: list[str], block: int, salt: str | None,
                caching: bool = True) -> tuple[int, dict[str, int]]:
        """Look the prompt up as the scheduler does, count it, store its blocks. Returns the
        cached tokens and their split by source (only sources with hits). Without ``caching``
        (``--no-enable-prefix-caching``) nothing is looked up or stored; queries still count."""
        looked = block_hashes(tokens[:-1], block, salt) if tokens and caching else []
        every = block_hashes(tokens, block, salt)
        split: dict[str, int] = {}
        i = 0
        while i < len(looked) and looked[i] in self.device:
            i += 1
        device_hits = i * block
        if device_hits:
            split["device"] = device_hits
        ext = 0
        while i < len(looked):
            h = looked[i]
            if self.host is not None and h in self.host:
                src = "host"
            elif self.fs is not None and self.fs.has(h):
                src = "disk"
            elif self.external is not None and h in self.external:
                src = "external_unspecified"
            else:
                break
            split[src] = split.get(src, 0) + block
            ext += block
            i += 1
        self.queries += len(tokens)
        self.hits += device_hits
        if self.has_connector:
            self.ext_queries += max(0, len(tokens) - device_hits)
            self.ext_hits += ext
        for src, n in split.items():
            self.by_source[src] += n
        if not caching:
            return 0, {}
        self.device.update(every)
        if self.host is not None:
            self.host.update(every)
        if self.external is not None:
            self.external.update(every)
        if self.fs is not None:
            self.fs.store(every)
        return device_hits + ext, split
