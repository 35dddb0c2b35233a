"""What one FS-tier deletion is (:class:`FsVolumeTarget`, :class:`ExecChoice`) and the messages
its row carries (held models, unknown models, unevaluated roots)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..consent import SHARED_FLAG, User

if TYPE_CHECKING:
    from ..pods import VllmPod


@dataclass(frozen=True)
class ExecChoice:
    """Where the deletion can run: ``pod``, ``container`` and the ``root`` as that container sees it."""

    pod: str
    container: str
    root: str


@dataclass(frozen=True)
class FsVolumeTarget:
    """One FS-tier directory to empty, on one backing volume (or one refused root).

    Attributes:
        key: unique key: volume identity and the directory inside it (or the refused root).
        namespace: the pods' namespace.
        volume: the volume label (``pvc/NAME``, ``emptyDir NAME@pod``, ``hostPath /x@node``),
            None when the root maps to no volume.
        root: the root as the exec container sees it (normalised), or as written when refused.
        volume_path: the root inside the volume (``/`` + subPath + rest), None when refused.
        exec_pod, container: where the deletion runs (the first of ``choices``), None when refused.
        choices: every targeted pod that could run it, ready pods first.
        pods: targeted pods whose tier this directory is.
        other_pods: pods outside the targets that mount the same storage over this directory.
        models: with ``model_only``: the models (as ``vllm serve`` names them) whose directories
            are deleted (those whose ``config.json`` records the model).
        model_only: only ``<model>_<hash12>`` and ``..._r<N>`` children are deleted (asked with
            ``--model-only``, or because ``other_pods`` mount the volume and ``whole_tier`` was
            not given).
        refusal: why nothing will be deleted, or None.
        notes: other remarks for the row.
        whole_tier: every entry is deleted although ``other_pods`` mount the volume
            (``--whole-tier``).
        unevaluated: why the root as read is not the directory the server uses (a construct of
            the command line not evaluated, :attr:`kubectl_kvreset.tiers.Tier.unevaluated`):
            nothing is deleted and the tier is reported ``left``; None otherwise.
        model_unknown: with ``model_only``: why the name vLLM gives a target's model directories
            is not known (:attr:`kubectl_kvreset.engines.vllm.servecmd.ServeConfig.model_unknown`): nothing is
            deleted and the tier is reported ``left``; None otherwise.
        unknown_models: with ``model_only``: the targeted pods (``name: why``) whose model is
            not known, so a per-model deletion cannot select their directories. With no model
            known at all the target is refused (:func:`unknown_model_message`); otherwise the
            known models' directories are deleted and the result is ``left``, not ``emptied``.
        held: why the directories of some targeted models are not deleted: pods outside the
            targets serve them on this volume (or may: a model that cannot be read, namespaces
            that cannot be listed), and neither ``--shared-stores`` nor ``--whole-tier`` was
            given (:func:`kubectl_kvreset.consent.hold`); None otherwise. Those models are not
            in ``models``; with none left nothing runs and the tier is ``left``.
        held_models: the models held back.
        sharers: ``other_pods`` with what each serves there (``ns/pod (model M)``).
        kept_pods: the sharers whose directories a per-model deletion keeps (another model, or
            no vLLM).
    """

    key: str
    namespace: str
    volume: str | None
    root: str | None
    volume_path: str | None
    exec_pod: str | None
    container: str | None
    choices: tuple[ExecChoice, ...] = ()
    pods: tuple[str, ...] = ()
    other_pods: tuple[str, ...] = ()
    models: tuple[str, ...] = ()
    model_only: bool = False
    refusal: str | None = None
    notes: tuple[str, ...] = ()
    whole_tier: bool = False
    unevaluated: str | None = None
    model_unknown: str | None = None
    unknown_models: tuple[str, ...] = ()
    held: str | None = None
    held_models: tuple[str, ...] = ()
    sharers: tuple[str, ...] = ()
    kept_pods: tuple[str, ...] = ()


def held_message(model: str, why: str, users: Sequence[User]) -> str:
    """Why ``model``'s directories are not deleted: pods outside the targets serve it on the
    volume (``why`` ``same``), or may (``unlisted``), and the flags that delete them anyway."""
    if why == "same":
        who = (f"{len(users)} pod(s) outside the targets serve {model} on this volume "
               f"({', '.join(u.shown() for u in users)}) and use its directories")
    else:
        who = f"{', '.join(u.name for u in users)} may serve {model} on this volume"
    return (f"{who}: {model}'s directories are kept; give {SHARED_FLAG} to delete them anyway "
            "(or --whole-tier to delete every entry of the root)")


def model_unknown_message(target: FsVolumeTarget) -> str:
    """The row message of a per-model deletion whose model name is not known: why, and that
    nothing was deleted (the directories vLLM names after it cannot be told from others')."""
    return (f"only the targets' models' directories under {target.root} may be deleted here, "
            f"and {target.model_unknown}: "
            "nothing was deleted (to let the plugin read it, write the model name literally, or enable dev mode so "
            "clear reads it from the running server's /server_info)")


#: What lets the plugin read a root it cannot evaluate (:attr:`FsVolumeTarget.unevaluated`).
UNEVALUATED_REMEDY = ("to let the plugin read it, write the root as a literal path in --kv-transfer-config, "
                      "or give the variable it uses a literal value in the container's env")


def unevaluated_message(root: str | None, reason: str) -> str:
    """The row message of a root that cannot be evaluated: why, that nothing was deleted or
    looked at, and what would let the plugin read it."""
    return (f"the FS tier root {root!r} cannot be evaluated from the pod spec: {reason}; nothing was deleted "
            f"and the directory the server writes was not looked at ({UNEVALUATED_REMEDY})")


def unknown_model_reason(pod: VllmPod) -> str:
    """Why the plugin does not know the model a pod serves: its ``--config`` file could not be
    read, or the command names none (vLLM's default model is not guessed)."""
    if pod.serve.model_unknown:
        return pod.serve.model_unknown
    if pod.serve.config_error:
        return f"its --config file could not be read ({pod.serve.config_error})"
    return "the command names none (no 'vllm serve MODEL', no --model)"


def unknown_model_message(unknown: Sequence[str], root: str, sharing: Sequence[str], asked: bool, *,
                          partial: bool = False) -> str:
    """Why a per-model deletion leaves the directories of pods whose model is not known
    (``unknown``: ``pod: why``), and what would delete them: ``--whole-tier`` (every entry of
    ``root``, the ``sharing`` pods' files too) where pods outside the targets mount the volume,
    dropping ``--model-only`` (``asked``) where none does, or making the model known."""
    what = ("their directories are not deleted (the other models' are)" if partial
            else f"nothing is deleted under {root}")
    if sharing:
        flag = ("drop --model-only and give --whole-tier" if asked else "give --whole-tier")
        remedy = (f"{flag} to delete every entry of the root, the files of the pods outside the targets "
                  f"({', '.join(sharing)}) included")
    else:
        remedy = "without --model-only the root is emptied whole (no pod outside the targets mounts it)"
    return (f"the model this pod serves is not known: {'; '.join(unknown)}: a per-model deletion cannot select "
            f"its directories, so {what}; {remedy}; or make the model known (name it with 'vllm serve MODEL' "
            "or --model in the container's command, or let the plugin read the --config file)")


def missing_root_message(root: str, pod: str) -> str:
    """The message of a root that does not exist in the exec pod: not read as empty, since
    vLLM's FS tier writes ``<root>/<model>_<hash12>/config.json`` when it starts
    (``vllm/v1/kv_offload/file_mapper.py``), so the server may write somewhere else."""
    return (f"{root} does not exist in {pod}: nothing deleted, and not confirmed empty (vLLM creates the root "
            "when its FS tier starts, so the server may write to another directory than the spec names, "
            "e.g. a variable the spec does not hold, or has not started yet)")
