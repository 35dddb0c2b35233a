"""The shipped artefacts: the zipapp (every CPython 3.10-3.13 pyenv has, the one-line refusal of
older ones, concurrent first runs, stale extractions, compiled modules), reproducible builds,
``make krew`` (archive + manifest against krew's rules), ``make install`` and shell completion
through kubectl's plugin-completion protocol.

Interpreters are found under ``pyenv root`` (or ``$PYENV_ROOT``); a version that is absent is
skipped with the reason. The rebuilds go to temporary directories (``make build DIST=...``), so
the ``dist/kubectl-kvreset`` other tests run is never replaced under them.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.simctl import DEMO_MANIFEST, ROOT, SimCluster, zipapp_path
from tests.unit.test_krew import archive_problems, krew_problems

from .conftest import require_sandbox

DEMO_NS = "llm-d-demo"
SUPPORTED = ("3.10", "3.11", "3.12", "3.13")
TOO_OLD = ("3.9", "3.8", "2.7")
#: compiled modules with no same-named .py beside them, and how to prove the package works
#: without them (PyYAML falls back to its pure-Python loader when ``_yaml`` cannot load)
OPTIONAL_ACCELERATORS = {
    "yaml._yaml": "import yaml; assert yaml.safe_load('a: [1]') == {'a': [1]}; assert not yaml.__with_libyaml__",
}
#: kubernetes' aiohttp tree (kubernetes.aio only): never in the zipapp
ASYNC_TREE = ("aiohttp", "aiosignal", "aiohappyeyeballs", "multidict", "yarl", "frozenlist", "propcache")


def pyenv_versions_dir() -> Path | None:
    """``$(pyenv root)/versions`` (or ``$PYENV_ROOT/versions``), None when there is no pyenv."""
    root = os.environ.get("PYENV_ROOT")
    if not root and shutil.which("pyenv"):
        done = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30)
        root = done.stdout.strip() if done.returncode == 0 else None
    if not root and Path.home().joinpath(".pyenv").is_dir():
        root = str(Path.home() / ".pyenv")
    path = Path(root) / "versions" if root else None
    return path if path and path.is_dir() else None


def interpreter(minor: str) -> Path:
    """The newest pyenv CPython ``minor`` (``"3.12"``); skips when pyenv or that version is absent."""
    versions = pyenv_versions_dir()
    if versions is None:
        pytest.skip("pyenv is not installed (no `pyenv root`, no PYENV_ROOT): cannot try other Pythons")
    found = sorted((p for p in versions.glob(f"{minor}.*") if re.fullmatch(rf"{re.escape(minor)}\.\d+", p.name)),
                   key=lambda p: int(p.name.rsplit(".", 1)[1]))
    exe = [p / "bin" / "python" for p in found if (p / "bin" / "python").exists()]
    if not exe:
        pytest.skip(f"pyenv has no CPython {minor} under {versions}")
    return exe[-1]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make(*args: str, timeout: float = 300, directory: Path = ROOT,
         venv: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``make`` in the checkout ``directory`` (default: this one), never remaking the venv
    (other tests share it; another checkout uses this one's, or ``venv``)."""
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    venv = venv or ROOT / ".venv"
    venv_ready = venv / "bin" / ".ready"
    extra = ["-o", str(venv_ready), f"VENV={venv}"] if venv_ready.exists() else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "MFLAGS"}
    done = subprocess.run(["make", "-C", str(directory), *extra, *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def clone(dest: Path) -> Path:
    """A copy of this checkout's sources (tracked and new files, not ignored ones) at ``dest``,
    as a second clone in another directory would be."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                            capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if not src.is_file():
            continue
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    return dest


def venv_beside(venv: Path) -> Path:
    """A venv at ``venv`` (another path, so another interpreter path in anything pip writes)
    that sees this checkout's venv's packages through a ``.pth`` file, ready for ``make``."""
    root_venv = ROOT / ".venv"
    if not (root_venv / "bin" / ".ready").exists():
        pytest.skip("this checkout's .venv is not ready: run 'make test'")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    theirs = next((root_venv / "lib").glob("python3*/site-packages"))
    (venv / "lib" / version / "site-packages" / "checkout-venv.pth").write_text(f"{theirs}\n")
    (venv / "bin" / "shiv").symlink_to(root_venv / "bin" / "shiv")
    (venv / "bin" / ".ready").touch()
    return venv


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float]:
    """`make build` in this checkout and in a copy of it in another directory (another name,
    another depth), each into a fresh directory: ``(zipapp 1, zipapp 2, seconds of one)``."""
    out = []
    seconds = 0.0
    other = clone(tmp_path_factory.mktemp("elsewhere") / "deeper" / "kvreset-second-clone")
    other_venv = venv_beside(other / ".venv")
    for name, checkout, venv in (("build-a", ROOT, None), ("build-b", other, other_venv)):
        dist = tmp_path_factory.mktemp(name)
        start = time.monotonic()
        make("build", f"DIST={dist}", directory=checkout, venv=venv)
        seconds = time.monotonic() - start
        out.append(dist / "kubectl-kvreset")
    return out[0], out[1], seconds


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    """The demo prefill/decode deployment (repository manifest) in the simulator."""
    require_sandbox()
    cluster = SimCluster([DEMO_MANIFEST], namespace=DEMO_NS, ready_delay=0.05)
    cluster.wait_ready()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def shiv_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SHIV_ROOT for the per-interpreter runs (the first one extracts)."""
    return tmp_path_factory.mktemp("shiv-root")


def run_app(python: Path | None, *args: str, env: dict[str, str],
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    cmd = ([str(python)] if python else []) + [str(zipapp_path()), *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)


# -- reproducible build, contents ---------------------------------------------------------------

def test_two_clones_build_byte_identical_zipapps(builds: tuple[Path, Path, float]) -> None:
    first, second, seconds = builds
    assert sha256(first) == sha256(second)
    # nothing of the build machine inside: no console scripts naming a checkout's interpreter
    names = zip_names(first)
    assert [n for n in names if n.startswith("site-packages/bin/")] == ["site-packages/bin/preamble.py"]
    with zipfile.ZipFile(first) as z:
        for name in names:
            data = z.read(name)
            assert str(ROOT).encode() not in data and b"/.venv/" not in data, name
            if name.endswith(".dist-info/RECORD"):
                assert b"../" not in data, f"{name} names a file outside the zipapp's site-packages"
    assert first.stat().st_mode & 0o111, "the zipapp must be executable"
    print(f"build: {seconds:.1f}s, {first.stat().st_size} bytes, sha256 {sha256(first)}")


def zip_names(app: Path) -> list[str]:
    with zipfile.ZipFile(app) as z:
        return z.namelist()


def test_zipapp_holds_the_sync_client_only_and_the_guard() -> None:
    app = zipapp_path()
    names = zip_names(app)
    tops = {n.split("/")[1] for n in names if n.startswith("site-packages/") and n.count("/") >= 2}
    assert {"kubernetes", "kubectl_kvreset", "click", "yaml", "urllib3"} <= tops
    assert not [t for t in tops if t.split("-")[0].split(".")[0].lower() in ASYNC_TREE], sorted(tops)
    with zipfile.ZipFile(app) as z:
        main = z.read("__main__.py").decode()
        env = json.loads(z.read("environment.json"))
    assert "sys.version_info < (3, 10)" in main
    # byte code ships in the archive (krew/build.py bytecode_entries): the first run only unpacks
    assert env["compile_pyc"] is False and env["reproducible"] is True
    tag = sys.implementation.cache_tag
    plugin = [n for n in names if n.startswith("site-packages/kubectl_kvreset/") and n.endswith(".py")]
    assert plugin and all(importlib.util.cache_from_source(n) in names for n in plugin), tag
    assert "_kvreset_boot.pyc" in names and "_bootstrap/__init__.pyc" in names and "__main__.pyc" not in names
    # what it never imports is not carried: the asyncio client, the dependencies' test suites,
    # the IANA zone files of tzdata
    assert not [n for n in names if n.startswith(("site-packages/kubernetes/aio/", "site-packages/tzdata"))
                or "/tests/" in n or n.endswith("_test.py")]
    assert env["preamble"] == "preamble.py" and "site-packages/bin/preamble.py" in names
    assert app.read_bytes().startswith(b"#!/usr/bin/env python3\n")


def compiled_modules(names: list[str]) -> dict[str, str]:
    """``module name -> archive path`` of every compiled extension module in the zipapp."""
    out = {}
    for name in names:
        if not name.startswith("site-packages/") or not re.search(r"\.(so|pyd|dylib)$", name):
            continue
        rel = name.removeprefix("site-packages/")
        stem = rel.split(".", 1)[0]  # foo/bar.cpython-311-x86_64-linux-gnu.so -> foo/bar
        out[stem.replace("/", ".")] = name
    return out


def test_every_compiled_module_has_a_pure_python_fallback(tmp_path: Path) -> None:
    names = zip_names(zipapp_path())
    modules = compiled_modules(names)
    print("compiled modules:", sorted(modules) or "none")
    if not modules:
        return
    # a CPython whose extension suffix matches none of them stands for any other platform
    tags = {re.search(r"cpython-(\d+)", p).group(1) for p in modules.values() if re.search(r"cpython-(\d+)", p)}  # type: ignore[union-attr]
    foreign = None
    for minor in SUPPORTED:
        if minor.replace(".", "") not in tags:
            try:
                foreign = interpreter(minor)
                break
            except pytest.skip.Exception:
                continue
    if foreign is None:
        pytest.skip("no pyenv CPython 3.10-3.13 other than the build's: "
                    "cannot load the zipapp without its compiled modules")
    with zipfile.ZipFile(zipapp_path()) as z:
        z.extractall(tmp_path, [n for n in names if n.startswith("site-packages/")])
    site = tmp_path / "site-packages"
    for module, path in sorted(modules.items()):
        pure = module.replace(".", "/") + ".py"
        if f"site-packages/{pure}" in names:
            check = (f"import importlib; m = importlib.import_module({module!r}); "
                     f"assert m.__file__.endswith({pure!r}), m.__file__")
        else:
            assert module in OPTIONAL_ACCELERATORS, f"{path} has no pure-Python fallback"
            check = (f"import importlib\ntry:\n    importlib.import_module({module!r})\n"
                     f"except ImportError:\n    pass\nelse:\n    raise SystemExit('loaded on a foreign ABI')\n"
                     + OPTIONAL_ACCELERATORS[module])
        done = subprocess.run([str(foreign), "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n{check}"],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (module, foreign, done.stderr[-2000:])


# -- interpreters -------------------------------------------------------------------------------

@pytest.mark.parametrize("minor", SUPPORTED)
def test_runs_under_each_supported_python(minor: str, demo: SimCluster, shiv_root: Path) -> None:
    python = interpreter(minor)
    env = {**demo.env(), "SHIV_ROOT": str(shiv_root)}
    version = run_app(python, "--version", env=env)
    assert version.returncode == 0 and re.fullmatch(r"kubectl-kvreset \d+\.\d+\.\d+\n", version.stdout), version
    helped = run_app(python, "--help", env=env)
    assert helped.returncode == 0 and "Examples:" in helped.stdout and "detect" in helped.stdout, helped
    detected = run_app(python, "detect", "-n", DEMO_NS, "-o", "json", env=env)
    assert detected.returncode == 0, detected.stderr
    rows = json.loads(detected.stdout)
    assert {r["owner"] for r in rows} == {"deployment/demo-prefill", "deployment/demo-decode"}
    assert all(r["kind"] == "VllmPod" and r["version"] for r in rows)


@pytest.mark.parametrize("minor", TOO_OLD)
def test_older_python_gets_one_line_and_exit_2(minor: str, tmp_path: Path) -> None:
    python = interpreter(minor)
    env = {**os.environ, "SHIV_ROOT": str(tmp_path / "shiv")}
    done = run_app(python, "detect", env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: kubectl-kvreset needs Python 3.10"), \
        done.stderr
    assert not (tmp_path / "shiv").exists(), "nothing may be extracted for a Python that cannot run it"


def test_eight_simultaneous_first_runs_and_stale_cleanup(tmp_path: Path) -> None:
    root = tmp_path / "shiv"
    root.mkdir()
    # older builds' extractions that no process holds: the two used last are kept
    olds = [root / ("kubectl-kvreset_" + ch * 64) for ch in "012"]
    for i, old in enumerate(olds):
        (old / "site-packages").mkdir(parents=True)
        (old / ".in-use").touch()
        os.utime(old / ".in-use", (1000.0 * (i + 1), 1000.0 * (i + 1)))
    stale = olds[0]
    other = root / ("someotherapp_" + "0" * 64)
    other.mkdir()
    env = {**os.environ, "SHIV_ROOT": str(root)}
    start = time.monotonic()
    procs = [subprocess.Popen([str(zipapp_path()), "--version"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, stdin=subprocess.DEVNULL) for _ in range(8)]
    results = [(p.wait(timeout=180), p.stdout.read(), p.stderr.read()) for p in procs]  # type: ignore[union-attr]
    for p in procs:
        p.stdout.close()  # type: ignore[union-attr]
        p.stderr.close()  # type: ignore[union-attr]
    print(f"8 concurrent first runs: {time.monotonic() - start:.1f}s")
    assert all(code == 0 and out.startswith("kubectl-kvreset ") for code, out, _ in results), results
    dirs = sorted(p.name for p in root.iterdir() if p.is_dir())
    assert len([d for d in dirs if d.startswith("kubectl-kvreset_")]) == 3, dirs
    assert not stale.exists() and olds[1].exists() and olds[2].exists() and other.exists() and \
        not [d for d in dirs if d.endswith(".tmp")]


# -- help --------------------------------------------------------------------------------------

def test_no_arguments_prints_help_and_every_command_has_examples() -> None:
    env = {**os.environ}
    bare = run_app(None, env=env)
    assert bare.returncode == 0 and "Usage:" in bare.stdout and "Commands:" in bare.stdout
    for command in ("detect", "clear", "clear-fs", "devmode", "restart", "metrics"):
        done = run_app(None, command, "--help", env=env)
        assert done.returncode == 0 and "Examples:" in done.stdout, (command, done.stdout)
        assert re.search(rf"kubectl kvreset {command}\b", done.stdout.split("Examples:", 1)[1]), command


# -- krew, install, completion -------------------------------------------------------------------

def test_make_krew_writes_a_valid_manifest_for_a_reproducible_archive(builds: tuple[Path, Path, float]) -> None:
    manifests = []
    for app in builds[:2]:
        dist = app.parent
        make("krew", f"DIST={dist}", f"MANIFEST={dist / 'plugin.yaml'}", "-o", str(app))
        manifests.append(dist / "plugin.yaml")
    archives = [m.parent / "kubectl-kvreset.tar.gz" for m in manifests]
    assert sha256(archives[0]) == sha256(archives[1])
    doc = yaml.safe_load(manifests[0].read_text())
    assert krew_problems(doc, "kvreset.yaml") == []
    assert doc["spec"]["platforms"][0]["sha256"] == sha256(archives[0])
    data = archives[0].read_bytes()
    assert archive_problems(data, doc["spec"]["platforms"][0]["bin"]) == []
    with tarfile.open(archives[0]) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert set(members) == {"kubectl-kvreset", "LICENSE", "kubectl_complete-kvreset"}
        assert members["kubectl-kvreset"].mode == 0o755 and members["kubectl_complete-kvreset"].mode == 0o755
        inner = tar.extractfile("kubectl-kvreset").read()  # type: ignore[union-attr]
    assert inner == builds[0].read_bytes()
    # the committed manifest is what this checkout builds, sha256 included (.ci/run checks it too)
    committed = (ROOT / "plugin.yaml").read_text()
    assert committed == manifests[0].read_text(), "plugin.yaml is stale: run `make krew` and commit it"


@pytest.fixture(scope="module")
def installed(builds: tuple[Path, Path, float], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make install` into a temporary bin directory."""
    bindir = tmp_path_factory.mktemp("bin")
    make("install", f"DIST={builds[0].parent}", f"BINDIR={bindir}")
    return bindir


def completion_env(cluster: SimCluster, bindir: Path) -> dict[str, str]:
    return {**cluster.env(), "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"}


def test_make_install_puts_both_files_on_path(installed: Path) -> None:
    for name in ("kubectl-kvreset", "kubectl_complete-kvreset"):
        assert (installed / name).stat().st_mode & 0o777 == 0o755


def test_completion_helper_completes_commands_flags_and_owners(installed: Path, demo: SimCluster) -> None:
    env = completion_env(demo, installed)

    def complete(*words: str) -> tuple[list[str], str]:
        done = subprocess.run([str(installed / "kubectl_complete-kvreset"), *words], capture_output=True,
                              text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        return [line.split("\t")[0] for line in lines[:-1]], lines[-1]

    assert complete("cl") == (["clear", "clear-fs", "clear-store"], ":4")
    values, directive = complete("clear", "--tr")
    assert values == ["--transport"] and directive == ":4"
    assert complete("clear", "--transport", "") == (["auto", "proxy", "exec", "port-forward"], ":4")
    assert complete("clear", "-n", DEMO_NS, "") == (["demo-decode", "demo-prefill"], ":4")
    assert complete("clear", "-n", DEMO_NS, "deployment/demo-p") == (["deployment/demo-prefill"], ":4")
    assert complete("detect", "--context", "") == (["sim"], ":4")
    assert complete("detect", "--kubeconfig", "")[1] == ":0"  # the shell completes file names


def test_kubectl_completes_namespaces_through_the_plugin(installed: Path, demo: SimCluster) -> None:
    kubectl = shutil.which("kubectl")
    if not kubectl:
        pytest.skip("kubectl is not installed: plugin completion cannot be driven through it")
    expected = sorted(item["metadata"]["name"] for item in demo.api("/api/v1/namespaces")["items"])
    assert DEMO_NS in expected
    # what the shell runs for `kubectl kvreset clear -n <TAB>`
    done = subprocess.run([kubectl, "__complete", "kvreset", "clear", "-n", ""], capture_output=True, text=True,
                          env=completion_env(demo, installed), timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == ":4" and sorted(lines[:-1]) == expected, (done.stdout, done.stderr)
    assert "kubectl_complete-kvreset" in done.stderr  # kubectl's own debug line: it used the helper


def test_completion_in_process_with_a_fake_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    from kubectl_kvreset import completion

    seen: list[tuple[str, str | None]] = []

    def lister(kind: str, params: dict[str, object]) -> list[str]:
        seen.append((kind, params.get("namespace")))  # type: ignore[arg-type]
        if kind == "pods":
            raise PermissionError("403")  # a refused list gives no candidates, not an error
        return {"namespaces": ["a", "b"], "deployments": ["dec", "pre"], "leaderworkersets": ["wide"]}[kind]

    def values(*words: str) -> list[str]:
        return [c.value for c in completion.complete(list(words), lister=lister)[0]]

    assert values("restart", "-n", "x", "") == ["dec", "pre", "leaderworkerset/wide"]
    assert ("deployments", "x") in seen
    assert values("clear", "lws/") == ["lws/wide"] and values("clear", "deploy/p") == ["deploy/pre"]
    assert values("clear", "pod/") == [] and values("clear", "nosuchkind/") == []
    assert values("metrics", "--namespace=") == ["a", "b"]
    assert values("clear", "-o", "") == ["table", "wide", "json", "yaml", "name", "jsonpath=", "custom-columns="]
    assert values("nosuchcommand", "") == []
    assert completion.format_cobra([completion.Candidate("x", "two\twords\nhere")], 4) == "x\ttwo words here\n:4\n"
    assert completion.main(["__completeNoDesc", "cle"]) == 0
    assert capsys.readouterr().out == "clear\nclear-fs\nclear-store\n:4\n"
