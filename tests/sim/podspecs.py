"""What the simulator reads in a pod spec before any pod runs: its own rule for "this container
runs vLLM", the pod specs an object holds, and the ``--dev-mode`` edit of them. The cluster's
reconcilers (tests/sim/controllers.py) and the real servers (tests/sim/realservers.py) both use
it, so neither imports the other for it."""

from __future__ import annotations

import re
from typing import Any

__all__ = ["DEV_MODE_VALUES", "apply_dev_mode_to_podspec", "is_vllm_container", "pod_specs_of"]


# --------------------------------------------------------------------------------------------
# vLLM container rule and dev-mode editing
# --------------------------------------------------------------------------------------------

_SIDECAR_IMAGE_RE = re.compile(r"(routing-sidecar|disagg-sidecar|inference-scheduler|epp)")
_LLMD_IMAGE_RE = re.compile(r"^llm-d(-cuda|-dev|-cuda-dev|-rocm|-xpu|-cpu|-hpu|-aws)?$")


def is_vllm_container(container: dict[str, Any]) -> bool:
    """The simulator's own rule for "this container runs vLLM": its command/args mention the
    word ``vllm``, or its image repository is a vLLM image (``*vllm*``) or an llm-d vLLM image
    (``llm-d``, ``llm-d-cuda``, ``llm-d-dev`` ...); router/sidecar/EPP images never are."""
    image = str(container.get("image") or "")
    repo = image.split("@")[0]
    last = repo.rsplit("/", 1)[-1].split(":")[0]
    if _SIDECAR_IMAGE_RE.search(last):
        return False
    words = " ".join(str(x) for x in (container.get("command") or []) +
                     (container.get("args") or []))
    if re.search(r"(^|[^A-Za-z0-9_])vllm([^A-Za-z0-9_]|$)", words):
        return True
    return "vllm" in last or bool(_LLMD_IMAGE_RE.match(last))


DEV_MODE_VALUES = {"on": "1", "invalid": "true"}


def apply_dev_mode_to_podspec(spec: dict[str, Any], mode: str) -> None:
    """Edit ``VLLM_SERVER_DEV_MODE`` in every vLLM container of a pod spec in place:
    ``on`` -> "1", ``invalid`` -> "true", ``off`` -> removed."""
    for c in spec.get("containers") or []:
        if not is_vllm_container(c):
            continue
        env = [e for e in (c.get("env") or []) if e.get("name") != "VLLM_SERVER_DEV_MODE"]
        if mode in DEV_MODE_VALUES:
            env.append({"name": "VLLM_SERVER_DEV_MODE", "value": DEV_MODE_VALUES[mode]})
        c["env"] = env


def pod_specs_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs an object holds: Pod ``spec``; Deployment/ReplicaSet/StatefulSet/Job
    ``spec.template.spec``; LeaderWorkerSet leader and worker template specs."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return [spec]
    if kind == "LeaderWorkerSet":
        lwt = spec.get("leaderWorkerTemplate") or {}
        out = []
        for t in ("leaderTemplate", "workerTemplate"):
            if isinstance(lwt.get(t), dict):
                out.append(lwt[t].setdefault("spec", {}))
        return out
    tmpl = spec.get("template")
    if isinstance(tmpl, dict) and isinstance(tmpl.get("spec"), dict):
        return [tmpl["spec"]]
    return []
