"""Container image facts the simulator needs: entrypoint argv and the vLLM version an image carries.

This is the simulator's own table, kept apart from the plugin's on purpose (the simulator must
find what a pod serves independently of the code under test).

Sources:
- ``vllm/vllm-openai`` images have ``ENTRYPOINT ["vllm", "serve"]`` so a pod's ``args`` start with
  the model (vLLM ``docker/Dockerfile``).
- llm-d images and older vLLM images run ``python3 -m vllm.entrypoints.openai.api_server``
  (llm-d ``docker/Dockerfile.cuda``; modelservice ``imageDefault``).
- llm-d release -> vLLM release: llm-d v0.9 ships vLLM 0.26.0, v0.8 ships 0.23.0, v0.7 ships
  0.19.1 (llm-d GitHub release notes).
- Routing sidecar image names: ``llm-d-routing-sidecar`` (legacy repo llm-d/llm-d-routing-sidecar)
  and ``llm-d-router-disagg-sidecar`` (llm-d-inference-scheduler / router).
"""

from __future__ import annotations

import re

__all__ = [
    "DEFAULT_VERSION",
    "PYTHON_API_SERVER_ENTRYPOINT",
    "VLLM_SERVE_ENTRYPOINT",
    "image_entrypoint",
    "image_vllm_version",
    "is_legacy_sidecar_image",
    "is_sidecar_image",
    "split_image",
]

DEFAULT_VERSION = "0.26.0"
"""vLLM version claimed when nothing else decides."""

VLLM_SERVE_ENTRYPOINT: tuple[str, ...] = ("vllm", "serve")
PYTHON_API_SERVER_ENTRYPOINT: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")

# llm-d release (major, minor) -> vLLM release it ships (llm-d GitHub release notes).
_LLMD_RELEASES: dict[tuple[int, int], str] = {
    (0, 9): "0.26.0",
    (0, 8): "0.23.0",
    (0, 7): "0.19.1",
}

_VLLM_TAG = re.compile(r"^v?(\d+\.\d+\.\d+)(?:[-+.].*)?$")
_LLMD_TAG = re.compile(r"^v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?$")


def split_image(image: str) -> tuple[str, str]:
    """Split an image reference into (repository, tag).

    ``"docker.io/vllm/vllm-openai:v0.23.0"`` -> ``("vllm/vllm-openai", "v0.23.0")``. A digest
    (``@sha256:...``) is dropped; a missing tag gives ``"latest"``. The registry host
    ``docker.io`` / ``index.docker.io`` and a ``library/`` prefix are removed so Docker Hub names
    compare equal however they are written. Never raises.
    """
    ref = image.strip().split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = ref.rsplit(":", 1)
    else:
        repo, tag = ref, "latest"
    for prefix in ("docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if repo.startswith(prefix):
            repo = repo[len(prefix):]
    if repo.startswith("library/"):
        repo = repo[len("library/"):]
    return repo, tag


def is_sidecar_image(image: str) -> bool:
    """True when the image is an llm-d routing sidecar.

    Matches ``llm-d-routing-sidecar``, ``llm-d-router-disagg-sidecar`` and any repository whose
    last path element contains ``routing-sidecar`` or ``disagg-sidecar``.
    """
    name = split_image(image)[0].rsplit("/", 1)[-1]
    return "routing-sidecar" in name or "disagg-sidecar" in name


def is_legacy_sidecar_image(image: str) -> bool:
    """True for the legacy ``llm-d-routing-sidecar`` image, whose ``--vllm-port`` defaults to 8001.

    The router's sidecar (``llm-d-router-disagg-sidecar``) defaults to 8200 since llm-d-router
    PR #1723 (``pkg/sidecar/proxy/options.go``).
    """
    name = split_image(image)[0].rsplit("/", 1)[-1]
    return "routing-sidecar" in name


def _is_vllm_openai(repo: str) -> bool:
    return repo.rsplit("/", 1)[-1].startswith("vllm-openai") and "vllm" in repo.split("/", 1)[0]


# llm-d images that carry vLLM: llm-d, llm-d-cuda, llm-d-cuda-dev, llm-d-dev, llm-d-rocm, ...
# (not llm-d-inference-scheduler, the routing sidecars, kv-cache tools).
_LLMD_VLLM_IMAGE = re.compile(r"^llm-d(-(cuda|rocm|xpu|hpu|tpu|cpu|gaudi|aws|gke|dev))*$")


def _is_llmd(repo: str) -> bool:
    return bool(_LLMD_VLLM_IMAGE.match(repo.rsplit("/", 1)[-1]))


def image_entrypoint(image: str) -> list[str] | None:
    """The argv an image's ENTRYPOINT execs, or None when the simulator does not know the image.

    ``vllm/vllm-openai:*`` (also ``-cpu`` / ``-rocm`` variants) -> ``["vllm", "serve"]``;
    llm-d images carrying vLLM (``llm-d``, ``llm-d-cuda``, ``llm-d-cuda-dev``, ``llm-d-dev``,
    ``llm-d-rocm`` ...; not ``llm-d-inference-scheduler``) and other images whose repository names vLLM ->
    ``["python3", "-m", "vllm.entrypoints.openai.api_server"]``; routing sidecars and anything
    else -> None (their binary is emulated, not executed).
    """
    if not image or is_sidecar_image(image):
        return None
    repo, _tag = split_image(image)
    if _is_vllm_openai(repo):
        return list(VLLM_SERVE_ENTRYPOINT)
    if _is_llmd(repo) or "vllm" in repo.rsplit("/", 1)[-1]:
        return list(PYTHON_API_SERVER_ENTRYPOINT)
    return None


def image_vllm_version(image: str) -> str | None:
    """The vLLM release an image tag claims, or None when the tag does not say.

    ``vllm/vllm-openai:v0.20.0-cu130`` -> ``"0.20.0"``; ``ghcr.io/llm-d/llm-d-cuda:v0.8.0`` ->
    ``"0.23.0"`` through the llm-d release table; ``:latest``, dev tags
    (``sha-a1bcf21``) and unknown llm-d releases -> None (the caller then uses
    :data:`DEFAULT_VERSION`).
    """
    if not image:
        return None
    repo, tag = split_image(image)
    if _is_vllm_openai(repo):
        m = _VLLM_TAG.match(tag)
        return m.group(1) if m else None
    if _is_llmd(repo) and not is_sidecar_image(image):
        m = _LLMD_TAG.match(tag)
        if m:
            return _LLMD_RELEASES.get((int(m.group(1)), int(m.group(2))))
    return None
