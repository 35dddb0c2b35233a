"""The vLLM version an image tag claims, and whether the running server agrees (pure).

Tags read (Docker Hub ``vllm/vllm-openai`` tags and the llm-d GitHub release notes):

* ``vllm/vllm-openai:vX.Y.Z`` and its variants (``v0.20.0-cu130``): vLLM ``X.Y.Z``;
* llm-d images that carry vLLM (``ghcr.io/llm-d/llm-d-cuda:vA.B.C``, ``llm-d``, ``llm-d-rocm``
  ...), through the llm-d release notes: llm-d v0.9 ships vLLM 0.26.0, v0.8 ships 0.23.0,
  v0.7 ships 0.19.1. Other llm-d releases, ``latest``, ``sha-...`` and digests claim nothing.

llm-d builds vLLM from source at a pinned commit, so its ``/version`` may be a dev version
(``0.26.1.dev42+g<sha>``): only the release part (``X.Y.Z``) is compared.
"""

from __future__ import annotations

import re

from packaging.version import InvalidVersion, Version

__all__ = ["LLMD_RELEASES", "image_claimed_version", "version_mismatch"]

#: llm-d release ``(major, minor)`` -> the vLLM release its images ship.
LLMD_RELEASES: dict[tuple[int, int], str] = {(0, 9): "0.26.0", (0, 8): "0.23.0", (0, 7): "0.19.1"}

_VLLM_REPO = re.compile(r"(^|/)vllm-openai(-[a-z0-9]+)*$")
_LLMD_REPO = re.compile(r"(^|/)llm-d(-(cuda|rocm|xpu|hpu|tpu|cpu|gaudi|aws|gke))*$")
_TAG = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+_.][A-Za-z0-9._-]*)?$")


def _split(image: str) -> tuple[str, str | None]:
    """``(repository, tag)`` of an image reference (digest dropped, registry kept)."""
    ref = image.split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1:]
    return ref, None


def image_claimed_version(image: str) -> str | None:
    """The vLLM version ``image``'s tag claims (``"0.23.0"``), or None when the tag says none
    (``latest``, a sha, a digest, an image this table does not know)."""
    repo, tag = _split(image.strip())
    if not tag:
        return None
    m = _TAG.match(tag)
    if m is None:
        return None
    major, minor, micro = (int(g) for g in m.groups())
    if _VLLM_REPO.search(repo):
        return f"{major}.{minor}.{micro}"
    if _LLMD_REPO.search(repo):
        return LLMD_RELEASES.get((major, minor))
    return None


def version_mismatch(image: str, served: str | None) -> str | None:
    """A note when the version ``image``'s tag claims and the one ``GET /version`` answered
    (``served``) differ in their release part, else None (also when either is unknown or does
    not parse)."""
    claimed = image_claimed_version(image)
    if claimed is None or not served:
        return None
    try:
        running = Version(served.strip().lstrip("v"))
    except InvalidVersion:
        return None
    if Version(claimed).release[:3] == (running.release + (0, 0, 0))[:3]:
        return None
    return (f"version mismatch: the image {image} says vLLM {claimed}, but GET /version answers {served}; "
            "the plan follows the running server")
