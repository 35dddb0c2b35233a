"""The fixed program run in the pod: :data:`CLEAR_SCRIPT` (``python3 -I -c``) and its argv, or GNU
``find -P ... -xdev`` when the image has no ``python3``."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Sequence
from urllib.parse import urlencode

#: The fixed program run in the pod with ``python3 -I -c CLEAR_SCRIPT ROOT [--model M]...
#: [--file-suffix S] [--layout REGEX] [--count-only] [--model-only]`` (what each selects: :func:`python_argv`).
#: The root and model prefixes arrive as argv elements, never as code.
#: It walks from ``/`` with ``O_NOFOLLOW`` at every component (a symlink anywhere on the way is
#: refused), works on directory descriptors only (``dir_fd``), never follows a symlink below
#: the root (links are unlinked, not followed), never crosses into another file system below
#: the root (their mount points are listed in ``skipped_mounts``), deletes the root's children
#: and never the root, and prints one JSON object on stdout:
#: ``{"root", "missing", "refused", "before": {"files","bytes","dirs"}, "after": {...},
#: "others": {...} (model-only: what is left outside the scope, unidentified directories too),
#: "unidentified": [names with why] (model-only: directories named like a model's whose record
#: does not identify them), "skipped_mounts", "errors"}``.
#: Exit status 0 done, 1 some entries could not be deleted, 3 refused.
CLEAR_SCRIPT = r'''
import json, os, re, stat, sys
sys.setrecursionlimit(20000)
args = sys.argv[1:]
root = args[0] if args else ""
opt, i = {"--model": [], "--file-suffix": [None], "--layout": [None]}, 1
while i < len(args):
    if args[i] in opt and i + 1 < len(args):
        opt[args[i]].append(args[i + 1]); i += 2
    else:
        i += 1
count_only = "--count-only" in args
models, file_suffix, layout = opt["--model"], opt["--file-suffix"][-1], opt["--layout"][-1]
layout = layout and re.compile(layout)
dir_name = re.compile(r"(.*)_([0-9a-f]{12})(_r[0-9]+)?", re.S)
out = {"root": root, "missing": False, "refused": None, "before": None, "after": None,
       "others": None, "skipped_mounts": [], "errors": []}
def zero():
    return {"files": 0, "bytes": 0, "dirs": 0}
def done(code):
    sys.stdout.write(json.dumps(out) + "\n"); sys.stdout.flush(); sys.exit(code)
def err(msg):
    if len(out["errors"]) < 20:
        out["errors"].append(msg)
parts = root.split("/")
if (not root.startswith("/") or root == "/" or os.path.normpath(root) != root
        or root.startswith("//") or ".." in parts or "\0" in root):
    out["refused"] = "root is not a normalised absolute path"; done(3)
if "--model-only" in args and not models:
    # a per-model deletion given no model selects nothing: never read as "every entry"
    out["refused"] = "no model given"; done(3)
FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
fd = os.open("/", FLAGS)
walked = ""
for comp in [p for p in parts if p]:
    walked += "/" + comp
    try:
        st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        out["missing"] = True; out["before"] = out["after"] = zero()
        done(0)
    if stat.S_ISLNK(st.st_mode):
        out["refused"] = walked + " is a symlink: not followed"; done(3)
    if not stat.S_ISDIR(st.st_mode):
        out["refused"] = walked + " is not a directory"; done(3)
    try:
        nfd = os.open(comp, FLAGS, dir_fd=fd)
    except OSError as exc:
        out["refused"] = walked + ": " + exc.strerror; done(3)
    os.close(fd); fd = nfd
rootfd = fd
dev = os.fstat(rootfd).st_dev
records = {}
def record(base):
    # (model_name, None) from <base>/config.json as vLLM writes it, or (None, why)
    if base not in records:
        records[base] = (None, "no config.json")
        try:
            dfd = os.open(base, FLAGS, dir_fd=rootfd)
            try:
                ffd = os.open("config.json", FLAGS ^ os.O_DIRECTORY | os.O_NONBLOCK, dir_fd=dfd)
            finally:
                os.close(dfd)
            with os.fdopen(ffd, "rb") as fh:
                records[base] = (json.loads(fh.read(1 << 20))["model_name"] + "", None)
        except FileNotFoundError:
            pass
        except Exception as exc:
            records[base] = (None, "config.json: " + str(exc)[:60])
    return records[base]
def kind(name):
    # "in" (in the scope), "unknown" (named like a target model's, not identified), None (not ours)
    if file_suffix is not None:
        ok = name.endswith(file_suffix) and (not models or any(name.startswith(p) and (
            not layout or layout.fullmatch(name[len(p):len(name) - len(file_suffix)])) for p in models))
        return "in" if ok else None
    if not models:
        return "in"
    m = dir_name.fullmatch(name)
    wanted = m and [x for x in models if x.replace("/", "_") == m.group(1)]
    if not wanted:
        return None
    owner, no = record(m.group(1) + "_" + m.group(2))
    if owner is None:
        why[name] = no
        return "unknown"
    return "in" if owner in wanted else None
why = {}
def is_record(rel, name):
    # vLLM's run record <base>/config.json of a directory in the scope: kept
    return name == "config.json" and rel in bases
bases = set()
def add(dfd, e, rel, acc):
    try:
        st = e.stat(follow_symlinks=False)
    except OSError:
        return
    if stat.S_ISDIR(st.st_mode):
        if st.st_dev != dev:
            return
        acc["dirs"] += 1
        try:
            sub = os.open(e.name, FLAGS, dir_fd=dfd)
        except OSError:
            return
        try:
            tally(sub, rel + "/" + e.name, acc)
        finally:
            os.close(sub)
    else:
        acc["files"] += 1
        if stat.S_ISREG(st.st_mode):
            acc["bytes"] += st.st_size
def tally(dfd, rel, acc):
    try:
        entries = list(os.scandir(dfd))
    except OSError as exc:
        err(rel + ": " + exc.strerror); return
    for e in entries:
        if is_record(rel, e.name):
            continue
        add(dfd, e, rel, acc)
def count():
    acc, rest = zero(), zero()
    for e in list(os.scandir(rootfd)):
        k = kind(e.name)
        if k == "in" and models and file_suffix is None and not dir_name.fullmatch(e.name).group(3):
            bases.add(root + "/" + e.name)
        add(rootfd, e, root, acc if k == "in" else rest)
    return acc, rest
def remove(dfd, name, rel):
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(name, dir_fd=dfd)
        except FileNotFoundError:
            pass
        except OSError as exc:
            err(rel + ": " + exc.strerror)
        return
    if st.st_dev != dev:
        out["skipped_mounts"].append(rel); return
    try:
        sub = os.open(name, FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        return
    except OSError as exc:
        try:
            os.unlink(name, dir_fd=dfd)
        except OSError:
            err(rel + ": " + exc.strerror)
        return
    kept = False
    try:
        if os.fstat(sub).st_dev != dev:
            out["skipped_mounts"].append(rel); return
        for e in list(os.scandir(sub)):
            if is_record(rel, e.name):
                kept = True
                continue
            remove(sub, e.name, rel + "/" + e.name)
    except OSError as exc:
        err(rel + ": " + exc.strerror)
    finally:
        os.close(sub)
    if kept:
        return
    for attempt in (1, 2):
        try:
            os.rmdir(name, dir_fd=dfd); return
        except FileNotFoundError:
            return
        except OSError as exc:
            if attempt == 2:
                err(rel + ": " + exc.strerror)
out["before"], rest = count()
if not count_only:
    for e in list(os.scandir(rootfd)):
        if kind(e.name) == "in":
            remove(rootfd, e.name, root + "/" + e.name)
    out["after"], rest = count()
if models:
    out.update(others=rest, unidentified=sorted(n + ": " + w for n, w in why.items())[:20])
done(1 if out["errors"] or out["skipped_mounts"] else 0)
'''


def _compact(source: str) -> str:
    """``source`` without blank and comment-only lines, each indentation level one space instead of
    four: the program travels as a ``command`` query parameter of the exec request, whose request
    line then stays below 8 KiB (the limit of many HTTP front ends and of the ``websockets``
    server). No line of the program is inside a multi-line string, so the meaning is unchanged."""
    lines = []
    for line in source.splitlines():
        text = line.lstrip(" ")
        if text and not text.startswith("#"):
            lines.append(" " * ((len(line) - len(text)) // 4) + text)
    return "\n".join(lines) + "\n"


#: :data:`CLEAR_SCRIPT` as sent (:func:`_compact`).
CLEAR_PROGRAM = _compact(CLEAR_SCRIPT)


def python_argv(root: str, models: Sequence[str] = (), *, count_only: bool = False,
                file_suffix: str | None = None, layout: str | None = None,
                model_only: bool = False) -> list[str]:
    """argv running :data:`CLEAR_SCRIPT` on ``root``: ``python3 -I -c SCRIPT ROOT [--model P]...``.

    ``-I`` (isolated mode) ignores ``PYTHON*`` variables and the user site directory of the
    container, so nothing in the pod's environment changes the program.

    Without ``file_suffix``, ``models`` are model names (``org/m``): the children selected are
    the vLLM directories named ``<model with / -> _>_<hash12>[_r<N>]`` whose ``config.json``
    (of the ``<model>_<hash12>`` directory) records that model (the record itself is kept); children named so
    whose record is missing or does not say are left and listed in ``unidentified``. With
    ``file_suffix`` the children selected are the entries whose name ends with it and, with
    ``models`` (then name prefixes), starts with one of them followed by what the regular
    expression ``layout`` matches in full up to the suffix (LMCache's local disk:
    ``<model>@...pt`` files).

    ``model_only`` (``--model-only``) says the deletion is per model: the program then refuses
    (exit 3, ``refused`` set, nothing deleted) when ``models`` is empty, instead of selecting
    every entry.
    """
    argv = ["python3", "-I", "-c", CLEAR_PROGRAM, root]
    for m in models:
        argv += ["--model", m]
    if file_suffix is not None:
        argv += ["--file-suffix", file_suffix]
    if layout is not None:
        argv += ["--layout", layout]
    if count_only:
        argv.append("--count-only")
    if model_only:
        argv.append("--model-only")
    if len(urlencode([("command", a) for a in argv])) > ARGV_BUDGET:
        argv[3] = PACKED_PROGRAM   # the same program, packed: the request line stays below 8 KiB
    return argv


def _packed(program: str) -> str:
    """A one-line program that runs ``program`` from its zlib-compressed, URL-safe base64 text
    (letters, digits, ``-`` and ``_``: nothing to escape in the exec request's query)."""
    blob = base64.urlsafe_b64encode(zlib.compress(program.encode("utf-8"), 9)).decode("ascii")
    return f"import base64,zlib;exec(zlib.decompress(base64.urlsafe_b64decode('{blob}')))"


#: :data:`CLEAR_PROGRAM` packed (:func:`_packed`), sent instead when the plain argv would make
#: the exec request line longer than the 8 KiB that HTTP front ends and the ``websockets`` server
#: allow (a long name expression, namespace or pod name).
PACKED_PROGRAM = _packed(CLEAR_PROGRAM)
#: The URL-encoded ``command`` parameters above which :data:`PACKED_PROGRAM` is sent: the rest of
#: the request line (path, namespace, pod, the other parameters) takes about 250 bytes more.
ARGV_BUDGET = 7900


def find_argv(step: str, root: str, paths: Sequence[str] = ()) -> list[str]:
    """argv of the ``find`` fallback for images without ``python3`` (GNU findutils).

    ``step``: ``check`` prints the root only when it is a directory and not a symlink;
    ``list`` prints the root's children NUL-separated; ``count`` prints the type and size of
    every non-directory below the start points, one per line (bytes count regular files only);
    ``delete`` deletes below the start points. Start points are ``root`` (children only:
    ``-mindepth 1``) or ``paths`` (model-only: the matched children, deleted whole). ``-P`` never
    follows symlinks, ``-xdev`` never crosses into another file system. Every start point is
    absolute (it begins with ``/``), so none can be read as an option or an expression.
    """
    starts = list(paths) if paths else [root]
    depth = [] if paths else ["-mindepth", "1"]
    if step == "check":
        return ["find", "-P", root, "-maxdepth", "0", "-type", "d", "-print"]
    if step == "list":
        return ["find", "-P", root, "-mindepth", "1", "-maxdepth", "1", "-print0"]
    if step == "count":
        return ["find", "-P", *starts, "-xdev", *depth, "!", "-type", "d", "-printf", "%y %s\\n"]
    if step == "delete":
        return ["find", "-P", *starts, "-xdev", *depth, "-delete"]
    raise ValueError(f"unknown find step {step!r}")
