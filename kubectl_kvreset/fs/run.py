"""Running one FS-tier deletion through ``pods/exec`` (:func:`run_fs_clear`) and reading its
answer (:class:`FsClearResult`, :func:`sharing_message`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .script import find_argv, python_argv
from .target import ExecChoice, FsVolumeTarget, missing_root_message, model_unknown_message, unevaluated_message
from .volumes import is_model_dir

if TYPE_CHECKING:
    from ..kube import ExecResult, Kube


@dataclass(frozen=True)
class FsClearResult:
    """What happened to one :class:`FsVolumeTarget`.

    Attributes:
        target: the plan.
        result: ``emptied`` (nothing selected is left), ``refused`` (the plan or the program in
            the pod refused the root), ``left`` (model-only: directories named like the model's
            could not be identified, so were not deleted; ``--whole-tier`` deletes them), ``failed``
            (exec failed, timed out, or entries are left),
            ``unconfirmed`` (the exec stream ended without an exit status, :data:`NO_EXIT_STATUS`,
            after the deletion reported nothing left; or the root does not exist in the pod,
            :func:`missing_root_message`), ``left`` (the root cannot be evaluated from the pod
            spec, :attr:`FsVolumeTarget.unevaluated`: nothing ran).
        files_before, bytes_before, files_after, bytes_after: counts in the deletion's scope
            (every child of the root, or the model's directories with ``model_only``); bytes are
            the sizes of regular files; None when unknown.
        message: what the user should know, or None.
        exec_pod, container: where it ran (None when it did not).
        method: ``python3`` or ``find``; None when nothing ran.
        other_files: with ``model_only``: files left in the root outside the scope.
        unidentified: with ``model_only``: directories named like a target model's that were left
            because their record does not say whose they are (``name: why``); the result is
            then ``left``.
        skipped_mounts: file systems mounted below the root, not entered.
        timed_out: the exec bound ended the wait (reported as not emptied).
    """

    target: FsVolumeTarget
    result: str
    files_before: int | None = None
    bytes_before: int | None = None
    files_after: int | None = None
    bytes_after: int | None = None
    message: str | None = None
    exec_pod: str | None = None
    container: str | None = None
    method: str | None = None
    other_files: int | None = None
    skipped_mounts: tuple[str, ...] = ()
    timed_out: bool = False
    unidentified: tuple[str, ...] = ()


def _missing_executable(res: ExecResult) -> bool:
    """True when exec could not start the program because the image lacks it (containerd/runc
    say ``executable file not found in $PATH``; a shell-less runtime may exit 127)."""
    text = ((res.message or "") + " " + res.stderr.decode("utf-8", "replace")).lower()
    if "executable file not found" in text or (
            "no such file or directory" in text and res.exit_code in (None, 126, 127)):
        return True
    return res.exit_code == 127 and not res.stdout.strip()


def _last_json(data: bytes) -> dict[str, Any] | None:
    """The last line of ``data`` that is a JSON object."""
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                return doc
    return None


#: The reason given when an exec stream ends without the command's exit status (the runtime
#: cut the stream, or sent no ``Status`` on channel 3): what the command did is then not known.
NO_EXIT_STATUS = "the exec stream ended without an exit status"


def _exec_failure(res: ExecResult, timeout_s: float) -> str:
    """A one-line reason for an exec that did not give a usable answer."""
    if res.timed_out:
        return (f"the deletion did not finish within {timeout_s:g} s: not emptied (it may have "
                "deleted part; run again, or raise --timeout)")
    err = res.stderr.decode("utf-8", "replace").strip().splitlines()
    detail = err[-1] if err else (res.message or "no output")
    if res.exit_code is None:
        return f"{NO_EXIT_STATUS}: {detail[:300]}"
    return f"exec exited {res.exit_code}: {detail[:300]}"


def _counts(doc: Mapping[str, Any], key: str) -> tuple[int | None, int | None]:
    part = doc.get(key)
    if not isinstance(part, Mapping):
        return None, None
    files, size = part.get("files"), part.get("bytes")
    return (int(files) if isinstance(files, int) else None, int(size) if isinstance(size, int) else None)


def _run_python(kube: Kube, target: FsVolumeTarget, choice: ExecChoice, timeout_s: float) -> FsClearResult | None:
    """Run :data:`CLEAR_SCRIPT`; None when the image has no python3."""
    res = kube.exec_command(target.namespace, choice.pod, choice.container,
                            python_argv(choice.root, target.models, model_only=target.model_only),
                            timeout_s=timeout_s)
    base = _blank_result(target, choice, "python3")
    if res.timed_out:
        return replace(base, result="failed", message=_exec_failure(res, timeout_s), timed_out=True)
    doc = _last_json(res.stdout)
    if doc is None:
        if _missing_executable(res):
            return None
        return replace(base, result="failed", message=_exec_failure(res, timeout_s))
    fb, bb = _counts(doc, "before")
    fa, ba = _counts(doc, "after")
    others, _ = _counts(doc, "others")
    skipped = tuple(str(s) for s in doc.get("skipped_mounts") or [])
    errors = [str(e) for e in doc.get("errors") or []]
    unidentified = tuple(str(u) for u in doc.get("unidentified") or [])
    result = replace(base, files_before=fb, bytes_before=bb, files_after=fa, bytes_after=ba,
                     other_files=others, skipped_mounts=skipped, unidentified=unidentified)
    if doc.get("refused"):
        return replace(result, result="refused", message=f"refused in the pod: {doc['refused']}")
    messages: list[str] = []
    if unidentified:
        messages.append(unidentified_message(target, unidentified, None))
    if doc.get("missing"):
        if res.exit_code != 0:
            return replace(result, result="failed", message=_exec_failure(res, timeout_s))
        return replace(result, result="unconfirmed", message=missing_root_message(choice.root, choice.pod))
    if skipped:
        messages.append("other file systems mounted below the root were not entered: " + ", ".join(skipped[:5]))
    if errors:
        messages.append(f"{len(errors)} entries could not be deleted, e.g. {errors[0]}")
    if fa == 0 and not errors and res.exit_code is None:
        # the program's report says nothing is left, but the stream lost its end: not confirmed
        messages.insert(0, f"{NO_EXIT_STATUS} after the deletion reported 0 files left: not confirmed "
                           "(run clear-fs again to confirm)")
        return replace(result, result="unconfirmed", message="; ".join(messages))
    emptied = fa == 0 and not errors and res.exit_code in (0, 1)
    if emptied and unidentified:
        return replace(result, result="left", message="; ".join(messages))
    if not emptied and not messages:
        messages.append(_exec_failure(res, timeout_s) if res.exit_code not in (0, 1)
                        else f"{fa if fa is not None else 'an unknown number of'} files are left under {choice.root}")
    return replace(result, result="emptied" if emptied else "failed", message="; ".join(messages) or None)


def unidentified_message(target: FsVolumeTarget, unidentified: Sequence[str], files: int | None) -> str:
    """Why directories named like the targets' models were left: their ``config.json`` does not
    say whose they are (``unidentified`` holds ``name: why``, at most 20), and the flag that
    deletes them anyway."""
    what = f"{len(unidentified)}{'+' if len(unidentified) >= 20 else ''} director(ies)"
    held = f" holding {files} file(s)" if files is not None else ""
    return (f"left {what}{held} named like {', '.join(target.models)}'s but not identified by vLLM's run "
            f"record, e.g. {unidentified[0]} (another model, such as one named with '_' for '/', may own "
            "them): not deleted; --whole-tier deletes every entry of the root")


def _blank_result(target: FsVolumeTarget, choice: ExecChoice, method: str) -> FsClearResult:
    """An empty :class:`FsClearResult` for ``target`` run in ``choice`` with ``method``."""
    return FsClearResult(target=target, result="failed", exec_pod=choice.pod, container=choice.container,
                         method=method)


def _find_counts(res: ExecResult) -> tuple[int | None, int | None]:
    if res.exit_code != 0 or res.timed_out:
        return None, None
    lines = [line.split() for line in res.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
    try:
        return len(lines), sum(int(size) for kind, size in lines if kind == "f")
    except ValueError:
        return None, None


def _run_find(kube: Kube, target: FsVolumeTarget, choice: ExecChoice, timeout_s: float) -> FsClearResult:
    """The ``find`` fallback: check, (list,) count, delete, count."""
    ns, pod, ctr, root = target.namespace, choice.pod, choice.container, choice.root
    base = _blank_result(target, choice, "find")

    def run(argv: list[str]) -> ExecResult:
        return kube.exec_command(ns, pod, ctr, argv, timeout_s=timeout_s)

    check = run(find_argv("check", root))
    if check.timed_out:
        return replace(base, message=_exec_failure(check, timeout_s), timed_out=True)
    if _missing_executable(check):
        return replace(base, method=None, message="the container has neither python3 nor find: "
                       "cannot delete through exec (restart the pods, or empty the volume another way)")
    if check.exit_code != 0:
        if b"No such file" in check.stderr and check.exit_code is not None:
            return replace(base, result="unconfirmed", files_before=0, bytes_before=0,
                           message=missing_root_message(root, pod))
        return replace(base, message=_exec_failure(check, timeout_s))
    if check.stdout.rstrip(b"\n") != root.encode():
        return replace(base, result="refused", message=f"refused in the pod: {root} is a symlink or not a directory")
    if target.model_only:
        paths: list[str] = []
        listing = run(find_argv("list", root))
        if listing.exit_code != 0:
            return replace(base, message=_exec_failure(listing, timeout_s), timed_out=listing.timed_out)
        prefix = root.rstrip("/") + "/"
        for entry in listing.stdout.decode("utf-8", "surrogateescape").split("\0"):
            if entry.startswith(prefix) and is_model_dir(entry[len(prefix):], target.models):
                paths.append(entry)
        if not paths:
            return replace(base, result="emptied", files_before=0, bytes_before=0, files_after=0, bytes_after=0,
                           message="no directory named like the targets' models under the root")
        # find cannot read a directory's config.json, which alone tells org/m's from org_m's
        names = tuple(p[len(prefix):] + ": python3 is not in the image to read its config.json" for p in paths)
        fb, bb = _find_counts(run(find_argv("count", root, paths)))
        return replace(base, result="left", files_before=fb, bytes_before=bb, files_after=fb, bytes_after=bb,
                       unidentified=names, message=unidentified_message(target, names, fb))
    fb, bb = _find_counts(run(find_argv("count", root)))
    deleted = run(find_argv("delete", root))
    if deleted.timed_out:
        return replace(base, files_before=fb, bytes_before=bb, message=_exec_failure(deleted, timeout_s),
                       timed_out=True)
    fa, ba = _find_counts(run(find_argv("count", root)))
    ok = deleted.exit_code == 0 and fa == 0
    message = "python3 is not in the image: deleted with find -P -xdev"
    if deleted.exit_code != 0:
        message += "; " + _exec_failure(deleted, timeout_s)
    if deleted.exit_code is None and fa == 0:
        return replace(base, result="unconfirmed", files_before=fb, bytes_before=bb, files_after=fa,
                       bytes_after=ba, message=message + ", though a count after it found 0 files: not confirmed")
    return replace(base, result="emptied" if ok else "failed", files_before=fb, bytes_before=bb,
                   files_after=fa, bytes_after=ba, message=message)


def sharing_message(target: FsVolumeTarget, result: FsClearResult | None = None) -> str | None:
    """What became of the files of pods outside the targets that mount ``target``'s volume
    (None when none do): before the run (``result`` None) what will happen, after it what did.
    Names the pods, the models whose directories are deleted and what was kept."""
    if not target.other_pods or target.refusal is not None or target.unevaluated is not None or target.model_unknown:
        return None
    whose = f"pods outside the targets ({', '.join(target.sharers or target.other_pods)})"
    models = ", ".join(f"{m} ({m.replace('/', '_')}_* by config.json)" for m in target.models) or "no model"
    if target.model_only and not target.models:
        # every targeted model held back for consent (its message says why)
        done = "is to be deleted" if result is None else "was deleted"
        return f"{target.volume} is also mounted by {whose}: nothing under {target.root} {done}"
    if result is None:
        if target.model_only:
            return (f"{target.volume} is also mounted by {whose}: only the directories of {models} under "
                    f"{target.root} are to be deleted; every other entry is kept (--whole-tier deletes them too)")
        return (f"{target.volume} is also mounted by {whose}: every entry under {target.root} is to be deleted, "
                "theirs included (--whole-tier)")
    if result.result not in ("emptied", "unconfirmed", "failed", "left"):
        return f"{target.volume} is also mounted by {whose}: nothing was deleted"
    if target.model_only:
        kept = (f"{result.other_files} file(s) outside them were kept" if result.other_files is not None
                else "every other entry was kept")
        return (f"{target.volume} is also mounted by {whose}: only the directories of {models} under "
                f"{target.root} were deleted; {kept} (--whole-tier deletes them too)")
    return (f"{target.volume} is also mounted by {whose}: every entry under {target.root} was deleted, "
            "theirs included (--whole-tier)")


def run_fs_clear(kube: Kube, target: FsVolumeTarget, *, timeout_s: float = 120.0) -> FsClearResult:
    """Empty one planned FS-tier directory through ``pods/exec``.

    Runs ``python3 -I -c`` :data:`CLEAR_SCRIPT` in the exec pod (the next choice when the pod is
    gone or its container not found), falling back to :func:`find_argv` when the image has no
    ``python3``. Every exec is bounded by ``timeout_s``; a timeout is reported as not emptied.
    RBAC: ``get`` and ``create`` on ``pods/exec``.

    Returns:
        A :class:`FsClearResult`. Never raises for cluster answers (403, 404, connection
        failures become ``failed`` with the reason).
    """
    from ..kube import KubeApiError, KubeConnectionError

    if target.unevaluated is not None:
        return FsClearResult(target=target, result="left", message=unevaluated_message(target.root, target.unevaluated))
    if target.model_unknown is not None and target.refusal is None:
        return FsClearResult(target=target, result="left", message=model_unknown_message(target))
    if target.held is not None and not target.models and target.refusal is None:
        # every targeted model is held back for consent: nothing to delete
        return FsClearResult(target=target, result="left", message=target.held)
    if target.model_only and not target.models and target.refusal is None:
        # never sent: a per-model program given no model (CLEAR_SCRIPT refuses it too)
        return FsClearResult(target=target, result="refused", message=(
            "a per-model deletion with no model known: nothing deleted"))
    if target.refusal is not None or not target.choices:
        return FsClearResult(target=target, result="refused",
                             message=target.refusal or "no pod to run the deletion in")
    last: FsClearResult | None = None
    for choice in target.choices:
        try:
            done = _run_python(kube, target, choice, timeout_s)
            if done is None:
                done = _run_find(kube, target, choice, timeout_s)
            if target.unknown_models and done.result in ("emptied", "unconfirmed"):
                # the pods whose model is not known keep their directories: not emptied
                done = replace(done, result="left", message="; ".join(
                    m for m in (done.message, f"the directories of {', '.join(target.unknown_models)} "
                                "were not deleted: their model is not known") if m))
            if target.held is not None and done.result in ("emptied", "unconfirmed"):
                # the models held back for consent keep their directories: not emptied
                done = replace(done, result="left", message="; ".join(m for m in (done.message, target.held) if m))
            return done
        except KubeApiError as exc:
            hint = ""
            if exc.status == 403:
                hint = " (needs get and create on pods/exec)"
            last = replace(_blank_result(target, choice, "python3"), method=None, message=f"exec refused: {exc}{hint}")
            if exc.status not in (400, 404):
                return last
        except KubeConnectionError as exc:
            last = replace(_blank_result(target, choice, "python3"), method=None, message=f"exec failed: {exc}")
    assert last is not None
    return last
