"""Safe deletion of vLLM's FS offload tier: path checks, one deletion per backing volume, exec.

The FS tier is a directory tree that vLLM fills and never empties
(``vllm/v1/kv_offload/tiering/fs/manager.py``; llm-d's legacy ``llmd_fs_backend`` "is not
responsible for cleanup"). Its roots come from three config forms, all read by
:mod:`kubectl_kvreset.tiers`:

* ``TieringOffloadingSpec`` ``secondary_tiers[]`` of type ``fs`` (vLLM >= 0.23) or ``fs_python``
  (0.22.x) with ``root_dir``;
* llm-d's ``SharedStorageOffloadingSpec`` with ``shared_storage_path``.

The layout below a root (``vllm/v1/kv_offload/file_mapper.py``, unchanged 0.22.0 -> 0.33.0) is
``<root>/<model>_<hash12>/config.json`` plus ``<root>/<model>_<hash12>_r<rank>/...`` where
``<model>`` is the model (``model_config.model``, never ``--served-model-name``) with ``/``
replaced by ``_`` and ``<hash12>`` the first 12 hex digits of the sha256 of the run record's
canonical JSON; ``config.json`` is that record (``FileMapper.get_run_config``, written by
``tiering/fs/manager.py`` once at start), whose ``model_name`` is the model. Files are
content-addressed and shared by every pod that mounts the same volume, so the deletion is
planned per backing volume, not per pod.

A per-model deletion takes a directory only when its name and its record agree that it is the
model's: ``org/victim`` and ``org_victim`` both name ``org_victim_<hash12>``, and only the
record tells them apart (a ``_r<N>`` directory's record is its ``<model>_<hash12>`` sibling's).
A directory named like the model whose record is missing, unreadable or not a JSON object with
a ``model_name`` is left (the row says so and names ``--whole-tier``). The record of
a deleted model directory is kept, so that the next per-model deletion still knows the blocks
vLLM writes there afterwards.

Modules: :mod:`.roots` (path rules), :mod:`.volumes` (backing identity, sharing check),
:mod:`.target` (one deletion and its messages), :mod:`.plan`, :mod:`.script` (the program run in
the pod), :mod:`.run` (exec and its answer). Two halves:

* planning (pure): :func:`check_root` (the path rules), :func:`pod_mounts` (a container's
  volumes as the pod spec declares them), :func:`plan_fs_clear` (roots -> one
  :class:`FsVolumeTarget` per backing directory);
* running: :func:`run_fs_clear` runs a fixed program in the pod through ``pods/exec`` with the
  root and options as separate argv elements (never a shell string): ``python3 -I -c``
  :data:`CLEAR_SCRIPT`, or, when the image has no ``python3``, GNU ``find -P ... -xdev``.
"""

from __future__ import annotations

from .plan import plan_fs_clear
from .roots import FS_TIER_TYPES, MountedVolume, RootCheck, check_root, normalise_root
from .run import NO_EXIT_STATUS, FsClearResult, run_fs_clear, sharing_message, unidentified_message
from .script import CLEAR_PROGRAM, CLEAR_SCRIPT, PACKED_PROGRAM, find_argv, python_argv
from .target import (
    UNEVALUATED_REMEDY,
    ExecChoice,
    FsVolumeTarget,
    held_message,
    missing_root_message,
    model_unknown_message,
    unevaluated_message,
    unknown_model_reason,
)
from .volumes import (
    CROSS_NAMESPACE_KINDS,
    Claims,
    fs_roots,
    is_model_dir,
    may_share,
    model_dir_prefixes,
    pod_claims,
    pod_mounts,
    pv_backing,
)

__all__ = [
    "CLEAR_PROGRAM",
    "CLEAR_SCRIPT",
    "CROSS_NAMESPACE_KINDS",
    "Claims",
    "ExecChoice",
    "FS_TIER_TYPES",
    "FsClearResult",
    "FsVolumeTarget",
    "MountedVolume",
    "NO_EXIT_STATUS",
    "PACKED_PROGRAM",
    "RootCheck",
    "UNEVALUATED_REMEDY",
    "check_root",
    "find_argv",
    "fs_roots",
    "held_message",
    "is_model_dir",
    "may_share",
    "missing_root_message",
    "model_dir_prefixes",
    "model_unknown_message",
    "normalise_root",
    "plan_fs_clear",
    "pod_claims",
    "pod_mounts",
    "pv_backing",
    "python_argv",
    "run_fs_clear",
    "sharing_message",
    "unevaluated_message",
    "unidentified_message",
    "unknown_model_reason",
]
