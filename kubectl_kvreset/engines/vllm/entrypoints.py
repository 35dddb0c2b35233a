"""Which words start a vLLM API server, and what an image runs when a container has no ``command``.

``vllm serve``, ``python3 -m vllm.entrypoints.openai.api_server`` and ``python -m
vllm.entrypoints.cli.main serve`` (:func:`vllm_entrypoint`); image repository globs -> entrypoint
argv (:data:`DEFAULT_ENTRYPOINTS`, :func:`image_entrypoint`); the vLLM release a ``vllm/vllm-openai``
tag names (:func:`image_vllm_release`). Pure.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from ..argv import python_module

__all__ = [
    "DEFAULT_ENTRYPOINTS",
    "EntrypointTable",
    "image_entrypoint",
    "image_vllm_release",
    "python_module",
    "vllm_entrypoint",
]

# --------------------------------------------------------------------------------------------
# Image entrypoints
# --------------------------------------------------------------------------------------------

_VLLM_SERVE: tuple[str, ...] = ("vllm", "serve")
_API_SERVER: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")

#: Image repository glob (tag and digest removed, ``docker.io/`` and ``library/`` dropped) ->
#: the entrypoint argv the image runs when a container has no ``command``; None = not vLLM.
#: First match wins. Sources: ``vllm/vllm-openai`` images have ``ENTRYPOINT ["vllm","serve"]``
#: (vLLM ``docker/Dockerfile``); llm-d images start ``python -m vllm.entrypoints.openai.api_server``
#: (llm-d ``docker/Dockerfile.cuda``). llm-d's sidecar, router and
#: scheduler images share the ``ghcr.io/llm-d/llm-d`` prefix and are excluded first.
DEFAULT_ENTRYPOINTS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("*sidecar*", None),
    ("*router*", None),
    ("*inference-scheduler*", None),
    ("*inference-sim*", None),
    ("*kv-cache*", None),
    ("vllm/vllm-openai", _VLLM_SERVE),
    ("vllm/vllm-openai-*", _VLLM_SERVE),
    ("ghcr.io/llm-d/llm-d", _API_SERVER),
    ("ghcr.io/llm-d/llm-d-*", _API_SERVER),
)

EntrypointTable = Sequence[tuple[str, "tuple[str, ...] | None"]]


def _image_repository(image: str) -> str:
    """Return ``image`` without tag or digest, and without ``docker.io/`` / ``library/``."""
    ref = image.strip().split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    for prefix in ("docker.io/", "index.docker.io/"):
        ref = ref.removeprefix(prefix)
    ref = ref.removeprefix("library/")
    return ref


def image_entrypoint(
    image: str, table: EntrypointTable = DEFAULT_ENTRYPOINTS
) -> tuple[str, ...] | None:
    """Return the argv an image runs when the container has no ``command``.

    Args:
        image: an image reference such as ``vllm/vllm-openai:v0.23.0`` or
            ``ghcr.io/llm-d/llm-d-cuda:v0.8.0@sha256:...``.
        table: ordered (repository glob, entrypoint or None) pairs; the first match wins.

    Returns:
        ``("vllm", "serve")`` for ``vllm/vllm-openai``, ``("python3", "-m",
        "vllm.entrypoints.openai.api_server")`` for llm-d images, None for anything else
        (unknown images and llm-d's non-vLLM images such as the routing sidecar).
    """
    repo = _image_repository(image)
    for pattern, entry in table:
        if fnmatch.fnmatchcase(repo, pattern):
            return entry
    return None


def image_vllm_release(image: str) -> tuple[int, int, int] | None:
    """The vLLM release a ``vllm/vllm-openai[-*]:vX.Y.Z[-suffix]`` image tag names, else None.

    Only vLLM's own images: llm-d images carry llm-d's version, not vLLM's (llm-d
    builds vLLM from a pinned commit, ``docker/common-versions``). Used before any call, where
    the running server cannot be asked yet (the
    nested-mapping rule of ``--config`` files, :mod:`kubectl_kvreset.engines.vllm.configfile`).
    """
    repo = _image_repository(image)
    if not (repo == "vllm/vllm-openai" or fnmatch.fnmatchcase(repo, "vllm/vllm-openai-*")):
        return None
    ref = image.strip().split("@", 1)[0]
    tag = ref[ref.rfind(":") + 1:] if ref.rfind(":") > ref.rfind("/") else ""
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)(?:[-+.].*)?$", tag)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None

# --------------------------------------------------------------------------------------------
# The vLLM invocation in a command
# --------------------------------------------------------------------------------------------

def vllm_entrypoint(words: Sequence[str]) -> tuple[str, int] | None:
    """If ``words`` start a vLLM API server, return (entrypoint, index of its first argument).

    ``vllm serve ...`` -> ("vllm serve", 2); ``python3 [-u] -m vllm.entrypoints.openai.api_server``
    -> ("api_server", k); ``python -m vllm.entrypoints.cli.main serve`` -> ("vllm serve", k).
    Other ``vllm`` sub-commands (``vllm launch render``, ``vllm bench``) are not API servers.
    """
    if not words:
        return None
    base = words[0].rsplit("/", 1)[-1]
    if base == "vllm":
        if len(words) > 1 and words[1] == "serve":
            return "vllm serve", 2
        return None
    run = python_module(words)
    if run is not None:
        module, k = run
        if module == "vllm.entrypoints.openai.api_server":
            return "api_server", k
        if module == "vllm.entrypoints.cli.main" and k < len(words) and words[k] == "serve":
            return "vllm serve", k + 1
    return None
