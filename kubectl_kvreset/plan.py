"""What vLLM's ``POST /reset_prefix_cache?reset_external=true`` empties, per tier.

Pure. The version/connector/spec rules are DATA (:data:`RESET_RULES`), walked by
:func:`api_reset_effects`; extend the table, not the function. Facts from vLLM's connectors'
``reset_cache`` (``vllm/distributed/kv_transfer/kv_connector/v1/base.py``, vLLM PR #27170;
``vllm/v1/kv_offload/cpu/manager.py``; ``TieringOffloadingManager.reset_cache``, vllm PR #44541)
and LMCache 0.5.6 ``lmcache/integration/vllm/lmcache_mp_connector.py``.

A version that does not parse (``dev``, a fork) is passed as None and gets the oldest behaviour:
only rules without a minimum version apply.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from kubectl_kvreset.engines.vllm.kvconfig import (
    LMCACHE_MP_CONNECTOR,
    LMCACHE_MP_UPSTREAM,
    MOONCAKE_STORE_CONNECTOR,
)
from kubectl_kvreset.tiers import KVLayout, Tier, TierKind

__all__ = [
    "DISRUPTIVE_STEPS",
    "EVIDENCE_KINDS",
    "Evidence",
    "FALLBACKS",
    "LeftTier",
    "PodSteps",
    "STEP_API_RESET",
    "STEP_CLEAR_FS",
    "STEP_DEVMODE",
    "STEP_RESTART",
    "Step",
    "plan_pod_steps",
    "REMEDY_CLEAR_FS",
    "REMEDY_RESTART",
    "RESET_EXTERNAL_MIN_VERSION",
    "RESET_RULES",
    "ResetRule",
    "STORE_WIDE_HOOKS",
    "StoreWideHook",
    "store_wide_hook",
    "TierEffect",
    "api_reset_effects",
]

REMEDY_CLEAR_FS = "clear-fs"

#: What lets the plugin empty an FS tier whose root it cannot evaluate.
UNEVALUATED_ROOT_REMEDY = ("write the root as a literal path in --kv-transfer-config (or give the variable it "
                           "uses a literal value in the container's env), then run clear again")
#: The same for LMCache's ``local_disk`` (set by ``LMCACHE_LOCAL_DISK``, its config file or
#: ``lmcache.local_disk`` in ``kv_connector_extra_config``).
UNEVALUATED_DISK_REMEDY = ("set LMCache's local_disk to a literal path (or give the variable it uses a literal "
                           "value in the container's env), then run clear again")
REMEDY_RESTART = "restart"

#: ``reset_external`` (the connector reset hook) exists from vLLM 0.13 (vllm PR #27170); older
#: servers ignore the query parameter and reset only the GPU prefix cache.
RESET_EXTERNAL_MIN_VERSION = Version("0.13.0")


#: :attr:`Evidence.kind` values: ``real`` (a peers test runs the rule on a real server),
#: ``source`` (read in the named file of the named release).
EVIDENCE_KINDS = ("real", "source")


@dataclass(frozen=True)
class Evidence:
    """What a reset rule stands on.

    Attributes:
        kind: ``"real"``: a test of the ``peers`` phase runs the rule on a real server and checks
            it on that server's own counters; ``"source"``: read in the sources, not run here.
        ref: for ``real``, the test as pytest names it (``tests/peers/test_x.py::test_name``);
            for ``source``, the release(s) and file(s) read (``vllm 0.22.0-0.33.0
            vllm/v1/kv_offload/cpu/manager.py``).
    """

    kind: str
    ref: str

    def text(self) -> str:
        """``real: REF`` or ``source: REF``, as the README's table shows it."""
        return f"{self.kind}: {self.ref}"


def _real(test: str) -> Evidence:
    return Evidence("real", test)


def _source(ref: str) -> Evidence:
    return Evidence("source", ref)


#: The peers tests that run a rule on a real server (what each proves is in its docstring).
_REAL_GPU_RESET = ("tests/peers/test_real_vllm_pod.py::"
                   "test_prefix_hit_then_clear_then_miss_from_the_real_counters")
#: The real vLLM 0.32.0 with LMCacheConnectorV1 in process: reset_external=true leaves LMCache's keys.
_REAL_LMCACHE_IN_PROCESS = ("tests/peers/test_real_lmcache_inprocess.py::"
                            "test_the_real_reset_leaves_in_process_lmcache_as_the_rule_says")
_REAL_MP_RESET = "tests/peers/test_real_mp_reset.py::test_the_real_connectors_reset_alone_empties_the_shared_l1"


@dataclass(frozen=True)
class ResetRule:
    """One row of the reset-effect table.

    A rule matches a tier when ``kind`` equals the tier's kind and ``connector``/``spec`` are
    None (any) or equal the tier's. Among matching rules whose ``min_version`` is None or
    <= the server's version, the most specific (connector and spec given) with the highest
    ``min_version`` decides.

    Attributes:
        kind: tier kind.
        connector: connector name, or None for any.
        spec: OffloadingConnector spec name, or None for any.
        min_version: first vLLM version the rule holds for; None = every version.
        emptied: whether the API reset (with ``reset_external=true``) empties the tier.
        remedy: the step that empties the tier when the API does not (``"restart"``,
            ``"clear-fs"``) or None when no pod-side step does (shared stores).
        source: the rule in words with its source (vLLM file / PR).
        connector_hook: the rule depends on the connector reset hook, so it needs
            ``reset_external=true`` and vLLM >= 0.13.
        evidence: what the rule stands on (:class:`Evidence`); every row of
            :data:`RESET_RULES` has one (a unit test checks it, and that a ``real`` one names
            an existing peers test).
    """

    kind: TierKind
    connector: str | None
    spec: str | None
    min_version: Version | None
    emptied: bool
    remedy: str | None
    source: str
    connector_hook: bool = True
    evidence: Evidence | None = None

    def matches(self, tier: Tier) -> bool:
        """Does this rule describe ``tier`` (ignoring the version)?"""
        return (self.kind == tier.kind
                and (self.connector is None or self.connector == tier.connector)
                and (self.spec is None or self.spec == tier.spec))

    def specificity(self) -> int:
        """2 for connector+spec, 1 for connector only, 0 for a kind-wide default."""
        return (self.connector is not None) + (self.spec is not None)


_V = Version

#: The table. Order does not matter; see :class:`ResetRule` for how one is picked. Each row's
#: :class:`Evidence` is listed in the README's "Reset rules and their evidence" table.
RESET_RULES: tuple[ResetRule, ...] = (
    # GPU prefix cache: the local reset (vllm/v1/core/block_pool.py::reset_prefix_cache).
    ResetRule(TierKind.GPU, None, None, None, True, REMEDY_RESTART,
              "the local prefix-cache reset drops every cached GPU block "
              "(vllm/v1/core/block_pool.py::reset_prefix_cache)", connector_hook=False,
              evidence=_real(_REAL_GPU_RESET)),
    # CPU tiers: kind-wide default.
    ResetRule(TierKind.CPU, None, None, None, False, REMEDY_RESTART,
              "this connector implements no reset_cache hook (KVConnectorBase_V1.reset_cache "
              "is a no-op); the CPU tier lives in the pod and a restart empties it",
              evidence=_source("vllm 0.13.0-0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/base.py")),
    # OffloadingConnector, CPU spec (default spec; also what --kv-offloading-size native makes).
    ResetRule(TierKind.CPU, "OffloadingConnector", "CPUOffloadingSpec", None, False,
              REMEDY_RESTART,
              "OffloadingConnector.reset_cache is a no-op before vLLM 0.22",
              evidence=_source("vllm 0.14.0-0.21.0 vllm/distributed/kv_transfer/kv_connector/v1/"
                               "offloading_connector.py")),
    ResetRule(TierKind.CPU, "OffloadingConnector", "CPUOffloadingSpec", _V("0.22.0"), True,
              REMEDY_RESTART,
              "OffloadingConnector with CPUOffloadingSpec resets its CPU tier from vLLM 0.22 "
              "(CPUOffloadingManager.reset_cache, vllm/v1/kv_offload/cpu/manager.py)",
              evidence=_source("vllm 0.22.0-0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/"
                               "offloading_connector.py, vllm/v1/kv_offload/cpu/manager.py")),
    # OffloadingConnector, TieringOffloadingSpec: the CPU primary tier.
    ResetRule(TierKind.CPU, "OffloadingConnector", "TieringOffloadingSpec", None, False,
              REMEDY_RESTART,
              "TieringOffloadingManager has no reset_cache before vLLM 0.24: not even its CPU "
              "tier is reset",
              evidence=_source("vllm 0.22.0, 0.23.0 vllm/v1/kv_offload/tiering/spec.py")),
    ResetRule(TierKind.CPU, "OffloadingConnector", "TieringOffloadingSpec", _V("0.24.0"), True,
              REMEDY_RESTART,
              "TieringOffloadingSpec resets its CPU tier from vLLM 0.24 (vllm PR #44541)",
              evidence=_source("vllm 0.24.0-0.33.0 vllm/v1/kv_offload/tiering/spec.py")),
    # SimpleCPUOffloadConnector.
    ResetRule(TierKind.CPU, "SimpleCPUOffloadConnector", None, None, False, REMEDY_RESTART,
              "SimpleCPUOffloadConnector has no reset_cache before vLLM 0.20",
              evidence=_source("vllm 0.18.0, 0.20.0 vllm/distributed/kv_transfer/kv_connector/v1/"
                               "simple_cpu_offload_connector.py (the hook is first in 0.20.0)")),
    ResetRule(TierKind.CPU, "SimpleCPUOffloadConnector", None, _V("0.20.0"), True,
              REMEDY_RESTART,
              "SimpleCPUOffloadConnector resets its CPU tier from vLLM 0.20 "
              "(scheduler_manager.reset(); vllm PR #39726)",
              evidence=_source("vllm 0.20.0-0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/"
                               "simple_cpu_offload_connector.py")),
    # LMCache (in-process): no hook in vLLM's wrapper.
    ResetRule(TierKind.CPU, "LMCacheConnectorV1", None, None, False, REMEDY_RESTART,
              "LMCache connectors do not implement reset_cache (LMCache PR #4993 closed "
              "unmerged); LMCache's local CPU tier lives in the vLLM process",
              evidence=_real(_REAL_LMCACHE_IN_PROCESS)),
    ResetRule(TierKind.CPU, "LMCacheConnectorV1Dynamic", None, None, False, REMEDY_RESTART,
              "LMCache connectors do not implement reset_cache; LMCache's local CPU tier lives "
              "in the vLLM process",
              evidence=_source("vllm 0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py; "
                               "lmcache 0.5.6 lmcache/integration/vllm/vllm_v1_adapter.py")),
    # FS tiers: never.
    ResetRule(TierKind.FS, None, None, None, False, REMEDY_CLEAR_FS,
              "vLLM never deletes FS-tier files; TieringOffloadingManager.reset_cache leaves "
              "secondary tiers by design (vllm PR #44541)", connector_hook=False,
              evidence=_source("vllm 0.22.0-0.33.0 vllm/v1/kv_offload/tiering/spec.py, "
                               "vllm/v1/kv_offload/tiering/fs/manager.py")),
    ResetRule(TierKind.FS, "OffloadingConnector", "SharedStorageOffloadingSpec", None, False,
              REMEDY_CLEAR_FS,
              "llm-d's legacy SharedStorageOffloadingSpec (llmd_fs_backend) never deletes its "
              "files ('not responsible for cleanup')", connector_hook=False,
              evidence=_source("llm-d/llm-d-kv-cache 7be76e1 llmd_fs_backend")),
    ResetRule(TierKind.FS, "LMCacheConnectorV1", None, None, False, REMEDY_CLEAR_FS,
              "LMCache's LocalDiskBackend has no clear() and vLLM's LMCache wrapper no "
              "reset_cache", connector_hook=False,
              evidence=_source("lmcache 0.5.6 lmcache/v1/storage_backend/local_disk_backend.py")),
    # Shared stores: outside the pods; a restart does not clear them.
    ResetRule(TierKind.SHARED, None, None, None, False, None,
              "a store outside the pods: the API reset does not reach it and a pod restart "
              "does not clear it", connector_hook=False,
              evidence=_source("vllm 0.13.0-0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/base.py")),
    ResetRule(TierKind.SHARED, "MooncakeStoreConnector", None, None, False, None,
              "MooncakeStoreConnector has no reset_cache before vLLM 0.23; the Mooncake store "
              "is outside the pods and a pod restart does not clear it",
              evidence=_source("vllm 0.22.0 vllm/distributed/kv_transfer/kv_connector/v1/mooncake/")),
    ResetRule(TierKind.SHARED, "MooncakeStoreConnector", None, _V("0.23.0"), True, None,
              "MooncakeStoreConnector's reset hook runs remove_all on the Mooncake master from "
              "vLLM 0.23 (vllm PR #42694): it empties the whole shared store, for EVERY "
              "instance using it",
              evidence=_source("vllm 0.23.0-0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/"
                               "connector.py, worker.py")),
    # LMCacheMPConnector: never counted as emptied here. LMCache's class (what vLLM 0.32.0 loads
    # unless LMCACHE_USE_UPSTREAM_MP is set) clears the MP server's L1 from lmcache 0.5.6, whose
    # version in the vLLM image is not known: the hazard is counted by STORE_WIDE_HOOKS, and the
    # store step (clear-store's MP server clear) empties and confirms the L1.
    ResetRule(TierKind.SHARED, "LMCacheMPConnector", None, None, False, None,
              "vLLM 0.32 loads LMCache's own LMCacheMPConnector (lmcache_mp_connector.py::"
              "_resolve_lmcache_mp_connector), whose reset_cache (lmcache >= 0.5.6) clears the MP "
              "server's L1 for every pod and model using it; whether this pod's lmcache has it is not "
              "known, so only the store step's count confirms the L1 emptied; a pod restart does not clear it",
              evidence=_real(_REAL_MP_RESET)),
    ResetRule(TierKind.SHARED, "LMCacheMPConnector", LMCACHE_MP_UPSTREAM, None, False, None,
              "LMCACHE_USE_UPSTREAM_MP makes vLLM load its own LMCacheMPConnectorUpstream, which "
              "implements no reset_cache; the LMCache MP server is outside the pods and a pod restart "
              "does not clear it",
              evidence=_source("vllm 0.32.0 vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py")),
)


@dataclass(frozen=True)
class StoreWideHook:
    """A connector whose reset hook (``reset_external=true``) empties a whole store that other
    pods and models may use: one row of :data:`STORE_WIDE_HOOKS`.

    Attributes:
        connector: the ``kv_connector`` name.
        store: the :attr:`~kubectl_kvreset.tiers.Tier.store` it empties (``"mooncake-master"``).
        min_version: the first vLLM release whose reset reaches the store.
        effect: what the hook does, for the rows (``"empties the whole Mooncake store"``).
        source: where that is written (vLLM / LMCache files, PRs).
        exempt_spec: a :attr:`~kubectl_kvreset.tiers.Tier.spec` under which the class loaded
            has no such hook, or None.
        evidence: what the row stands on (:class:`Evidence`), as for :class:`ResetRule`.
    """

    connector: str
    store: str
    min_version: Version
    effect: str
    source: str
    exempt_spec: str | None = None
    evidence: Evidence | None = None

    def reaches(self, tier: Tier, version: Version) -> bool:
        """Whether ``reset_external=true`` on a server of ``version`` empties ``tier``'s store."""
        return (tier.kind is TierKind.SHARED and tier.connector == self.connector and tier.store == self.store
                and version >= self.min_version and (self.exempt_spec is None or tier.spec != self.exempt_spec))


#: The newest release the reset rules know; an unknown build's connector reset is judged by it,
#: and then reported ``unconfirmed`` (never ``emptied``).
NEWEST_KNOWN = Version("0.33.0")


#: Connectors whose reset reaches a store others may use. Consent
#: (:mod:`kubectl_kvreset.job.resetconsent`) holds ``reset_external=true`` on a pod of any of them
#: unless every user of that store is targeted or ``--shared-stores`` is given.
STORE_WIDE_HOOKS: tuple[StoreWideHook, ...] = (
    StoreWideHook(MOONCAKE_STORE_CONNECTOR, "mooncake-master", _V("0.23.0"),
                  "vLLM's MooncakeStoreConnector empties the whole Mooncake store on reset_external=true "
                  "(remove_all, vLLM >= 0.23)",
                  "vllm PR #42694; 0.32.0 .../kv_connector/v1/mooncake/store/connector.py::"
                  "MooncakeStoreConnector.reset_cache -> worker.py::LookupKeyServer: store.remove_all(force=True)",
                  # the peers test of this hook runs the simulator's vLLM against a real master: the
                  # master's count is real, vLLM's side of the hook is not
                  evidence=_source("vllm 0.23.0-0.33.0 vllm/distributed/kv_transfer/kv_connector/v1/mooncake/store/"
                                   "connector.py, worker.py")),
    # The resolver is in vLLM 0.32.0 (the CPU wheel); older sources (vllm-project/vllm at 010c938)
    # have no resolver and no reset_cache in vLLM's copy, but kv_connector_module_path loads LMCache's
    # class on any release, and the first release with the resolver is not pinned: every release
    # with reset_external (0.13) counts, so consent errs on the side of the other users.
    StoreWideHook(LMCACHE_MP_CONNECTOR, "lmcache-mp", _V("0.13.0"),
                  "LMCache's LMCacheMPConnector (what vLLM 0.32 loads for LMCacheMPConnector unless "
                  "LMCACHE_USE_UPSTREAM_MP is set) clears the whole L1 of its LMCache MP server on "
                  "reset_external=true (reset_cache, lmcache >= 0.5.6)",
                  "vLLM 0.32.0 .../kv_connector/v1/lmcache_mp_connector.py::_resolve_lmcache_mp_connector; "
                  "lmcache 0.5.6 lmcache/integration/vllm/lmcache_mp_connector.py::LMCacheMPConnector.reset_cache "
                  "(LMCache PR #5091)",
                  exempt_spec=LMCACHE_MP_UPSTREAM, evidence=_real(_REAL_MP_RESET)),
)


def store_wide_hook(tier: Tier, version: Version) -> StoreWideHook | None:
    """The :data:`STORE_WIDE_HOOKS` row whose reset empties ``tier``'s store on ``version``, or None."""
    return next((h for h in STORE_WIDE_HOOKS if h.reaches(tier, version)), None)


@dataclass(frozen=True)
class TierEffect:
    """What the API reset does to one tier.

    Attributes:
        tier: the tier.
        emptied_by_api_reset: True when ``POST /reset_prefix_cache`` (with ``reset_external``
            as asked) empties it on this vLLM version.
        reason: why, with the rule's source.
        remedy: when not emptied, the step that would empty it (``"clear-fs"``, ``"restart"``)
            or None (shared stores: outside the pods); None when emptied.
    """

    tier: Tier
    emptied_by_api_reset: bool
    reason: str
    remedy: str | None


def _pick_rule(tier: Tier, version: Version | None,
               rules: tuple[ResetRule, ...]) -> ResetRule | None:
    """The rule that decides ``tier`` on ``version`` (see :class:`ResetRule`)."""
    best: ResetRule | None = None
    best_key: tuple[int, Version] | None = None
    floor = Version("0")
    for rule in rules:
        if not rule.matches(tier):
            continue
        if rule.min_version is not None and (version is None or version < rule.min_version):
            continue
        key = (rule.specificity(), rule.min_version or floor)
        if best_key is None or key > best_key:
            best, best_key = rule, key
    return best


def api_reset_effects(
    layout: KVLayout,
    version: Version | None,
    *,
    reset_external: bool = True,
    rules: tuple[ResetRule, ...] = RESET_RULES,
) -> tuple[TierEffect, ...]:
    """For each tier of ``layout``, whether the API reset empties it on ``version``.

    Args:
        layout: the server's tiers (:func:`kubectl_kvreset.engines.vllm.kvconfig.layout_from_serve`).
        version: the server's vLLM version; None (unknown, ``dev``, a fork) = oldest behaviour.
        reset_external: whether the reset is sent with ``reset_external=true``.
        rules: the rule table (default :data:`RESET_RULES`).

    Returns:
        One :class:`TierEffect` per tier, in the layout's order.
    """
    effects: list[TierEffect] = []
    hook_available = version is not None and version >= RESET_EXTERNAL_MIN_VERSION
    for tier in layout.tiers:
        rule = _pick_rule(tier, version, rules)
        if rule is None:  # pragma: no cover - every kind has a default rule
            effects.append(TierEffect(tier, False, "no rule for this tier", REMEDY_RESTART))
            continue
        emptied, reason = rule.emptied, rule.source
        if rule.connector_hook and not reset_external:
            emptied = False
            reason = ("reset sent without reset_external=true: connector-managed tiers are "
                      "left as they are; " + rule.source)
        elif rule.connector_hook and not hook_available:
            emptied = False
            reason = ("vLLM before 0.13 (an unknown version counts as the oldest) ignores "
                      "reset_external (vllm PR #27170): no connector tier is reset; "
                      + rule.source)
        remedy = None if emptied else rule.remedy
        effects.append(TierEffect(tier=tier, emptied_by_api_reset=emptied, reason=reason,
                                  remedy=remedy))
    return tuple(effects)


# --------------------------------------------------------------------------------------------
# Steps: what `clear` does on one pod to empty every tier it can.

STEP_API_RESET = "api-reset"
STEP_CLEAR_FS = "clear-fs"
STEP_RESTART = "restart"
STEP_DEVMODE = "devmode"

#: Steps that replace pods (the user must allow them: ``--fallback`` or the prompt).
DISRUPTIVE_STEPS = frozenset({STEP_RESTART, STEP_DEVMODE})

#: The ``--fallback`` values.
FALLBACKS = ("restart", "devmode", "none")


@dataclass(frozen=True)
class Step:
    """One action of a pod's plan.

    Attributes:
        action: ``api-reset``, ``clear-fs``, ``restart`` (the owner, as ``kubectl rollout
            restart``) or ``devmode`` (set ``VLLM_SERVER_DEV_MODE=1`` on the owner: a rollout).
        empties: the tiers this step empties.
        disruptive: True when the step replaces pods.
    """

    action: str
    empties: tuple[Tier, ...]

    @property
    def disruptive(self) -> bool:
        """True for ``restart`` and ``devmode``."""
        return self.action in DISRUPTIVE_STEPS


@dataclass(frozen=True)
class LeftTier:
    """A tier the plan does not empty: ``reason`` says why, ``flag`` the option that would
    empty it (``--fallback=restart``), or None when no step of this tool can (shared stores)."""

    tier: Tier
    reason: str
    flag: str | None


@dataclass(frozen=True)
class PodSteps:
    """A pod's plan: ``steps`` in order, the tiers ``left``, and ``needs`` (the disruptive
    step that would empty what is left, if the user allowed it)."""

    steps: tuple[Step, ...]
    left: tuple[LeftTier, ...]
    needs: str | None = None

    def actions(self) -> tuple[str, ...]:
        """The step names in order."""
        return tuple(s.action for s in self.steps)


def plan_pod_steps(effects: tuple[TierEffect, ...], *, dev_mode_on: bool | None, fallback: str) -> PodSteps:
    """Choose the steps that empty every tier of one pod.

    Rules (vLLM facts from the connectors' ``reset_cache`` hooks, as in :data:`RESET_RULES`;
    tiers a restart empties: the GPU prefix cache and the CPU offload tier live in the vLLM
    process and its ``/dev/shm`` mapping, so a new pod starts without them; FS tiers and shared
    stores outlive the pod):

    - dev mode on: the API reset empties what ``effects`` says.
    - an FS tier is never emptied by vLLM: ``clear-fs`` deletes its files (before any restart);
      one whose root cannot be evaluated (:attr:`~kubectl_kvreset.tiers.Tier.unevaluated`) is
      left, with the reason.
    - a tier only a restart empties (``remedy == "restart"``), or every pod tier when dev mode
      is off (the reset route is a 404): the disruptive fallback. ``fallback="restart"``
      restarts the owner; ``"devmode"`` turns dev mode on (which rolls the pods, so they start
      cold), and cannot help a tier the API never empties on this version (it stays left, with
      the flag ``--fallback=restart``); ``"none"`` leaves them, naming the flag.
    - when a restart or devmode rollout is planned, the API reset is dropped (the new pods
      start cold).
    - shared stores the API reset does not empty are left with no flag (outside the pods; a
      restart does not clear them).

    ``dev_mode_on`` None (unknown, e.g. set through ``valueFrom``) is planned as on: the reset
    answer decides at run time.

    Raises:
        ValueError: an unknown ``fallback``.
    """
    if fallback not in FALLBACKS:
        raise ValueError(f"unknown fallback {fallback!r}: use one of {', '.join(FALLBACKS)}")
    dev_off = dev_mode_on is False
    fs = [e for e in effects if e.tier.kind is TierKind.FS]
    pod_local = [e for e in effects if e.tier.kind in (TierKind.GPU, TierKind.CPU)]
    shared = [e for e in effects if e.tier.kind is TierKind.SHARED]
    needs_restart = [e for e in pod_local if dev_off or not e.emptied_by_api_reset]
    left: list[LeftTier] = []
    steps: list[Step] = []
    needs: str | None = None
    # an FS root that holds a construct not evaluated (``$(hostname)`` in a script) names no
    # directory the plugin knows: left, never deleted at a guessed path
    for e in fs:
        if e.tier.unevaluated:
            left.append(LeftTier(e.tier, f"its root {e.tier.root_dir!r} cannot be evaluated from the pod spec: "
                                 f"{e.tier.unevaluated}; nothing is deleted",
                                 UNEVALUATED_DISK_REMEDY if e.tier.tier_type == "lmcache_local_disk"
                                 else UNEVALUATED_ROOT_REMEDY))
    fs = [e for e in fs if not e.tier.unevaluated]
    if fs:
        steps.append(Step(STEP_CLEAR_FS, tuple(e.tier for e in fs)))
    disruptive: str | None = None
    if needs_restart:
        if fallback == "restart":
            disruptive = STEP_RESTART
        elif fallback == "devmode" and dev_off:
            disruptive = STEP_DEVMODE
        else:
            needs = STEP_DEVMODE if dev_off and all(e.emptied_by_api_reset for e in pod_local) else STEP_RESTART
    if disruptive is not None:
        steps.append(Step(disruptive, tuple(e.tier for e in pod_local)))
    else:
        if not dev_off:
            steps.insert(0, Step(STEP_API_RESET, tuple(e.tier for e in pod_local if e.emptied_by_api_reset)))
        for e in needs_restart:
            if dev_off:
                reason = ("dev mode is off in the pod spec (VLLM_SERVER_DEV_MODE is 0 or not an integer): "
                          "vLLM serves no reset route")
                flag = "--fallback=devmode or --fallback=restart"
            else:
                reason = e.reason
                flag = "--fallback=restart"
            left.append(LeftTier(e.tier, reason, flag))
    for e in shared:
        if dev_off or disruptive is not None or not e.emptied_by_api_reset:
            why = e.reason if not e.emptied_by_api_reset else "only the API reset empties it, and it is not run"
            if "restart does not clear it" not in why:
                why += "; outside the pods, a restart does not clear it"
            left.append(LeftTier(e.tier, why, None))
        elif steps and steps[0].action == STEP_API_RESET:
            steps[0] = Step(STEP_API_RESET, steps[0].empties + (e.tier,))
    return PodSteps(tuple(steps), tuple(left), needs)
