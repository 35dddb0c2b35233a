"""The pods a job acts on: discovered in a namespace (or all), selected by the targets, with a
caller that reaches their vLLM ports (kubectl's Complete phase, without the command line)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..discovery import discover, discover_all
from ..kube import Kube
from ..otherpods import OtherPod, select_others
from ..podapi import PodCaller, PodRef, Transports
from ..pods import TargetError, Targets, VllmPod, missing_pair_roles, select
from ..pool import Cancel
from .engines import resolve_engine_counts
from .lmcachefile import with_config_file_disks


@dataclass(frozen=True)
class Scope:
    """Where a job acts.

    Attributes:
        kube: the connection.
        namespace: the namespace listed; None with ``-A`` (every namespace).
        universe: every vLLM server pod in that scope.
        pods: the targeted ones (a subset of ``universe``, same order).
        caller: reaches the pods' vLLM ports (proxy, exec or port-forward) and stops retrying
            once the run's :class:`~kubectl_kvreset.pool.Cancel` is set.
        notes: what the user should know about the selection (one role of a prefill/decode
            pair targeted without the other), as lines for stderr.
        skipped: vLLM containers of the targeted pods that ``--container`` left out (their
            rows say ``skipped``); ``container``: that name, or None.
        others: the targeted containers of inference engines this version cannot empty
            (:class:`~kubectl_kvreset.otherpods.OtherPod`: SGLang, Dynamo, ``trtllm-serve``, the
            LMCache server); ``other_universe``: every one in scope; ``skipped_others``: those
            ``--container`` left out (their rows say ``skipped``: still warm, and said so).
    """

    kube: Kube
    namespace: str | None
    universe: tuple[VllmPod, ...]
    pods: tuple[VllmPod, ...]
    caller: PodCaller
    notes: tuple[str, ...] = ()
    skipped: tuple[VllmPod, ...] = ()
    container: str | None = None
    others: tuple[OtherPod, ...] = ()
    other_universe: tuple[OtherPod, ...] = ()
    skipped_others: tuple[OtherPod, ...] = ()

    @staticmethod
    def ref(pod: VllmPod) -> PodRef:
        """The :class:`~kubectl_kvreset.podapi.PodRef` of a discovered pod."""
        return PodRef(pod.namespace, pod.name, pod.container)


def narrow_containers(scope: Scope, container: str | None) -> Scope:
    """Keep only the targeted vLLM containers named ``container`` (``--container``); the
    others become :attr:`Scope.skipped` (the pods of engines this version cannot empty keep only
    that container too). None keeps every container (each vLLM container of a
    pod is a target of its own).

    Raises:
        kubectl_kvreset.pods.TargetError: no targeted pod has a vLLM container of that name
            (the message lists the names there are).
    """
    if container is None:
        return scope
    kept = tuple(p for p in scope.pods if p.container == container)
    kept_others = tuple(o for o in scope.others if o.container == container)
    if scope.pods and not kept and not kept_others:
        names = ", ".join(sorted({p.container for p in scope.pods}))
        other_names = sorted({o.container for o in scope.others})
        raise TargetError(f"--container {container}: no targeted pod has a vLLM container of that name "
                          f"(vLLM containers: {names}"
                          + (f"; containers of engines this version cannot empty: {', '.join(other_names)}"
                             if other_names else "") + ")")
    return replace(scope, pods=kept, skipped=tuple(p for p in scope.pods if p.container != container),
                   container=container, others=kept_others,
                   skipped_others=tuple(o for o in scope.others if o.container != container))


def select_targets(kube: Kube, targets: Targets, *, all_namespaces: bool = False, transport: str = "auto",
                   cancel: Cancel | None = None, pair_note: bool = True) -> Scope:
    """Discover the vLLM pods of ``kube.namespace`` (every namespace with ``all_namespaces``)
    and select ``targets`` among them (:func:`kubectl_kvreset.pods.select`). A data-parallel
    size the serve flags take from a ConfigMap or Secret is read
    (:func:`kubectl_kvreset.job.engines.resolve_engine_counts`).

    ``transport``: ``auto``, ``proxy``, ``exec`` or ``port-forward``. ``pair_note``: add a note
    per prefill/decode pair whose other role is not targeted (commands that change something).

    Raises:
        kubectl_kvreset.pods.TargetError: a named owner has no vLLM pod.
        kubectl_kvreset.kube.KubeApiError, KubeConnectionError: the pod list failed.
    """
    scope = None if all_namespaces else kube.namespace
    # a data-parallel size taken from a ConfigMap or Secret is read where it can be, and the
    # LMCache disk an LMCACHE_CONFIG_FILE names (the store step clears it) is a tier of the pod
    found, others = discover_all(kube, scope, selector=targets.selector)
    universe = with_config_file_disks(kube, resolve_engine_counts(kube, found))
    # an owner that runs only engines this version cannot empty is targeted, not refused
    chosen_others, named = select_others(others, targets)
    vllm_owners = tuple(o for o in targets.owners if o not in named or _names_vllm(universe, o))
    pods = select(universe, replace(targets, owners=vllm_owners))
    if targets.selector and targets.owners:
        pods = [p for p in pods if p in universe]
    notes: list[str] = []
    if pair_note:
        pairs = missing_pair_roles(pods, universe if not targets.selector else discover(kube, scope))
        notes = [f"note: {mine.ref()} is one role of a prefill/decode pair; its other role, {other.ref()}, "
                 "is not targeted" for mine, other in pairs]
    stop = (cancel or Cancel()).is_set
    caller = PodCaller(kube, Transports(transport), stop=stop)
    return Scope(kube, scope, tuple(universe), tuple(pods), caller, tuple(notes),
                 others=tuple(chosen_others), other_universe=tuple(others))


def _names_vllm(universe: list[VllmPod], text: str) -> bool:
    """Whether the owner argument ``text`` names a vLLM pod of ``universe``."""
    try:
        select(universe, Targets(owners=(text,)))
    except TargetError:
        return False
    return True
