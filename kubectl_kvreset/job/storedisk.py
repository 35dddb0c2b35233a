"""LMCache's local disk, emptied by the store step (DESIGN §6 table: ``*.pt`` files through the
FS deletion machinery, files before/after, scope that path), with ``StoreClear`` rows.

Where the files are: :func:`kubectl_kvreset.stores.lmcache_disk.local_disk_of` (LMCache 0.5.6's
settings). How they are deleted: as clear-fs deletes vLLM's FS tier (:mod:`kubectl_kvreset.fstier`):
each directory is checked against the vLLM container's mounts (:func:`~kubectl_kvreset.fstier.check_root`:
never a system directory, only a writable PVC/emptyDir/hostPath/NFS volume), grouped by backing
storage so a PVC shared by several pods is emptied once, and emptied by the fixed program
:data:`~kubectl_kvreset.fstier.CLEAR_SCRIPT` run through ``pods/exec`` in a targeted pod (no
symlink followed, no other file system entered), selecting only ``*.pt`` children of the
directory. LMCache runs inside vLLM's Python, so ``python3`` is always in the image: no ``find``
fallback.

Consent, as for any store (DESIGN §6) with issue 12's per-model rule for shared volumes:

* no pod outside the targets mounts that storage: one call, scope ``store``: every ``*.pt`` of
  the directory;
* otherwise one call per targeted model, scope ``model M``: only ``<model>@*.pt`` files; other
  models' files are kept. When a pod outside the targets writes the same model's files there
  (its LMCache local disk is on the same storage), that model's call needs ``--shared-stores``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..fstier import ExecChoice, check_root, pod_mounts, python_argv
from ..kube import Kube, KubeApiError, KubeConnectionError
from ..pods import VllmPod, describe_pod
from ..stores.calls import SHARED_FLAG
from ..stores.clear import StoreResult
from ..stores.find import pod_config
from ..stores.lmcache_disk import DISK_SUFFIX, LocalDisk, file_prefix, local_disk_of
from ..tiers import LMCACHE_CONNECTORS

__all__ = ["DiskCall", "disk_row", "plan_disks", "run_disk"]

STORE = "lmcache-disk"

#: Said on every row that deleted files: what LMCache's running engines still believe.
INDEX_NOTE = ("running LMCache engines drop a deleted file from their in-memory index when a read finds it "
              "gone (local_disk_backend.py read_file)")


@dataclass(frozen=True)
class DiskCall:
    """One deletion of LMCache local-disk files on one backing storage.

    Attributes:
        namespace: the pods' namespace.
        setting: ``local_disk`` as the first targeted pod configures it.
        root: the directory as the exec pod sees it (normalised), or as written when refused.
        volume: the volume label (``pvc/NAME``...), None when the directory is on none.
        scope: ``store`` (every ``*.pt``) or ``model``.
        model: for ``scope == "model"``: the model whose files go.
        prefixes: file-name starts selected (``org-m@``); empty: every ``*.pt``.
        choices: targeted pods that can run the deletion (ready first).
        targeted: targeted pods (``ns/name``) whose disk this is.
        others: pods outside the targets mounting the same storage over that directory.
        blocked: why nothing is deleted (refused directory, consent, unknown model), or None.
    """

    namespace: str
    setting: str
    root: str | None
    volume: str | None
    scope: str
    model: str | None
    prefixes: tuple[str, ...]
    choices: tuple[ExecChoice, ...]
    targeted: tuple[str, ...]
    others: tuple[str, ...] = ()
    blocked: str | None = None

    @property
    def method(self) -> str:
        """The row's METHOD: what is deleted, and how."""
        what = " and ".join(f"{p}*{DISK_SUFFIX}" for p in self.prefixes) or f"*{DISK_SUFFIX}"
        return f"delete {what} under {self.root} (pods/exec)"


@dataclass
class _Group:
    namespace: str
    identity: tuple[str, ...]
    volume_path: str
    label: str
    setting: str
    choices: list[tuple[bool, ExecChoice]]
    pods: list[str]
    models: list[str | None]


def _disk(kube: Kube, pod: VllmPod, cache: dict[Any, Any]) -> LocalDisk | None:
    if not set(LMCACHE_CONNECTORS) & set(pod.layout.connectors):
        return None
    env, files, _notes = pod_config(kube, pod, cache)
    disk = local_disk_of(pod.serve.kv_transfer_config, env, files)
    return disk if disk is not None and disk.enabled else None


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def _cross_namespace_vllm(universe: Sequence[VllmPod], extra: Sequence[Mapping[str, Any]],
                          groups: Mapping[Any, _Group]) -> list[VllmPod]:
    """The vLLM pods among ``extra`` (pods of other namespaces, listed for a hostPath/NFS disk)
    that are not in ``universe`` and mount one of the ``groups``' hostPath/NFS storage, so the
    models whose files they write there are known."""
    known = {(p.namespace, p.name) for p in universe}
    wanted = {g.identity for g in groups.values() if g.identity[0] in ("hostPath", "nfs")}
    found: list[VllmPod] = []
    for obj in extra if wanted else ():
        meta = obj.get("metadata") or {}
        if (str(meta.get("namespace", "")), str(meta.get("name", ""))) in known:
            continue
        pod = describe_pod(obj)
        if pod is not None and any(m.identity in wanted for m in pod_mounts(obj, pod.container)):
            found.append(pod)
    return found


def plan_disks(kube: Kube, pods: Sequence[VllmPod], universe: Sequence[VllmPod], cache: dict[Any, Any], *,
               shared: bool,
               list_pods: Callable[[Sequence[tuple[str, ...]]], tuple[Sequence[Mapping[str, Any]], str | None]]
               | None = None) -> list[DiskCall]:
    """The deletions of the targeted ``pods``' LMCache local disks (module docstring rules).

    ``universe``: every vLLM pod the plugin sees (others writing to the same storage);
    ``list_pods``: called only when a disk was found, with the disks' volume identities; gives
    any other pod objects (API dicts) that may mount them (the targets' namespaces' pods, every
    namespace's for a hostPath/NFS volume) and, when some namespaces could not be listed, the
    OTHER PODS entry standing for their pods, added to every hostPath/NFS disk (DESIGN §6);
    ``cache``: the
    ConfigMaps/Secrets read so far (:func:`~kubectl_kvreset.stores.find.pod_config`). Refused
    directories are calls with ``blocked`` set. Never raises for odd configurations.
    """
    targeted = {(p.namespace, p.name) for p in pods}
    groups: dict[tuple[tuple[str, ...], str], _Group] = {}
    calls: list[DiskCall] = []
    for pod in pods:
        disk = _disk(kube, pod, cache)
        if disk is None:
            continue
        mounts = pod_mounts(pod.raw, pod.container)
        for path in disk.paths:
            verdict = check_root(path, mounts)
            if not verdict.ok or verdict.mount is None or verdict.volume_path is None or verdict.root is None:
                why = (verdict.refusal or "refused").replace("the FS tier root", "the LMCache local disk")
                calls.append(DiskCall(pod.namespace, disk.setting, verdict.root or path,
                                      verdict.mount.label if verdict.mount else None, "store", None, (), (),
                                      (f"{pod.namespace}/{pod.name}",), blocked=why))
                continue
            key = (verdict.mount.identity, verdict.volume_path)
            group = groups.setdefault(key, _Group(pod.namespace, verdict.mount.identity, verdict.volume_path,
                                                  verdict.mount.label, disk.setting, [], [], []))
            group.choices.append((pod.ready and pod.phase == "Running", ExecChoice(pod.name, pod.container, verdict.root)))
            name = f"{pod.namespace}/{pod.name}"
            if name not in group.pods:
                group.pods.append(name)
            if pod.serve.model not in group.models:
                group.models.append(pod.serve.model)
    # pods outside the targets: what they mount, and the models whose files they write there
    mounted: list[tuple[tuple[str, ...], str, str]] = []
    writers: list[tuple[tuple[str, ...], str, str, str | None]] = []
    seen: set[tuple[str, str]] = set()
    extra: list[Mapping[str, Any]] = []
    unlisted: str | None = None
    if groups and list_pods is not None:
        listed, unlisted = list_pods([g.identity for g in groups.values()])
        extra = list(listed)
    for obj in [p.raw for p in universe] + extra:
        meta = obj.get("metadata") or {}
        ident = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        if ident in targeted or ident in seen or meta.get("deletionTimestamp"):
            continue
        seen.add(ident)
        for c in (obj.get("spec") or {}).get("containers") or []:
            for m in pod_mounts(obj, str(c.get("name", ""))):
                mounted.append((m.identity, m.base, f"{ident[0]}/{ident[1]}"))
    if unlisted is not None:
        mounted += [(g.identity, g.volume_path, unlisted) for g in groups.values() if g.identity[0] in ("hostPath", "nfs")]
    for pod in [*universe, *_cross_namespace_vllm(universe, extra, groups)] if groups else ():
        if (pod.namespace, pod.name) in targeted:
            continue
        disk = _disk(kube, pod, cache)
        if disk is None:
            continue
        mounts = pod_mounts(pod.raw, pod.container)
        for path in disk.paths:
            verdict = check_root(path, mounts)
            if verdict.ok and verdict.mount is not None and verdict.volume_path is not None:
                writers.append((verdict.mount.identity, verdict.volume_path, f"{pod.namespace}/{pod.name}",
                                pod.serve.model))
    for group in groups.values():
        ordered = [c for ready, c in group.choices if ready] + [c for ready, c in group.choices if not ready]
        choices = tuple(dict.fromkeys(ordered))
        root = choices[0].root
        others = tuple(sorted({n for ident, base, n in mounted
                               if ident == group.identity and _overlaps(base, group.volume_path)}))
        common = dict(namespace=group.namespace, setting=group.setting, root=root, volume=group.label,
                      choices=choices, targeted=tuple(group.pods), others=others)
        if not others:
            calls.append(DiskCall(scope="store", model=None, prefixes=(), **common))  # type: ignore[arg-type]
            continue
        for model in group.models:
            if model is None:
                calls.append(DiskCall(scope="model", model=None, prefixes=(), blocked=(
                    "the model name is unknown: a per-model deletion is impossible on a volume pods outside the "
                    f"targets mount ({', '.join(others)})"), **common))  # type: ignore[arg-type]
                continue
            same = sorted({n for ident, path, n, m in writers
                           if ident == group.identity and _overlaps(path, group.volume_path) and m == model})
            blocked = None
            if same and not shared:
                blocked = (f"{len(same)} pod(s) outside the targets write {model}'s LMCache files to this volume "
                           f"({', '.join(same)}): give {SHARED_FLAG} to delete them anyway")
            calls.append(DiskCall(scope="model", model=model, prefixes=(file_prefix(model),), blocked=blocked,
                                  **common))  # type: ignore[arg-type]
    return calls


def _last_json(data: bytes) -> dict[str, Any] | None:
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        if line.strip().startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


def _files(doc: Mapping[str, Any], key: str) -> tuple[int | None, int | None]:
    part = doc.get(key)
    if not isinstance(part, Mapping):
        return None, None
    files, size = part.get("files"), part.get("bytes")
    return (files if isinstance(files, int) else None, size if isinstance(size, int) else None)


def _remedy(call: DiskCall) -> str:
    what = " ".join(f"'{p}*{DISK_SUFFIX}'" for p in call.prefixes) or f"'*{DISK_SUFFIX}'"
    return f"delete {what} under {call.root} from a shell in a pod that mounts {call.volume or 'it'}"


def run_disk(kube: Kube, call: DiskCall, *, dry_run: bool = False, timeout_s: float = 120.0) -> StoreResult:
    """Delete (with ``dry_run``: only count) the call's files through ``pods/exec`` in the first
    usable choice (the next one when a pod is gone or its container unknown); counts of files
    (``before``/``after``) in the call's scope. RBAC: ``get`` and ``create`` on ``pods/exec``.
    Never raises for the cluster's answers: the result says them."""
    if call.blocked is not None:
        return StoreResult("left", unit="files", message=call.blocked)
    last = StoreResult("failed", unit="files", message="no targeted pod to run the deletion in")
    for choice in call.choices:
        via = f"{call.namespace}/{choice.pod} (exec, container {choice.container})"
        argv = python_argv(choice.root, call.prefixes, count_only=dry_run, file_suffix=DISK_SUFFIX)
        try:
            res = kube.exec_command(call.namespace, choice.pod, choice.container, argv, timeout_s=timeout_s)
        except KubeApiError as exc:
            if exc.status in (400, 404):
                last = StoreResult("failed", unit="files", via=via, message=f"exec refused: {exc}")
                continue
            hint = (f"; needs get and create on pods/exec in namespace {call.namespace} - the Role in rbac/ grants it; "
                    f"what would empty it: {_remedy(call)}") if exc.status == 403 else ""
            return StoreResult("failed", unit="files", via=via, message=f"exec refused: {exc}{hint}")
        except KubeConnectionError as exc:
            return StoreResult("failed", unit="files", via=via, message=f"exec failed: {exc}")
        return _outcome(call, choice, res, via, dry_run, timeout_s)
    return last


def _outcome(call: DiskCall, choice: ExecChoice, res: Any, via: str, dry_run: bool, timeout_s: float) -> StoreResult:
    if res.timed_out:
        return StoreResult("failed", unit="files", via=via, message=(
            f"the deletion did not finish within {timeout_s:g} s: not emptied (it may have deleted part)"))
    doc = _last_json(res.stdout)
    if doc is None:
        err = res.stderr.decode("utf-8", "replace").strip().splitlines()
        return StoreResult("failed", unit="files", via=via, message=(
            f"exec exited {res.exit_code}: {(err[-1] if err else res.message or 'no output')[:300]}"))
    if doc.get("refused"):
        return StoreResult("left", unit="files", via=via, message=f"refused in the pod: {doc['refused']}")
    before, bytes_before = _files(doc, "before")
    if doc.get("missing"):
        return StoreResult("planned" if dry_run else "emptied", 0, 0, "files", via,
                           f"{choice.root} does not exist in {choice.pod} (nothing stored yet)")
    notes: list[str] = []
    if bytes_before:
        notes.append(f"{bytes_before} bytes before")
    kept, _ = _files(doc, "others")
    if kept and call.prefixes:
        notes.append(f"{kept} other file(s) under {choice.root} kept (other models, or not LMCache's)")
    if dry_run:
        return StoreResult("planned", before, before, "files", via, "; ".join(notes) or None)
    after, _ = _files(doc, "after")
    errors = [str(e) for e in doc.get("errors") or []]
    skipped = [str(s) for s in doc.get("skipped_mounts") or []]
    if errors:
        notes.append(f"{len(errors)} entries could not be deleted, e.g. {errors[0]}")
    if skipped:
        notes.append("file systems mounted below the directory were not entered: " + ", ".join(skipped[:5]))
    if after == 0 and not errors and not skipped:
        if res.exit_code is None:
            notes.insert(0, "the exec stream ended without an exit status after the deletion reported 0 files left: "
                            "not confirmed (run again to confirm)")
            return StoreResult("unconfirmed", before, after, "files", via, "; ".join(notes))
        if before:
            notes.append(INDEX_NOTE)
        return StoreResult("emptied", before, after, "files", via, "; ".join(notes) or None)
    notes.insert(0, f"{after if after is not None else 'an unknown number of'} file(s) are left under {choice.root}")
    return StoreResult("left", before, after, "files", via, "; ".join(notes))


def disk_row(call: DiskCall, outcome: StoreResult | None = None) -> dict[str, Any]:
    """One ``StoreClear`` row for a local-disk deletion, with the keys
    :func:`kubectl_kvreset.job.storeclear.store_row` gives: the plan (``planned``/``left``) or,
    with ``outcome``, what happened."""
    if outcome is None:
        result, message, before, after, via = ("left" if call.blocked else "planned"), call.blocked, None, None, None
    else:
        result, message, before, after, via = outcome.result, outcome.message, outcome.before, outcome.after, outcome.via
    return {
        "namespace": call.namespace,
        "store": STORE,
        "address": call.setting,
        "resolved": f"volume {call.volume}" if call.volume else "no volume",
        "scope": f"model {call.model}" if call.scope == "model" else "store",
        "model": call.model,
        "method": call.method,
        "targeted_pods": list(call.targeted),
        "other_pods": list(call.others),
        "before": before,
        "after": after,
        "unit": "files",
        "via": via,
        "result": result,
        "message": message,
    }
