"""Release tooling for kubectl-kvreset: the zipapp's entry guard, the krew archive and manifest.

Run by ``make build`` and ``make krew`` (``python krew/build.py COMMAND ...``):

* ``guard SRC DST``: copy the shiv zipapp ``SRC`` to ``DST`` with its ``__main__.py`` replaced by
  ``krew/zipapp_main.py`` (a Python-version check written for any Python, then
  ``krew/boot.py``, stored as ``_kvreset_boot.py``, then shiv's bootstrap).
  shiv's own ``__main__.py`` imports its bootstrap first, so an old interpreter would extract and
  compile everything before any preamble could stop it (linkedin/shiv ``builder.py``).
  Every module gets its byte code beside it (:func:`bytecode_entries`), so the first run only
  unpacks and compiles nothing.
* ``prune SITE``: remove what the zipapp never imports (:data:`UNUSED`: the ``asyncio`` client,
  whose ``aiohttp`` is not carried, and the dependencies' own test suites) and their
  ``RECORD`` lines: fewer files to unpack on the first run.
* ``drop-scripts SITE``: remove the console scripts ``pip install --target SITE`` wrote under
  ``SITE/bin`` and their lines in each ``*.dist-info/RECORD``: each script's first line names the
  interpreter that installed it (this checkout's venv), and RECORD carries its hash, so either
  would make two checkouts build different bytes. Nothing in the zipapp runs them.
* ``archive``: the krew release archive, a ``.tar.gz`` holding the zipapp (mode 0755),
  ``LICENSE`` and the completion script. krew sniffs archive types from content and a shebang
  zipapp sniffs as text, so it must be wrapped (krew ``internal/download/downloader.go``); the
  index CI requires a license file among the installed files (``cmd/validate-krew-manifest``).
* ``manifest``: ``plugin.yaml`` from ``krew/plugin.yaml.in`` with the version, the archive's URL
  and its lowercase sha256 (krew ``internal/index/validation/validate.go`` accepts only
  ``^[a-f0-9]{64}$``).

Every output is reproducible: fixed timestamps (``SOURCE_DATE_EPOCH``), owners, order and gzip
header, so two runs on the same inputs give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import importlib.util
import io
import os
import py_compile
import re
import string
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_EPOCH = 1767225600  # 2026-01-01T00:00:00Z, the Makefile's default SOURCE_DATE_EPOCH


def source_date_epoch() -> int:
    """``SOURCE_DATE_EPOCH`` (seconds since the epoch) or the project's fixed default."""
    return int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_EPOCH))


def split_zipapp(data: bytes) -> tuple[bytes, bytes]:
    """Split a zipapp into ``(shebang line including its newline, zip bytes)``.

    Raises:
        ValueError: the data does not start with ``#!``.
    """
    if not data.startswith(b"#!"):
        raise ValueError("not a zipapp: no '#!' line")
    end = data.index(b"\n") + 1
    return data[:end], data[end:]


#: what ``prune`` removes from ``site-packages`` (paths relative to it, as regular expressions):
#: the client's asyncio tree (``kubernetes.aio`` needs ``aiohttp``, which the zipapp does not
#: carry, see requirements-zipapp.txt), the test suites the dependencies ship, and ``tzdata``
#: (python-dateutil's copy of the IANA zone files, 600 of them: read only when a time zone is
#: asked for by name, which neither the plugin nor the client's credential loaders do;
#: dateutil goes without it, python-dateutil ``_tzdata_impl.py``)
UNUSED = (
    r"kubernetes/aio/.*",
    r"tzdata/.*",
    r"tzdata-[^/]+\.dist-info/.*",
    r"[^/]+/tests/.*",
    r"kubernetes/.*_test\.py",
    r"kubernetes/dynamic/test_[^/]*\.py",
)

#: modules left without shipped byte code: the client's generated API classes and models,
#: which the plugin imports only on rare paths (an OIDC token refresh builds an ``ApiClient``;
#: a client laid out otherwise falls back to ``import kubernetes``): they are compiled when
#: first imported instead of on every first run; and shiv's ``bin/`` (the preamble, which
#: shiv runs as a script with ``runpy.run_path``: a script's pyc is never read)
NO_BYTECODE = (r"site-packages/kubernetes/client/(api|models)/.*", r"site-packages/bin/.*")


def prune_unused(site: Path, patterns: Sequence[str] = UNUSED) -> list[str]:
    """Delete the files of ``site`` (a ``pip install --target`` directory) whose path relative to
    it matches one of ``patterns`` (full match), the directories left empty, and their lines in
    each ``*.dist-info/RECORD``. Returns the relative paths removed, sorted."""
    rules = [re.compile(p) for p in patterns]
    removed: list[str] = []
    for path in sorted(site.rglob("*")):
        rel = path.relative_to(site).as_posix()
        if path.is_file() and any(r.fullmatch(rel) for r in rules):
            path.unlink()
            removed.append(rel)
    for path in sorted((p for p in site.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
    gone = set(removed)
    for record in sorted(site.glob("*.dist-info/RECORD")):
        lines = record.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if line.split(",", 1)[0] not in gone]
        if len(kept) != len(lines):
            record.write_text("".join(kept), encoding="utf-8")
    return sorted(removed)


def bytecode_entries(name: str, source: bytes) -> list[tuple[str, bytes]]:
    """The byte code to ship beside the zip entry ``name`` (a ``.py`` file): ``[(archive name,
    pyc bytes)]``, empty for a name matching :data:`NO_BYTECODE` or a file that does not compile.

    Under ``site-packages/`` the pyc goes where the import system looks for it once unpacked
    (``__pycache__/<module>.<cache tag>.pyc``, PEP 3147); at the zip's root (modules run from
    the archive itself, e.g. ``_kvreset_boot.py``) beside the source as ``<module>.pyc``, where
    ``zipimport`` looks. Both are unchecked hash-based pycs (PEP 552): no timestamp, so the
    build is reproducible, and the import system trusts them without reading the source again
    (an extraction is never changed: its directory name is the build's content hash). An
    interpreter of another version ignores them (another cache tag; zipimport skips a bad
    magic number) and compiles the source as before. The compile runs with the recorded file
    name ``name``, which the import system replaces with the real path on load.
    """
    if not name.endswith(".py") or any(re.fullmatch(p, name) for p in NO_BYTECODE):
        return []
    if name.startswith("site-packages/"):
        target = importlib.util.cache_from_source(name)
    elif name == "__main__.py":
        return []  # read by any Python (the version guard): left as source only
    else:
        target = name[:-3] + ".pyc"
    with tempfile.TemporaryDirectory(prefix="kvreset-pyc-") as tmp:
        src = Path(tmp) / "m.py"
        src.write_bytes(source)
        try:
            out = py_compile.compile(str(src), cfile=str(Path(tmp) / "m.pyc"), dfile=name, doraise=True,
                                     invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        except py_compile.PyCompileError:
            return []
        return [(target, Path(out).read_bytes())]


def replace_main(src: Path, dst: Path, main_py: bytes, extra: Sequence[tuple[str, bytes]] = (), *,
                 bytecode: bool = False) -> None:
    """Write ``dst``: the zipapp ``src`` with its ``__main__.py`` replaced by ``main_py`` and
    the ``extra`` files (``(name at the zip's root, bytes)``, e.g. ``_kvreset_boot.py``) added
    after it; with ``bytecode``, every module's :func:`bytecode_entries` right after it.

    Entries keep their order, timestamps, compression and permission bits (added files take
    ``__main__.py``'s, a pyc its source's), so the output is as reproducible as the input (byte
    code needs a fixed hash seed: :func:`main` runs with ``PYTHONHASHSEED=0``). ``dst`` is made
    executable (0755).

    Raises:
        ValueError: ``src`` is not a zipapp or holds no ``__main__.py``.
    """
    shebang, body = split_zipapp(src.read_bytes())
    out = io.BytesIO()
    out.write(shebang)
    found = False

    def write(zout: zipfile.ZipFile, name: str, data: bytes, like: zipfile.ZipInfo) -> None:
        entry = zipfile.ZipInfo(name, date_time=like.date_time)
        entry.compress_type = like.compress_type
        entry.external_attr = like.external_attr
        entry.create_system = like.create_system
        zout.writestr(entry, data)
        if bytecode:
            for pyc_name, pyc in bytecode_entries(name, data):
                write(zout, pyc_name, pyc, like)

    with zipfile.ZipFile(io.BytesIO(body)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if info.filename == "__main__.py":
                data, found = main_py, True
            write(zout, info.filename, data, info)
            if info.filename == "__main__.py":
                for name, content in extra:
                    write(zout, name, content, info)
    if not found:
        raise ValueError(f"{src} holds no __main__.py")
    tmp = dst.with_name(dst.name + ".part")
    tmp.write_bytes(out.getvalue())
    tmp.chmod(0o755)
    tmp.replace(dst)


def _tar_member(name: str, data: bytes, mode: int, mtime: int) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.type = tarfile.REGTYPE
    return info, io.BytesIO(data)


def drop_scripts(site: Path) -> list[str]:
    """Remove ``site/bin`` and every ``RECORD`` line of ``site/*.dist-info`` that names a file
    outside ``site`` (pip writes console scripts as ``../../bin/NAME``). Returns the RECORD
    lines removed, in order. ``site`` must be a ``pip install --target`` directory."""
    import shutil

    removed: list[str] = []
    shutil.rmtree(site / "bin", ignore_errors=True)
    for record in sorted(site.glob("*.dist-info/RECORD")):
        lines = record.read_text(encoding="utf-8").splitlines(keepends=True)
        kept = [line for line in lines if not line.startswith("../")]
        if len(kept) != len(lines):
            removed.extend(line.rstrip("\n") for line in lines if line.startswith("../"))
            record.write_text("".join(kept), encoding="utf-8")
    return removed


def build_archive(output: Path, members: Sequence[tuple[str, Path, int]], *, mtime: int | None = None) -> str:
    """Write a reproducible ``.tar.gz`` of ``members`` (``(name in archive, file, mode)``),
    sorted by name, owned by root (0:0), with every mtime and the gzip header's time set to
    ``mtime`` (default ``SOURCE_DATE_EPOCH``) and no file name in the gzip header.

    Returns the archive's lowercase sha256 (64 hex digits).
    """
    mtime = source_date_epoch() if mtime is None else mtime
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, path, mode in sorted(members):
            info, data = _tar_member(name, path.read_bytes(), mode, mtime)
            tar.addfile(info, data)
    packed = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=packed, compresslevel=9, mtime=mtime) as gz:
        gz.write(raw.getvalue())
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_bytes(packed.getvalue())
    return hashlib.sha256(packed.getvalue()).hexdigest()


def sha256_of(path: Path) -> str:
    """Lowercase hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def render_manifest(template: str, *, version: str, homepage: str, uri: str, sha256: str) -> str:
    """Fill the krew manifest template (``string.Template``: ``${version}``, ``${homepage}``,
    ``${uri}``, ``${sha256}``). ``version`` is the package version without ``v`` (``0.1.0``); krew wants
    ``v0.1.0``.

    Raises:
        ValueError: ``sha256`` is not 64 lowercase hex digits, or the template names other fields.
    """
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"sha256 must be 64 lowercase hex digits, got {sha256!r}")
    return string.Template(template).substitute(
        version=f"v{version.removeprefix('v')}", homepage=homepage, uri=uri, sha256=sha256)


def package_version(init_py: Path) -> str:
    """``__version__`` from the package's ``__init__.py`` (read as text, not imported).

    Raises:
        ValueError: no ``__version__ = "..."`` line.
    """
    for line in init_py.read_text().splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise ValueError(f"no __version__ in {init_py}")


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry (see the module docstring). Returns the exit code."""
    parser = argparse.ArgumentParser(prog="krew/build.py", description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("guard", help="replace the zipapp's __main__.py with the version guard")
    g.add_argument("src", type=Path)
    g.add_argument("dst", type=Path)
    g.add_argument("--main", type=Path, default=HERE / "zipapp_main.py")
    g.add_argument("--boot", type=Path, default=HERE / "boot.py", help="stored as _kvreset_boot.py")
    g.add_argument("--no-bytecode", action="store_true", help="ship sources only")
    pr = sub.add_parser("prune", help="remove what the zipapp never imports from a --target dir")
    pr.add_argument("site", type=Path)
    d = sub.add_parser("drop-scripts", help="remove console scripts and their RECORD lines from a --target dir")
    d.add_argument("site", type=Path)
    a = sub.add_parser("archive", help="build the krew .tar.gz")
    a.add_argument("--zipapp", type=Path, required=True)
    a.add_argument("--license", type=Path, required=True)
    a.add_argument("--completion", type=Path, default=HERE / "kubectl_complete-kvreset")
    a.add_argument("--output", type=Path, required=True)
    m = sub.add_parser("manifest", help="write plugin.yaml from the template")
    m.add_argument("--archive", type=Path, required=True)
    m.add_argument("--version", default=None, help="default: the package's __version__")
    m.add_argument("--homepage", required=True, help="the project's home page (its repository)")
    m.add_argument("--uri", required=True, help="release URL of the archive; {version} is replaced")
    m.add_argument("--template", type=Path, default=HERE / "plugin.yaml.in")
    m.add_argument("--output", type=Path, required=True)
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.cmd == "guard":
        if not args.no_bytecode and os.environ.get("PYTHONHASHSEED") != "0":
            # byte code holds sets of constants in hash order: a fixed seed makes it reproducible
            env = {**os.environ, "PYTHONHASHSEED": "0"}
            again = [sys.executable, str(Path(__file__).resolve()), *argv]
            return subprocess.run(again, env=env, check=False).returncode
        replace_main(args.src, args.dst, args.main.read_bytes(), [("_kvreset_boot.py", args.boot.read_bytes())],
                     bytecode=not args.no_bytecode)
    elif args.cmd == "prune":
        removed = prune_unused(args.site)
        print(f"{args.site}: {len(removed)} files the zipapp never imports removed")
    elif args.cmd == "drop-scripts":
        drop_scripts(args.site)
    elif args.cmd == "archive":
        digest = build_archive(args.output, [
            ("kubectl-kvreset", args.zipapp, 0o755),
            ("LICENSE", args.license, 0o644),
            ("kubectl_complete-kvreset", args.completion, 0o755),
        ])
        print(f"{args.output}: sha256 {digest}")
    else:
        version = (args.version or package_version(HERE.parent / "kubectl_kvreset" / "__init__.py")).removeprefix("v")
        text = render_manifest(args.template.read_text(), version=version, homepage=args.homepage,
                               uri=args.uri.replace("{version}", version), sha256=sha256_of(args.archive))
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        print(f"{args.output}: v{version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
