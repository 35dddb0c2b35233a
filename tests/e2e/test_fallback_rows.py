"""What a run that replaces pods reports: a restart that times out names the scheduler's reason
as clear does for the same pod; after a dev-mode or restart fallback the rows name the new pods
and the message the pod each replaces; the dev-mode warning of many owners is one line with the
command that undoes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .test_pod_states import NS, deployment, write

REASON = "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu"


def owners_pods(cluster: Any) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in cluster.live_pods():
        if p.get("owner"):
            out.setdefault(p["owner"]["name"], set()).add(p["name"])
    return out


def test_a_restart_that_times_out_names_the_schedulers_reason(sim: Any, tmp_path: Path) -> None:
    manifest = write(tmp_path, [deployment("big", replicas=2, gpus=1)])
    cluster = sim([manifest], namespace=NS, scenario={"gpus_per_node": 1})
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all")
    held = [r for r in rows if r["result"] != "emptied"]
    assert len(held) == 1 and REASON in held[0]["message"], rows
    code, rows, err = cluster.run_json("restart", "-n", NS, "deployment/big", "--timeout", "3s", timeout=60)
    assert code == 1, err
    (row,) = rows
    assert row["result"] == "timeout", row
    assert REASON in row["message"], row["message"]
    assert "phase Pending, not ready" not in row["message"]


def test_fallback_rows_name_the_new_pods_and_one_warning_undoes_dev_mode(sim: Any, tmp_path: Path) -> None:
    names = [f"m{i}" for i in range(4)]
    manifest = write(tmp_path, [deployment(n, replicas=2, dev_mode=None) for n in names])
    cluster = sim([manifest], namespace=NS)
    before = owners_pods(cluster)
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "devmode", timeout=300)
    assert code == 0, err
    after = owners_pods(cluster)
    assert len(rows) == 8
    for r in rows:
        owner = r["owner"].split("/")[1]
        assert r["pod"] in after[owner] and r["pod"] not in before[owner], r
        old = r["message"].split(";")[0]
        assert old.startswith("replaces ") and old[len("replaces "):] in before[owner], r["message"]
    assert {r["message"].split(";")[0] for r in rows} == {f"replaces {p}" for ps in before.values() for p in ps}
    warnings = [line for line in err.splitlines() if "dev mode is now on" in line]
    assert len(warnings) == 1, err
    assert warnings[0].endswith("'kubectl kvreset devmode --disable " + " ".join(f"deployment/{n}" for n in names)
                                + f" -n {NS}'"), warnings[0]
    # the command it names turns dev mode off again, and a second run resets the new pods in place
    done = cluster.run("devmode", "--disable", *[f"deployment/{n}" for n in names], "-n", NS, timeout=300)
    assert done.returncode == 0, done.stderr


def test_restart_fallback_rows_name_the_new_pods(sim: Any, tmp_path: Path) -> None:
    manifest = write(tmp_path, [deployment("r", replicas=2, dev_mode=None)])
    cluster = sim([manifest], namespace=NS)
    before = owners_pods(cluster)["r"]
    code, rows, err = cluster.run_json("clear", "-n", NS, "--all", "--fallback", "restart", timeout=300)
    assert code == 0, err
    after = owners_pods(cluster)["r"]
    assert {r["pod"] for r in rows} == after and not after & before, rows
    assert {r["message"].split(";")[0] for r in rows} == {f"replaces {p}" for p in before}
    assert all("restarted" in r["message"] for r in rows)


def test_devmode_enable_of_many_owners_prints_one_warning(sim: Any, tmp_path: Path) -> None:
    names = [f"d{i}" for i in range(5)]
    manifest = write(tmp_path, [deployment(n, dev_mode=None) for n in names])
    cluster = sim([manifest], namespace=NS)
    done = cluster.run("devmode", "--enable", "-n", NS, "--all", timeout=300)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, done.stderr
    assert warnings[0].endswith("kubectl kvreset devmode --disable "
                                + " ".join(f"deployment/{n}" for n in names) + f" -n {NS}"), warnings[0]
