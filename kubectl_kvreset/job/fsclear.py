"""The clear-fs job: one deletion per backing volume of the targets' FS tiers
(:mod:`kubectl_kvreset.fs` plans and runs each), and its ``FsTierClear`` rows."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..consent import UNLISTED as CONSENT_UNLISTED
from ..fs import (
    CROSS_NAMESPACE_KINDS,
    Claims,
    FsClearResult,
    FsVolumeTarget,
    model_unknown_message,
    plan_fs_clear,
    pod_claims,
    pv_backing,
    run_fs_clear,
    sharing_message,
    unevaluated_message,
)
from ..kube import Kube, KubeApiError
from ..pool import Cancel, InFlight, NotRun, parallel
from ..report import Column, ExitCode, Report
from .scope import Scope


def shown(text: str | None) -> str | None:
    """``text`` for a table cell or a message: quoted with JSON escapes when it holds a control
    character (a root may hold a newline), else unchanged."""
    if text is not None and any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        return json.dumps(text)
    return text


class FsReport(Report):
    """A :class:`~kubectl_kvreset.report.Report` whose table shows roots and messages with
    control characters escaped (JSON and YAML keep every byte)."""

    def render(self, fmt: str, *, no_headers: bool = False) -> str:
        """As :meth:`Report.render`; ``table``/``wide`` cells are passed through :func:`shown`."""
        if fmt not in ("table", "wide"):
            return super().render(fmt, no_headers=no_headers)
        safe = Report(self.kind, self.columns)
        safe.rows = [{k: shown(v) if isinstance(v, str) else v for k, v in row.items()} for row in self.rows]
        return safe.render(fmt, no_headers=no_headers)


def other_pod_objects(kube: Kube, namespaces: Sequence[str], notes: list[str]) -> list[Mapping[str, Any]]:
    """Every pod object of ``namespaces`` (one list per namespace), to find non-vLLM pods that
    mount an FS tier's volume; a namespace that cannot be listed is skipped with a line added
    to ``notes``."""
    found: list[Mapping[str, Any]] = []
    for ns in namespaces:
        try:
            found.extend(kube.list_items("v1", "pods", ns))
        except KubeApiError as exc:
            notes.append(f"note: cannot list the pods of {ns} to find other users of the volumes: {exc}")
    return found


#: Volume kinds whose identity spans namespaces (:func:`kubectl_kvreset.fs.volumes._volume_identity`:
#: a hostPath is the node's directory, an NFS export the server's); PVCs and emptyDirs do not.
CROSS_NAMESPACE = CROSS_NAMESPACE_KINDS

#: The OTHER PODS entry standing for the pods of namespaces that could not be listed.
UNLISTED = CONSENT_UNLISTED


def sharing_pod_objects(kube: Kube, namespaces: Sequence[str], identities: Sequence[tuple[str, ...]],
                        notes: list[str]) -> tuple[list[Mapping[str, Any]], bool]:
    """The pod objects that may mount the volumes of ``identities`` (volume identities of the
    planned deletions), and whether some namespaces could not be listed.

    With no hostPath/NFS identity (:data:`CROSS_NAMESPACE`) only ``namespaces`` are listed (one
    list each, :func:`other_pod_objects`); with one, every namespace's pods are listed with one
    cluster-wide list. When that list is refused, the namespaces' own lists are used, a note is
    added to ``notes`` and the second item is True: pods there count as possible other users of
    the hostPath/NFS volumes.

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer.
    """
    if not any(i and i[0] in CROSS_NAMESPACE for i in identities):
        return other_pod_objects(kube, namespaces, notes), False
    try:
        return list(kube.list_items("v1", "pods", None)), False
    except KubeApiError as exc:
        why = "not permitted" if exc.status == 403 else str(exc)
        notes.append(f"note: the pods of all namespaces cannot be listed ({why}); pods of other namespaces may "
                     "use the hostPath/NFS volumes: only the targets' models' files are deleted there")
        return other_pod_objects(kube, namespaces, notes), True


def read_claims(kube: Kube, keys: Sequence[tuple[str, str]],
                cache: dict[tuple[str, str], Any] | None = None) -> Claims:
    """The backing storage of the claims ``keys`` (``(namespace, claim)``): each claim's
    ``spec.volumeName`` and that PersistentVolume (:func:`kubectl_kvreset.fs.pv_backing`).

    A claim that cannot be read, or whose PersistentVolume cannot be (``get persistentvolumes``
    is cluster-scoped: a namespaced Role cannot grant it), gets a note saying whether other
    claims share its storage is not known; when that PersistentVolume cannot be read and the
    claim is ``ReadWriteMany`` it also counts as possibly shared (:class:`~kubectl_kvreset.fs.Claims`).
    A claim not found or not bound yet is left as it is (its name is its identity). ``cache``
    keeps the answers between calls (``(namespace, claim)`` -> result).

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer.
    """
    cache = {} if cache is None else cache
    backing: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {}
    notes: dict[tuple[str, ...], str] = {}
    shared: dict[tuple[str, ...], str] = {}
    for ns, claim in dict.fromkeys(keys):
        if (ns, claim) not in cache:
            cache[(ns, claim)] = _read_claim(kube, ns, claim)
        kind, value, maybe = cache[(ns, claim)]
        if kind == "backing":
            backing[(ns, claim)] = value
        elif kind == "note":
            notes[("pvc", ns, claim)] = value
            if maybe:
                shared[("pvc", ns, claim)] = maybe
    return Claims(backing, notes, shared)


def _read_claim(kube: Kube, ns: str, claim: str) -> tuple[str, Any, str | None]:
    """``("backing", (identity, top), None)``, ``("note", why, shared entry or None)`` or
    ``("none", None, None)`` for one claim."""
    try:
        pvc = kube.get_object("v1", "persistentvolumeclaims", ns, claim)
    except KubeApiError as exc:
        if exc.status == 404:
            return "none", None, None
        why = "not permitted: needs get on persistentvolumeclaims" if exc.status == 403 else str(exc)
        return "note", (f"pvc/{claim} cannot be read ({why}): the storage it is bound to, and whether other "
                        "claims use the same storage, are not known"), None
    spec = pvc.get("spec") or {}
    volume = spec.get("volumeName")
    if not volume:
        return "none", None, None
    try:
        pv = kube.get_object("v1", "persistentvolumes", None, str(volume))
    except KubeApiError as exc:
        why = ("not permitted: needs get on persistentvolumes, a cluster-scoped resource (a ClusterRole)"
               if exc.status == 403 else str(exc))
        modes = set(spec.get("accessModes") or []) | set((pvc.get("status") or {}).get("accessModes") or [])
        maybe = (f"pods of other claims on the storage of pvc/{claim} (it is ReadWriteMany and its "
                 f"PersistentVolume {volume} cannot be read)") if "ReadWriteMany" in modes else None
        return "note", (f"the PersistentVolume {volume} of pvc/{claim} cannot be read ({why}): whether other "
                        "claims use the same storage is not known"
                        + ("; the claim is ReadWriteMany, so only the targets' models' files are deleted"
                           if maybe else "")), maybe
    return "backing", pv_backing(pv), None


def columns(scope: str | None) -> list[Column]:
    """Columns of the ``FsTierClear`` table (NAMESPACE only with ``-A``)."""
    cols = [Column("NAMESPACE", "namespace"), Column("VOLUME", "volume"), Column("ROOT", "root"),
            Column("PODS", "pod_count"), Column("POD NAMES", "pods", wide=True),
            Column("EXEC POD", "exec_pod", wide=True), Column("CONTAINER", "container", wide=True),
            Column("FILES BEFORE", "files_before"), Column("BYTES BEFORE", "bytes_before"),
            Column("FILES AFTER", "files_after"), Column("BYTES AFTER", "bytes_after"),
            Column("RESULT", "result"), Column("OTHER PODS", "other_pods", wide=True),
            Column("MESSAGE", "message", notes=True)]
    return cols[1:] if scope is not None else cols


def fs_row(target: FsVolumeTarget, outcome: FsClearResult | None = None) -> dict[str, Any]:
    """One ``FsTierClear`` row: the plan (``result`` ``planned``, ``refused``, or ``left`` for a
    root that cannot be evaluated) or, with ``outcome``, what happened (``emptied``,
    ``unconfirmed``, ``refused``, ``failed``, ``left``).

    Keys: namespace, volume, volume_path, root, pods, pod_count, exec_pod, container,
    files_before, bytes_before, files_after, bytes_after, result, message, other_pods, users (the
    other pods with what each serves there: ``ns/pod (model M)``), kept_pods (those whose files a
    per-model deletion keeps), held_models (targeted models whose directories are kept for
    consent), model_only, models, method, other_files, skipped_mounts.
    """
    messages: list[str] = []
    if outcome is None:
        result = "refused" if target.refusal else "left" if (
            target.unevaluated or target.model_unknown or (target.held and not target.models)) else "planned"
        if target.refusal:
            messages.append(target.refusal)
        elif target.unevaluated:
            messages.append(unevaluated_message(target.root, target.unevaluated))
        elif target.model_unknown:
            messages.append(model_unknown_message(target))
        elif target.held:
            messages.append(target.held)
    else:
        result = outcome.result
        if outcome.message:
            messages.append(outcome.message)
    shared = sharing_message(target, outcome)
    if shared is not None:
        messages.append(shared)
    messages.extend(target.notes)
    return {
        "namespace": target.namespace,
        "volume": target.volume,
        "volume_path": target.volume_path,
        "root": target.root,
        "pods": list(target.pods),
        "pod_count": len(target.pods),
        "exec_pod": outcome.exec_pod if outcome is not None and outcome.exec_pod else target.exec_pod,
        "container": outcome.container if outcome is not None and outcome.container else target.container,
        "files_before": outcome.files_before if outcome else None,
        "bytes_before": outcome.bytes_before if outcome else None,
        "files_after": outcome.files_after if outcome else None,
        "bytes_after": outcome.bytes_after if outcome else None,
        "result": result,
        "message": "; ".join(messages) or None,
        "other_pods": list(target.other_pods),
        "users": list(target.sharers),
        "kept_pods": list(target.kept_pods),
        "held_models": list(target.held_models),
        "model_only": target.model_only,
        "models": list(target.models),
        "method": outcome.method if outcome else None,
        "other_files": outcome.other_files if outcome else None,
        "skipped_mounts": list(outcome.skipped_mounts) if outcome else [],
    }


def row_code(outcome: FsClearResult) -> ExitCode:
    """0 when emptied, 3 when unconfirmed (the exec gave no exit status, or the root does not
    exist in the pod), 1 when refused, failed or left (the tier may be left full)."""
    if outcome.result == "unconfirmed":
        return ExitCode.UNCONFIRMED
    return ExitCode.OK if outcome.result == "emptied" else ExitCode.FAILED


@dataclass(frozen=True)
class FsPlan:
    """What clear-fs will do: one :class:`~kubectl_kvreset.fs.FsVolumeTarget` per backing
    volume, and the ``notes`` to show first (other pods on a volume, a namespace not listed)."""

    scope: Scope
    targets: tuple[FsVolumeTarget, ...]
    notes: tuple[str, ...]

    def report(self) -> FsReport:
        """The plan as ``FsTierClear`` rows (``planned`` or ``refused``); ``--dry-run`` prints it."""
        plan = FsReport("FsTierClear", columns(self.scope.namespace))
        for target in self.targets:
            plan.add(fs_row(target), ExitCode.FAILED if target.refusal or target.unevaluated or target.model_unknown
                     or target.held else ExitCode.OK)
        return plan


def plan_fs(scope: Scope, *, model_only: bool = False, whole_tier: bool = False, shared_stores: bool = False) -> FsPlan:
    """Map the targeted pods' FS tier roots to their volumes (:func:`kubectl_kvreset.fs.plan_fs_clear`),
    naming the pods outside the targets that mount the same volume (every pod of the targets'
    namespaces is listed for that, of every namespace for a hostPath/NFS volume:
    :func:`sharing_pod_objects`).

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer a pod list.
    """
    notes: list[str] = []
    targets = plan_fs_shared(scope, scope.pods, notes, model_only=model_only, whole_tier=whole_tier,
                             shared_stores=shared_stores)
    for target in targets:
        shared = sharing_message(target)
        if shared is not None:
            notes.append(f"note: {shown(shared)}")
    if not targets:
        notes.append("The targeted pods have no FS tier (no fs/fs_python secondary tier, no shared_storage_path).")
    return FsPlan(scope, tuple(targets), tuple(notes))


def plan_fs_shared(scope: Scope, pods: Sequence[Any], notes: list[str], *, model_only: bool = False,
                   whole_tier: bool = False, shared_stores: bool = False) -> list[FsVolumeTarget]:
    """:func:`kubectl_kvreset.fs.plan_fs_clear` for ``pods`` with the other users of their
    volumes found by :func:`sharing_pod_objects` (every namespace for a hostPath/NFS volume);
    notes on namespaces that could not be listed are added to ``notes``. ``shared_stores``
    (``--shared-stores``) lets a per-model deletion take a model that pods outside the targets
    also serve on the volume.

    Raises:
        kubectl_kvreset.kube.KubeConnectionError: the API server did not answer a pod list.
    """
    # sharing is judged by backing storage: the claims' PersistentVolumes, where they can be read
    cache: dict[tuple[str, str], Any] = {}
    keys = [k for p in pods for k in pod_claims(p.raw)]
    claims = read_claims(scope.kube, keys, cache)
    first = plan_fs_clear(pods, scope.universe, model_only=model_only, whole_tier=whole_tier, claims=claims)
    identities = [(t.key.split("/", 1)[0],) for t in first if t.refusal is None and t.unevaluated is None]
    others, unlisted = sharing_pod_objects(scope.kube, sorted({p.namespace for p in pods}), identities, notes)
    if claims.backing:
        # another pod's claim may be bound to the same storage under another name
        keys += [k for obj in [p.raw for p in scope.universe] + list(others) for k in pod_claims(obj)]
        claims = read_claims(scope.kube, keys, cache)
    return plan_fs_clear(pods, scope.universe, model_only=model_only, other_pod_objects=others,
                         whole_tier=whole_tier, unlisted=UNLISTED if unlisted else None, claims=claims,
                         shared_stores=shared_stores)


def run_fs(plan: FsPlan, *, timeout_s: float, max_concurrency: int, cancel: Cancel | None = None) -> FsReport:
    """Run every volume deletion of ``plan`` (in parallel, each exec bounded by ``timeout_s``);
    returns the ``FsTierClear`` report (``interrupted`` rows for deletions a cancel kept from
    running or stopped waiting for). Never raises for a volume's failure: its row says what happened."""
    kube = plan.scope.kube
    results = parallel(plan.targets, lambda t: run_fs_clear(kube, t, timeout_s=timeout_s), max_concurrency, cancel)
    report = FsReport("FsTierClear", columns(plan.scope.namespace))
    for target, outcome in zip(plan.targets, results, strict=True):
        if isinstance(outcome, NotRun):
            row = fs_row(target, None)
            row.update(result="interrupted", message=("not run: interrupted" if not isinstance(outcome, InFlight) else
                                                      "interrupted while the deletion ran: some files may be gone; "
                                                      "its result was not awaited"))
            report.add(row, ExitCode.INTERRUPTED)
            continue
        report.add(fs_row(target, outcome), row_code(outcome))
    return report
