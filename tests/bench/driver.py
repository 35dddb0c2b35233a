"""Benchmark of kubectl-kvreset against kubectl, the manual procedure and its own floor (``make bench``).

Prints first the goals table (the goals of docs/performance.md: each measure, its goal and
met/missed), then the details. Measures, on the simulated cluster (tests/sim) loaded with
``bench-deployment.yaml`` (the simulator sets ``TCP_NODELAY`` on its connections, as a real API
server does, so a keep-alive answer never waits for a delayed ACK):

- the floor of one ``clear --all``: ``floor_client.py`` (standard library only: interpreter
  start, one TLS connection, one pod list, one reset), median of repeated runs;
- ``clear --all --verify`` beside ``clear --all`` at 64 pods (each on a fresh cluster; goal
  at most 2x);
- the first run after install: ``--version`` with an empty extraction directory (``SHIV_ROOT``);
- the zipapp's size, and what importing the ``kubernetes`` client costs (the parts the plugin
  imports against the whole package);
- CPU per pod (the plugin's own process: user + system time from ``wait4``), TLS handshakes per
  run (``/sim/v1/state`` ``tls_handshakes``) against the pool size (``--max-concurrency``);

- start-up of the built zipapp (``--help``, ``--version``) run through its shebang and by the
  interpreter the shebang resolves to, against ``kubectl version --client``: medians of
  repeated runs (one warm-up run first, which also extracts the zipapp);
- ``clear --all`` on N pods (scenario replicas; every fake vLLM sleeping a fixed time per reset)
  against the manual procedure ``seed-procedure.sh`` (kept beside the repository,
  ``tests/beside.py``: kubectl get, then one kubectl exec curl per pod), each run on a fresh
  cluster so every run starts with warm caches: wall time and ratio;
- API requests per pod (``/sim/v1/state`` ``api_requests``, counted during the run) and the
  plugin's peak memory (the child's RSS high-water mark from ``wait4``'s rusage, KiB on Linux).

Prints the tables on stdout (progress on stderr) and the command that reproduces it. A missed
goal is printed as missed with its figure.

The plugin's clusters run without the sandbox (``--no-sandbox``: the bench Deployment's
literal ``vllm serve`` argv is read, nothing is run, so 1024 pods start in seconds); the
procedure's clusters run with it where bubblewrap works, as ``kubectl exec`` needs it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests import beside
from tests.simctl import ROOT, SimCluster, zipapp_path

BENCH_MANIFEST = Path(__file__).resolve().parent / "bench-deployment.yaml"
#: the manual procedure (beside the repository; ``KVRESET_SEED_PROCEDURE`` names another copy)
SEED_PROCEDURE = Path(os.environ.get("KVRESET_SEED_PROCEDURE") or beside.SEED_PROCEDURE)
NAMESPACE = "bench"
DEPLOYMENT = "bench-vllm"
SELECTOR = "app.kubernetes.io/name=bench-vllm"
PORT = 8000
REPRODUCE = "make bench   (or: .venv/bin/python -m tests.bench)"

FLOOR_CLIENT = Path(__file__).resolve().parent / "floor_client.py"
POOL = 64  # --max-concurrency's default: the pool's size

# the goals (docs/performance.md)
TARGET_SPEEDUP_64 = 40.0      # clear --all at 64 pods at least 40x faster than the procedure
TARGET_IDEAL_RATIO_64 = 2.0   # ... and within 2x of the floor measured in the same run
TARGET_CPU_PER_POD_MS = 1.0   # plugin CPU per pod (its own process, 256 and 1024 pods)
TARGET_EXTRA_REQUESTS = 0.1   # API requests per pod beyond one per reset route
TARGET_HELP_RATIO = 2.0       # --help by the interpreter within 2x kubectl's client start-up
TARGET_PEAK_MIB = 64.0        # peak memory at 1024 pods
TARGET_COLD_S = 1.5           # first run after install (empty extraction directory)
TARGET_VERIFY_RATIO_64 = 2.0  # clear --verify within 2x of clear at 64 pods


def log(msg: str) -> None:
    """Progress line on stderr."""
    print(f"bench: {msg}", file=sys.stderr, flush=True)


def timed(argv: Sequence[str], env: dict[str, str] | None = None) -> float:
    """Wall time in seconds of one run of ``argv`` (output discarded). Raises
    ``RuntimeError`` when it exits non-zero."""
    t0 = time.perf_counter()
    done = subprocess.run(list(argv), env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, timeout=120)
    dt = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]!r}")
    return dt


def median_time(argv: Sequence[str], runs: int, env: dict[str, str] | None = None) -> float:
    """Median wall time (s) of ``runs`` runs after one warm-up run."""
    timed(argv, env)
    return statistics.median(timed(argv, env) for _ in range(runs))


def real_interpreter() -> str:
    """The interpreter ``/usr/bin/env python3`` ends up running (``sys.executable`` of it), so
    that a version-manager shim on PATH is bypassed."""
    out = subprocess.run(["/usr/bin/env", "python3", "-c", "import sys; print(sys.executable)"],
                         capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.strip()


@dataclass
class PluginRun:
    """One ``clear --all`` run: wall time (s), exit code, peak RSS (KiB), API requests made
    (verb resource -> count) and how many pods were reset."""

    wall: float
    code: int
    maxrss_kib: int
    requests: dict[str, int]
    pods_reset: int
    rows: int
    failed: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    handshakes: int = 0


@dataclass
class SeedRun:
    """One seed-procedure run: wall time (s), exit code, API requests, pods reset."""

    wall: float
    code: int
    requests: dict[str, int]
    pods_reset: int


@dataclass
class Results:
    """Everything measured; ``table()`` renders it."""

    runs: int
    reset_delay_ms: int
    kubectl: str | None
    interpreter: str
    shebang: str
    startup: dict[str, float] = field(default_factory=dict)
    plugin: dict[int, list[PluginRun]] = field(default_factory=dict)
    seed: dict[int, SeedRun | str] = field(default_factory=dict)
    ideal_64: dict[str, float] = field(default_factory=dict)
    elapsed: float = 0.0
    floor: float = 0.0
    cold: float = 0.0
    zipapp_bytes: int = 0
    imports: dict[str, float] = field(default_factory=dict)
    verify_64: list[PluginRun] = field(default_factory=list)


def start_cluster(size: int, delay_ms: int, *, sandbox: bool = True) -> SimCluster:
    """A fresh simulated cluster with ``size`` bench pods, each reset taking ``delay_ms``;
    ``sandbox`` False reads the pods' commands instead of running them."""
    cluster = SimCluster([BENCH_MANIFEST], namespace=NAMESPACE, ready_delay=0.05,
                         scenario={"replicas": {f"deployment/{DEPLOYMENT}": size},
                                   "pods": [{"reset_delay_ms": delay_ms}]},
                         extra_args=() if sandbox else ("--no-sandbox",))
    try:
        cluster.wait_ready(timeout=180)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _reset_counts(cluster: SimCluster) -> dict[str, int]:
    return {p["name"]: p["ports"].get(str(PORT), {}).get("reset_calls", 0)
            for p in cluster.live_pods() if p["namespace"] == NAMESPACE}


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    d = Counter(after)
    d.subtract(before)
    return {k: v for k, v in sorted(d.items()) if v}


def run_plugin(cluster: SimCluster, *extra: str) -> PluginRun:
    """Run ``clear --all -n bench -o json`` (and ``extra`` flags: ``--verify``) through the
    zipapp's shebang, as a user would; peak RSS from ``os.wait4`` (the plugin's own process,
    not the simulator's). A row counts as failed unless ``emptied`` (and ``cold`` when verified)."""
    before_state = cluster.state()
    before_req = before_state["api_requests"]
    before = _reset_counts(cluster)
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(zipapp_path()), "clear", "--all", "-n", NAMESPACE,
                                 "-o", "json", *extra], env=cluster.env(), stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errtext = out.read(), err.read()
    rows = json.loads(text) if text.strip() else []
    if proc.returncode != 0:
        log(f"clear --all exited {proc.returncode}: {errtext[-500:]}")
    after_state = cluster.state()
    after = _reset_counts(cluster)
    reset = sum(1 for p, n in after.items() if n > before.get(p, 0))
    req = _delta(after_state["api_requests"], before_req)
    # the state queries each open one connection; the second one's is in its own count
    shakes = int(after_state["tls_handshakes"]) - int(before_state["tls_handshakes"]) - 1
    # _reset_counts queried the state too (one connection each)
    shakes -= 1
    failed = [f"{r.get('pod')}:{r.get('port')} {r.get('result')}: {r.get('message')}"
              for r in rows if r.get("result") != "emptied" or r.get("verify", "cold") != "cold"]
    return PluginRun(wall, proc.returncode, int(usage.ru_maxrss), req, reset, len(rows), failed,
                     cpu_s=usage.ru_utime + usage.ru_stime, handshakes=shakes)


def run_seed(cluster: SimCluster, cache_dir: Path) -> SeedRun:
    """Run ``seed-procedure.sh bench SELECTOR 8000`` with kubectl against ``cluster``."""
    before_req = cluster.state()["api_requests"]
    before = _reset_counts(cluster)
    env = cluster.env()
    env["KUBECACHEDIR"] = str(cache_dir)
    t0 = time.perf_counter()
    done = subprocess.run(["bash", str(SEED_PROCEDURE), NAMESPACE, SELECTOR, str(PORT)],
                          env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=3600)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        log(f"seed procedure exited {done.returncode}: {done.stderr[-500:]}")
    after = _reset_counts(cluster)
    reset = sum(1 for p, n in after.items() if n > before.get(p, 0))
    req = _delta(cluster.state()["api_requests"], before_req)
    return SeedRun(wall, done.returncode, req, reset)


def measure_ideal(cluster: SimCluster, startup: float, reps: int = 5) -> dict[str, float]:
    """The floor of one ``clear --all``: start-up + one pod list + one reset, the list and the
    reset measured on ``cluster`` (new TLS connection each, like a fresh process; medians)."""
    path = f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={SELECTOR}"
    lists = []
    for _ in range(reps):
        t0 = time.perf_counter()
        cluster.api(path)
        lists.append(time.perf_counter() - t0)
    pod = next(p["name"] for p in cluster.live_pods() if p["namespace"] == NAMESPACE)
    resets = []
    for _ in range(reps):
        t0 = time.perf_counter()
        cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}:{PORT}/proxy/reset_prefix_cache",
                    method="POST")
        resets.append(time.perf_counter() - t0)
    lst, rst = statistics.median(lists), statistics.median(resets)
    return {"startup": startup, "list": lst, "reset": rst, "total": startup + lst + rst}


def shebang_launcher(shebang: str) -> list[str]:
    """The argv prefix a ``#!`` line runs a script with (``#!/usr/bin/env python3`` ->
    ``["/usr/bin/env", "python3"]``), as the kernel splits it: the interpreter path and at most
    one argument."""
    interpreter, _, argument = shebang.removeprefix("#!").strip().partition(" ")
    return [interpreter, argument.strip()] if argument.strip() else [interpreter]


def measure_floor(cluster: SimCluster, launcher: Sequence[str], runs: int) -> float:
    """Median wall time (s) of ``floor_client.py`` against ``cluster`` (interpreter start, one
    TLS connection, one pod list, one reset), after one warm-up run. ``launcher`` starts it as
    the zipapp's shebang starts the plugin (a version manager's shim on PATH, if any, is then
    in both figures; ``--help`` and ``--version`` are also timed by the bare interpreter)."""
    argv = [*launcher, str(FLOOR_CLIENT), cluster.server, cluster.admin_token, str(cluster.ca), NAMESPACE,
            SELECTOR, str(PORT)]
    return median_time(argv, runs, cluster.env())


def measure_cold(app: Path, runs: int) -> float:
    """Median wall time (s) of ``--version`` with an empty extraction directory each time (the
    first run after an install: unpacking included; the byte code ships in the zipapp)."""
    times = []
    for _ in range(runs):
        root = Path(tempfile.mkdtemp(prefix="kvreset-bench-cold-"))
        try:
            times.append(timed([str(app), "--version"], {**os.environ, "SHIV_ROOT": str(root)}))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return statistics.median(times)


IMPORT_PROBES = {
    "parts": "from kubectl_kvreset import kube; kube.client_parts()",
    "whole": "import kubernetes",
}


def measure_imports(runs: int) -> dict[str, float]:
    """Median seconds of importing the ``kubernetes`` client in a fresh interpreter: the parts
    the plugin imports (``kube.client_parts``) and the whole package (the pinned version)."""
    out = {}
    for key, stmt in IMPORT_PROBES.items():
        code = f"import time; t = time.perf_counter(); {stmt}; print(time.perf_counter() - t)"
        samples = []
        for _ in range(runs + 1):
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                                  cwd=ROOT)
            if done.returncode != 0:
                raise RuntimeError(f"import probe {key} failed: {done.stderr[-300:]}")
            samples.append(float(done.stdout.strip()))
        out[key] = statistics.median(samples[1:])
    return out


def _s(x: float) -> str:
    return f"{x:.3f} s" if x < 10 else f"{x:.1f} s"


def _verdict(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


def _per_pod(req: dict[str, int], pods: int) -> str:
    total = sum(req.values())
    parts = ", ".join(f"{k} {v}" for k, v in req.items())
    return f"{total / pods:.2f} ({parts})"


def table(r: Results) -> str:
    """One markdown table of every figure, targets beside them."""
    rows: list[tuple[str, str, str, str, str]] = []
    kc = r.startup.get("kubectl")
    base = f"`kubectl version --client` {_s(kc)}" if kc else "kubectl absent"
    for flag in ("--help", "--version"):
        for how, key in (("through its shebang", "shebang"), ("by the interpreter", "interp")):
            t = r.startup[f"{flag} {key}"]
            ratio = f"{t / kc:.1f}x" if kc else "-"
            target = "-"
            if flag == "--help" and key == "interp":
                target = f"<= {TARGET_HELP_RATIO:g}x: " + (_verdict(t / kc <= TARGET_HELP_RATIO)
                                                            if kc else "not measured")
            rows.append((f"start-up `{flag}` {how} (median of {r.runs})", _s(t), base, ratio,
                         target))
    for size in sorted(r.plugin):
        runs = r.plugin[size]
        wall = statistics.median(x.wall for x in runs)
        seed = r.seed.get(size, "not run")
        label = f"`clear --all`, {size} pods (median of {len(runs)})"
        if isinstance(seed, SeedRun):
            speed = seed.wall / wall
            target = f">= {TARGET_SPEEDUP_64:g}x: {_verdict(speed >= TARGET_SPEEDUP_64)}" \
                if size == 64 else "-"
            rows.append((label, _s(wall), f"seed-procedure.sh {_s(seed.wall)} "
                         f"({seed.wall / size:.3f} s/pod)", f"{speed:.1f}x faster", target))
        else:
            target = f">= {TARGET_SPEEDUP_64:g}x: not measured" if size == 64 else "-"
            rows.append((label, _s(wall), f"seed-procedure.sh {seed}", "-", target))
        if size == 64 and r.ideal_64:
            i = r.ideal_64
            floor_ratio = wall / i["total"]
            rows.append(("`clear --all`, 64 pods vs its floor", _s(wall),
                         f"start-up {_s(i['startup'])} + pod list {_s(i['list'])} + one reset "
                         f"{_s(i['reset'])} = {_s(i['total'])}", f"{floor_ratio:.1f}x",
                         f"<= {TARGET_IDEAL_RATIO_64:g}x: "
                         f"{_verdict(floor_ratio <= TARGET_IDEAL_RATIO_64)}"))
    big = max(r.plugin) if r.plugin else None
    if big is not None:
        run = max(r.plugin[big], key=lambda x: x.maxrss_kib)
        big_seed = r.seed.get(big)
        seed_req = _per_pod(big_seed.requests, big) if isinstance(big_seed, SeedRun) else "-"
        rows.append((f"API requests per pod, {big} pods", _per_pod(run.requests, big),
                     f"seed-procedure.sh {seed_req}", "-", "-"))
        mib = run.maxrss_kib / 1024
        target = f"<= {TARGET_PEAK_MIB:g} MiB: {_verdict(mib <= TARGET_PEAK_MIB)}" \
            if big == 1024 else "-"
        rows.append((f"peak memory (RSS high-water mark), {big} pods", f"{mib:.1f} MiB", "-",
                     "-", target))
    head = ("measure", "kubectl-kvreset", "baseline", "ratio", "target")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _goal(ok: bool | None) -> str:
    return "not measured" if ok is None else _verdict(ok)


def goals(r: Results) -> str:
    """The goals table of docs/performance.md: one row per goal with its figure, the goal and met/missed."""
    rows: list[tuple[str, str, str, str]] = []
    wall64 = statistics.median(x.wall for x in r.plugin[64]) if r.plugin.get(64) else None
    if wall64 is not None and r.verify_64:
        v64 = statistics.median(x.wall for x in r.verify_64)
        rows.append(("clear --verify beside clear at 64 pods", f"{_s(v64)} vs {_s(wall64)} = {v64 / wall64:.1f}x",
                     f"<= {TARGET_VERIFY_RATIO_64:g}x", _goal(v64 / wall64 <= TARGET_VERIFY_RATIO_64)))
    if wall64 is not None and r.floor:
        ratio = wall64 / r.floor
        rows.append(("`clear --all`, 64 pods, vs the floor measured in the same run",
                     f"{_s(wall64)} vs {_s(r.floor)} = {ratio:.1f}x", f"<= {TARGET_IDEAL_RATIO_64:g}x",
                     _goal(ratio <= TARGET_IDEAL_RATIO_64)))
    seed64 = r.seed.get(64)
    if wall64 is not None and isinstance(seed64, SeedRun):
        speed = seed64.wall / wall64
        rows.append(("`clear --all`, 64 pods, vs the manual procedure",
                     f"{_s(seed64.wall)} / {_s(wall64)} = {speed:.1f}x", f">= {TARGET_SPEEDUP_64:g}x",
                     _goal(speed >= TARGET_SPEEDUP_64)))
    else:
        rows.append(("`clear --all`, 64 pods, vs the manual procedure", f"procedure {seed64 or 'not run'}",
                     f">= {TARGET_SPEEDUP_64:g}x", "not measured"))
    cpu = {n: statistics.median(x.cpu_s for x in runs) for n, runs in r.plugin.items() if runs}
    per = [f"{cpu[n] / n * 1000:.2f} ms at {n}" for n in (256, 1024) if n in cpu]
    if 256 in cpu and 1024 in cpu:
        slope = (cpu[1024] - cpu[256]) / (1024 - 256) * 1000
        per.append(f"{slope:.2f} ms per added pod (256 -> 1024)")
        ok: bool | None = slope <= TARGET_CPU_PER_POD_MS
    else:
        ok = None
    rows.append(("plugin CPU per pod (its own process)", "; ".join(per) or "not measured",
                 f"<= {TARGET_CPU_PER_POD_MS:g} ms", _goal(ok)))
    big = max(r.plugin) if r.plugin else None
    if big is not None:
        run = r.plugin[big][0]
        resets = run.requests.get("create pods/proxy", 0)
        extra = (sum(run.requests.values()) - resets) / big
        rows.append((f"API requests per pod beyond the reset routes ({big} pods)",
                     f"{extra:.2f} ({_per_pod(run.requests, big)} in all)", f"<= {TARGET_EXTRA_REQUESTS:g}",
                     _goal(extra <= TARGET_EXTRA_REQUESTS)))
        most = max(x.handshakes for runs in r.plugin.values() for x in runs)
        by_size = ", ".join(f"{n} pods: {max(x.handshakes for x in r.plugin[n])}" for n in sorted(r.plugin))
        rows.append(("TLS handshakes per run", f"at most {most} ({by_size})", f"<= the pool size ({POOL})",
                     _goal(most <= POOL)))
    if 1024 in r.plugin:
        mib = max(x.maxrss_kib for x in r.plugin[1024]) / 1024
        rows.append(("peak memory at 1024 pods", f"{mib:.1f} MiB", f"<= {TARGET_PEAK_MIB:g} MiB",
                     _goal(mib <= TARGET_PEAK_MIB)))
    else:
        rows.append(("peak memory at 1024 pods", "not measured", f"<= {TARGET_PEAK_MIB:g} MiB", "not measured"))
    kc = r.startup.get("kubectl")
    t = r.startup.get("--help interp")
    if kc and t:
        rows.append(("`--help` by the interpreter vs `kubectl version --client`",
                     f"{_s(t)} vs {_s(kc)} = {t / kc:.1f}x", f"<= {TARGET_HELP_RATIO:g}x",
                     _goal(t / kc <= TARGET_HELP_RATIO)))
    else:
        rows.append(("`--help` by the interpreter vs `kubectl version --client`", "kubectl absent",
                     f"<= {TARGET_HELP_RATIO:g}x", "not measured"))
    rows.append(("first run after install (empty extraction directory)", _s(r.cold) if r.cold else "not measured",
                 f"<= {TARGET_COLD_S:g} s", _goal(r.cold <= TARGET_COLD_S if r.cold else None)))
    rows.append(("zipapp size", f"{r.zipapp_bytes / 2**20:.1f} MiB", "-", "-"))
    if r.imports:
        rows.append(("import of the `kubernetes` client (pinned version)",
                     f"{r.imports['parts'] * 1000:.0f} ms for the parts used vs {r.imports['whole'] * 1000:.0f} ms "
                     "for the whole package", "-", "-"))
    head = ("goal", "measured", "target", "verdict")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def describe(r: Results) -> str:
    """The conditions of the run (one paragraph under the table)."""
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, Python "
            f"{platform.python_version()} ({r.interpreter}; shebang `{r.shebang}`), "
            f"kubectl {r.kubectl or 'absent'}; simulated cluster (TCP_NODELAY set), every reset "
            f"taking {r.reset_delay_ms} ms; a fresh cluster per `clear`/procedure run (the plugin's "
            f"without the sandbox); total {r.elapsed:.0f} s.")


def check_plugin_run(run: PluginRun, size: int) -> None:
    """A run that did not reset every pod is not a measurement: raise ``RuntimeError``."""
    if run.code != 0 or run.pods_reset != size or run.rows != size:
        raise RuntimeError(f"clear --all on {size} pods: exit {run.code}, {run.rows} rows, "
                           f"{run.pods_reset} pods reset; not emptied: {run.failed[:5]}")


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns the exit status (0, or 1 when a run failed)."""
    p = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="8,64,256,1024", help="pod counts (default 8,64,256,1024)")
    p.add_argument("--seed-sizes", default="8,64", help="pod counts the procedure runs at (default 8,64)")
    p.add_argument("--runs", type=int, default=15, help="start-up runs per command (median)")
    p.add_argument("--clear-runs", type=int, default=3,
                   help="clear --all runs per size up to 256 pods, each on a fresh cluster (median); "
                        "larger sizes run once")
    p.add_argument("--reset-delay-ms", type=int, default=50, help="time each reset takes")
    p.add_argument("--budget", type=float, default=480.0,
                   help="seconds the whole bench may take; the seed procedure on the largest "
                        "size runs only if its estimate fits (default 480)")
    p.add_argument("--no-seed", action="store_true", help="skip the seed procedure")
    p.add_argument("--json", metavar="FILE", help="also write the raw figures as JSON")
    args = p.parse_args(argv)
    sizes = sorted(int(x) for x in args.sizes.split(","))
    t_start = time.monotonic()
    app = zipapp_path()
    if not app.exists():
        print(f"bench: {app} is missing: run 'make build'", file=sys.stderr)
        return 2
    # a private extraction root: other builds of the plugin on this machine (other checkouts)
    # neither slow the runs down nor clean this build's extraction away
    own_root = None
    if not os.environ.get("SHIV_ROOT"):
        own_root = Path(tempfile.mkdtemp(prefix="kvreset-bench-shiv-"))
        os.environ["SHIV_ROOT"] = str(own_root)
    try:
        return _run(args, sizes, t_start, app)
    finally:
        if own_root is not None:
            shutil.rmtree(own_root, ignore_errors=True)


def _run(args: argparse.Namespace, sizes: list[int], t_start: float, app: Path) -> int:
    kubectl = shutil.which("kubectl")
    interp = real_interpreter()
    shebang = app.read_bytes().split(b"\n", 1)[0].decode(errors="replace")
    kc_version = None
    if kubectl:
        kc_version = subprocess.run([kubectl, "version", "--client"], capture_output=True,
                                    text=True, timeout=60).stdout.split("\n")[0].split(":")[-1]
    r = Results(args.runs, args.reset_delay_ms, (kc_version or "").strip() or None, interp,
                shebang)

    log(f"start-up, {args.runs} runs each")
    env = dict(os.environ)
    for flag in ("--help", "--version"):
        r.startup[f"{flag} shebang"] = median_time([str(app), flag], args.runs, env)
        r.startup[f"{flag} interp"] = median_time([interp, str(app), flag], args.runs, env)
    if kubectl:
        r.startup["kubectl"] = median_time([kubectl, "version", "--client"], args.runs, env)
    r.zipapp_bytes = app.stat().st_size
    log("first run after install (empty extraction directory), 3 runs")
    r.cold = measure_cold(app, 3)
    log("import cost of the kubernetes client")
    r.imports = measure_imports(5)

    for size in sizes:
        r.plugin[size] = []
        count = args.clear_runs if size <= 256 else 1
        for i in range(count):
            log(f"clear --all on {size} pods, run {i + 1}/{count}")
            cluster = start_cluster(size, args.reset_delay_ms, sandbox=False)
            try:
                run = run_plugin(cluster)
                check_plugin_run(run, size)
                r.plugin[size].append(run)
                if size == 64 and i == 0:
                    r.ideal_64 = measure_ideal(cluster, r.startup["--help shebang"])
                    r.floor = measure_floor(cluster, shebang_launcher(shebang), min(args.runs, 7))
            finally:
                cluster.stop()
            if size == 64:  # the same, proved: a salted canary per pod and engine
                log(f"clear --all --verify on {size} pods, run {i + 1}/{count}")
                cluster = start_cluster(size, args.reset_delay_ms, sandbox=False)
                try:
                    vrun = run_plugin(cluster, "--verify")
                    check_plugin_run(vrun, size)
                    r.verify_64.append(vrun)
                finally:
                    cluster.stop()

    if args.no_seed:
        r.seed = {s: "not run (--no-seed)" for s in sizes}
    elif not kubectl:
        r.seed = {s: "not run: kubectl absent" for s in sizes}
    elif not SEED_PROCEDURE.is_file():
        r.seed = {s: f"not run: {SEED_PROCEDURE} absent" for s in sizes}
    else:
        per_pod: float | None = None
        cache = Path(tempfile.mkdtemp(prefix="kvreset-bench-kubectl-"))
        try:
            for size in sorted(int(x) for x in args.seed_sizes.split(",") if x):
                if per_pod is not None:
                    est = per_pod * size
                    left = args.budget - (time.monotonic() - t_start)
                    if est > left:
                        r.seed[size] = f"not run: {est:.0f} s estimated ({per_pod:.3f} s/pod)"
                        continue
                log(f"seed-procedure.sh on {size} pods")
                cluster = start_cluster(size, args.reset_delay_ms)
                try:
                    seed = run_seed(cluster, cache)
                finally:
                    cluster.stop()
                if seed.code != 0 or seed.pods_reset != size:
                    raise RuntimeError(f"seed procedure on {size} pods: exit {seed.code}, "
                                       f"{seed.pods_reset} pods reset")
                r.seed[size] = seed
                per_pod = seed.wall / size
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    r.elapsed = time.monotonic() - t_start

    print(goals(r))
    print()
    print(table(r))
    print()
    print(describe(r))
    print(f"Reproduce: {REPRODUCE}")
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(r), indent=2, default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    os.chdir(ROOT)
    sys.exit(main())
