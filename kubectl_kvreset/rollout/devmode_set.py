"""``devmode --enable/--disable``: one JSON patch that sets ``VLLM_SERVER_DEV_MODE="1"`` in, or
removes it from, every template of an owner, then its rollout waited for. The patch carries
the resourceVersion it was built from, so two runs at once cannot both add the variable (the
rule is in :mod:`kubectl_kvreset.rollout`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..devmode import (
    DEV_MODE_ENV,
    DevModeReading,
    Manager,
    blocking,
    describe_replacements,
    dev_mode_patch,
    managing_controllers,
)
from ..kube import Kube, KubeError
from ..pods import Owner
from .devmode_read import DevModeResult, owner_readings
from .owners import Refused, get_owner, object_generation, paused_refusal, pod_uids, refusal_text, send_patch
from .phases import NOT_STARTED
from .status import RolloutState
from .wait import wait_rollout

__all__ = ["set_dev_mode"]


def set_dev_mode(kube: Kube, namespace: str, owner: Owner, *, enable: bool, ignore_owner: bool = False,
                 timeout_s: float, progress: Callable[[str], None] | None = None,
                 role: str | None = None, stop: Callable[[], bool] = lambda: False) -> DevModeResult:
    """Set ``VLLM_SERVER_DEV_MODE="1"`` (``enable``) or remove it in the vLLM container of every
    template of a Deployment or LeaderWorkerSet with one JSON patch
    (:func:`kubectl_kvreset.devmode.dev_mode_patch`), then wait for the rollout.

    Nothing is sent when the templates already hold what is asked (``unchanged``). Refused: a
    kind other than the two, a paused Deployment, and, unless ``ignore_owner``, an owner that a
    controller or GitOps tool would revert (:func:`kubectl_kvreset.devmode.managing_controllers`).
    The message says that the restart emptied the caches, that dev endpoints are
    unauthenticated, and how to turn dev mode off. Once ``stop()`` is True (a cancelled run) no
    patch is sent and a wait under way ends (``interrupted``). Never raises for API failures.
    """
    action = "enable" if enable else "disable"
    start = time.monotonic()
    managers: tuple[Manager, ...] = ()
    try:
        obj = get_owner(kube, namespace, owner)
        managers = tuple(managing_controllers(obj))
        reverting = blocking(managers)
        if reverting and not ignore_owner:
            raise Refused(f"managed by {', '.join(m.describe() for m in reverting)}, which would revert the patch: "
                          "change the variable in that controller's source, or pass --ignore-owner to patch anyway")
        try:
            if not dev_mode_patch(obj, enable=enable):
                return DevModeResult(namespace, owner, role, action, "unchanged", owner_readings(kube, namespace, obj),
                                     managers, f"{DEV_MODE_ENV} is already {'set to 1' if enable else 'absent'}: "
                                     "nothing sent, no restart", time.monotonic() - start)
        except ValueError as exc:
            return DevModeResult(namespace, owner, role, action, "failed", (), managers, str(exc))
        paused = paused_refusal(obj, owner)
        if paused:
            raise Refused(paused.replace("can't restart", "won't patch"))
        replaced = describe_replacements(obj, owner_readings(kube, namespace, obj), enable=enable)
        old = pod_uids(kube, namespace, obj)

        def build(cur: Mapping[str, Any]) -> tuple[Any, str] | None:
            ops = dev_mode_patch(cur, enable=enable)
            return (ops, "application/json-patch+json") if ops else None

        if stop():
            return DevModeResult(namespace, owner, role, action, "interrupted", (), managers,
                                 NOT_STARTED.replace("restarted", "patched"), time.monotonic() - start)
        patched, applied = send_patch(kube, namespace, owner, obj, build)
        after = patched or obj
        if progress is not None:
            progress(f"{owner.ref()}: {DEV_MODE_ENV} {'set to 1' if enable else 'removed'}"
                     f"{'' if applied else ' meanwhile by another writer'}; waiting for the rollout")
        state = wait_rollout(kube, namespace, owner, generation=object_generation(after), old_uids=old,
                             timeout_s=timeout_s, progress=progress, stop=stop)
        readings = owner_readings(kube, namespace, after)
    except Refused as exc:
        return DevModeResult(namespace, owner, role, action, "refused", (), managers, str(exc),
                             time.monotonic() - start)
    except KubeError as exc:
        return DevModeResult(namespace, owner, role, action, "failed", (), managers, refusal_text(exc),
                             time.monotonic() - start)
    return _after_rollout(namespace, owner, role, enable=enable, state=state, readings=readings, managers=managers,
                          replaced=replaced, applied=applied, seconds=time.monotonic() - start)


def _after_rollout(namespace: str, owner: Owner, role: str | None, *, enable: bool, state: RolloutState,
                   readings: tuple[DevModeReading, ...], managers: tuple[Manager, ...], replaced: Sequence[str],
                   applied: bool, seconds: float) -> DevModeResult:
    """The result of a patch sent (or found made by another writer) once its rollout wait ended."""
    action = "enable" if enable else "disable"
    if state.interrupted:
        return DevModeResult(namespace, owner, role, action, "interrupted", readings, managers,
                             f"{DEV_MODE_ENV} {'set to 1' if enable else 'removed'}, so its pods are being replaced, "
                             f"but the rollout was {state.message}; check kubectl rollout status {owner.ref()} "
                             f"-n {namespace}", seconds, requested=True)
    if not state.done:
        return DevModeResult(namespace, owner, role, action, "timeout" if state.timed_out else "failed", readings,
                             managers, state.message, seconds)
    if enable:
        message = (f"{DEV_MODE_ENV}=1 set and rolled out: the pods were replaced, so their KV caches are empty. "
                   "The dev endpoints (/reset_prefix_cache, /sleep, /collective_rpc ...) answer anyone who reaches "
                   "the pod's port, without authentication. Turn dev mode off with: kubectl kvreset devmode "
                   f"--disable {owner.ref()} -n {namespace}")
    else:
        message = (f"{DEV_MODE_ENV} removed and rolled out: the pods were replaced, so their KV caches are empty")
        still = [r for r in readings if r.enabled]
        if still:
            message += f"; still on through {', '.join(sorted({str(r.source) for r in still}))}: edit that source"
    if not applied:
        # another writer's patch came first (a 409 and a re-read showed the change made): this
        # run sent nothing and waited for that rollout
        return DevModeResult(namespace, owner, role, action, "unchanged", readings, managers,
                             f"{DEV_MODE_ENV} was {'set to 1' if enable else 'removed'} meanwhile by another writer "
                             "(its patch came first): nothing sent by this run; waited for its rollout", seconds)
    if replaced:
        message = "; ".join(replaced) + ". " + message
    return DevModeResult(namespace, owner, role, action, "enabled" if enable else "disabled", readings, managers,
                         message, seconds)
