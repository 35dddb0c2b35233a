"""Restart owners and wait for their rollouts; set or remove ``VLLM_SERVER_DEV_MODE``.

The package's modules, by concern: :mod:`.status` (where a rollout stands, pure),
:mod:`.patches` (the restart patch bodies, pure), :mod:`.phases` (prefill, decode, the rest;
pure), :mod:`.owners` (the two kinds over the API: read, list pods, patch), :mod:`.wait` (the
wait for successors), :mod:`.restart`, :mod:`.devmode_read` (dev mode as the API holds it) and
:mod:`.devmode_set` (the dev-mode patch). The pure ones are unit-tested on plain dicts; the
rest talks to the API server through :class:`~kubectl_kvreset.kube.Kube` (``get_object``,
``list_items``, ``send_json``).

Rules and where they come from:

* **Deployment restart** as ``kubectl rollout restart`` (``k8s.io/kubectl``
  ``pkg/polymorphichelpers/objectrestarter.go``): refused when ``spec.paused``; sets the pod
  template annotation ``kubectl.kubernetes.io/restartedAt`` to the local time in RFC 3339 with
  seconds, as a strategic-merge patch.
* **Deployment completion** as ``kubectl rollout status`` (``pkg/polymorphichelpers/
  rollout_status.go`` ``DeploymentStatusViewer``): observed generation caught up, no
  ``ProgressDeadlineExceeded``, every replica updated, no old replica left, every updated
  replica available. The generation compared is the one the patch answer carried.
* **LeaderWorkerSet** (``leaderworkerset.x-k8s.io/v1``, ``sigs.k8s.io/lws``): the custom
  resource refuses strategic-merge patches (415), so a restart is a JSON merge patch of the
  annotation into ``workerTemplate`` and, when present, ``leaderTemplate`` (a merge patch that
  named an absent ``leaderTemplate`` would create one without a spec). Its status has no
  ``kubectl rollout status`` rule; this package's rule: ``status.observedGeneration`` (when the
  LWS version writes it) caught up, condition ``UpdateInProgress`` not True,
  ``updatedReplicas`` and ``readyReplicas`` at ``spec.replicas``, and, because older LWS
  versions write neither ``observedGeneration`` nor a prompt ``updatedReplicas``, every pod of
  the set (label ``leaderworkerset.sigs.k8s.io/name``) ready, ``replicas x size`` of them, and
  none of the pods that existed before the patch left.
* **Order**: prefill owners first; decode owners only once every prefill owner of their
  namespace is ready again, because a prefill restart can leave decode engines with stale
  NIXL agent state (vLLM #49238; llm-d #2187 documents the segfault); the rest last.
* **EPP**: an llm-d scheduler's prefix index may keep routing by a restarted engine's blocks
  when KV event replay is off, the default (llm-d-router #2853): said, not fixed.
* A PATCH that timed out or got a 5xx is never re-sent blindly: the object is read again and
  the patch rebuilt from what it holds; nothing is sent when it already holds the change.
* A dev-mode patch carries the resourceVersion it was built from, so two runs at once cannot
  both add the variable: the second gets 409 ``Conflict``, reads the owner again, finds the
  change made and reports ``unchanged`` (it sends nothing and waits for that rollout).
"""

from __future__ import annotations

from .devmode_read import DevModeResult, dev_mode_changes, owner_readings, pod_dev_modes, read_dev_mode, source_lookup
from .devmode_set import set_dev_mode
from .owners import (
    CONFLICT_RETRIES,
    FIELD_MANAGER,
    LWS_GROUP_VERSION,
    LWS_NAME_LABEL,
    PatchBuilder,
    refusal_text,
)
from .patches import RESTARTED_AT, deployment_restart_patch, lws_restart_patch, restart_timestamp
from .phases import NOT_STARTED, Triple, role_phases, run_phased
from .restart import RestartResult, detect_schedulers, restart_owner, restart_owners, scheduler_note
from .status import RolloutState, deployment_rollout_state, lws_rollout_state, pod_problems
from .wait import DEFAULT_TIMEOUT_S, POLL_S, Progress, wait_rollout

__all__ = [
    "CONFLICT_RETRIES",
    "DEFAULT_TIMEOUT_S",
    "DevModeResult",
    "FIELD_MANAGER",
    "LWS_GROUP_VERSION",
    "LWS_NAME_LABEL",
    "NOT_STARTED",
    "POLL_S",
    "PatchBuilder",
    "Progress",
    "RESTARTED_AT",
    "RestartResult",
    "RolloutState",
    "Triple",
    "deployment_restart_patch",
    "deployment_rollout_state",
    "detect_schedulers",
    "dev_mode_changes",
    "lws_restart_patch",
    "lws_rollout_state",
    "owner_readings",
    "pod_dev_modes",
    "pod_problems",
    "read_dev_mode",
    "refusal_text",
    "restart_owner",
    "restart_owners",
    "restart_timestamp",
    "role_phases",
    "run_phased",
    "scheduler_note",
    "set_dev_mode",
    "source_lookup",
    "wait_rollout",
]
