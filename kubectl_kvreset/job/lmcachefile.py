"""LMCache's local disk as its ``LMCACHE_CONFIG_FILE`` names it, added to the pods' layouts.

A vLLM pod's tiers are read from its spec (:func:`kubectl_kvreset.engines.vllm.kvconfig.layout_from_serve`),
which cannot read the YAML file ``LMCACHE_CONFIG_FILE`` points to. The store step reads that file
from the ConfigMap or Secret volume that mounts it (:func:`kubectl_kvreset.stores.find.pod_config`)
and finds the disk there (:func:`kubectl_kvreset.stores.lmcache_disk.local_disk_of`, LMCache
0.5.6's precedence: the file, then ``LMCACHE_*`` env, then ``lmcache.*`` extra config). The same
read here gives ``detect`` and the pod rows the disk the store step clears.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from ..engines.vllm.kvconfig import LMCACHE_CONNECTORS
from ..kube import Kube, KubeConnectionError
from ..pods import VllmPod
from ..stores.find import pod_config
from ..stores.lmcache_disk import local_disk_of
from ..tiers import KVLayout, Tier, TierKind

__all__ = ["with_config_file_disks"]

DISK_TYPE = "lmcache_local_disk"


def _with_disk(kube: Kube, pod: VllmPod, cache: dict[Any, Any]) -> VllmPod:
    connector = next((c for c in pod.layout.connectors if c in LMCACHE_CONNECTORS), None)
    if connector is None or any(t.tier_type == DISK_TYPE for t in pod.layout.tiers):
        return pod  # no in-process LMCache, or the spec already names its disk (env wins over the file)
    env, files, _notes = pod_config(kube, pod, cache)
    path = env.get("LMCACHE_CONFIG_FILE")
    if not path or not isinstance(files.get(path), str):
        return pod  # not read: the layout's note says the file's tiers may be missing
    disk = local_disk_of(pod.serve.kv_transfer_config, env, files)
    notes = tuple(n for n in pod.layout.notes if f"LMCache settings in {path} " not in n)
    tiers = list(pod.layout.tiers)
    if disk is not None and disk.enabled:
        tiers += [Tier(kind=TierKind.FS, connector=connector, spec=None, root_dir=p, tier_type=DISK_TYPE,
                       from_file=path) for p in disk.paths]
    layout = KVLayout(connectors=pod.layout.connectors, tiers=tuple(dict.fromkeys(tiers)),
                      kv_role=pod.layout.kv_role, notes=notes)
    return replace(pod, layout=layout)


def with_config_file_disks(kube: Kube, pods: Sequence[VllmPod]) -> list[VllmPod]:
    """``pods`` with the LMCache local disk each one's ``LMCACHE_CONFIG_FILE`` names (enabled:
    ``max_local_disk_size`` above 0) added as an FS tier (``tier_type`` ``lmcache_local_disk``,
    one per directory), and the note that the file was not read dropped where it was read. A pod
    whose spec already names the disk (env, extra config), whose file cannot be read (RBAC, a
    volume the API cannot read) or that runs no in-process LMCache is returned as it is. Each
    ConfigMap or Secret is read once. RBAC: ``get`` on ``configmaps``/``secrets``. Never raises
    for the cluster's answers (a pod whose file cannot be read keeps its layout)."""
    cache: dict[Any, Any] = {}
    out: list[VllmPod] = []
    for pod in pods:
        try:
            out.append(_with_disk(kube, pod, cache))
        except KubeConnectionError:
            out.append(pod)
    return out
