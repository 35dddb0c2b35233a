"""The clear job from Python, without the command line: plan, run, typed outcome."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.simctl import DEMO_MANIFEST, ROOT

NS = "llm-d-demo"

SCRIPT = """
import json, sys
from kubectl_kvreset.job import Cancel, ClearOptions, Targets, connect, plan, run, select_targets

kube = connect(namespace=sys.argv[1])
scope = select_targets(kube, Targets(all=True))
the_plan = plan(scope, ClearOptions())
outcome = run(the_plan, Cancel())
print(json.dumps({
    "ports": [{"key": list(p.key), "role": p.role, "tiers": {k: list(v) for k, v in p.tiers.items()},
               "result": p.result, "emptied": p.emptied} for p in outcome.ports],
    "planned": [p.steps.actions() for p in the_plan.pods],
    "exit_code": int(outcome.exit_code), "notes": list(outcome.notes),
    "click_loaded": "click" in sys.modules,
}))
"""


def test_clear_from_python_without_click(sim) -> None:
    cluster = sim([DEMO_MANIFEST], namespace=NS)
    before = [st for pod in cluster.live_pods() for st in (pod.get("ports") or {}).values() if st.get("role") == "vllm"]
    assert before and all(st["prefix_cache_blocks"] > 0 for st in before)
    done = subprocess.run([sys.executable, "-c", SCRIPT, NS], env=cluster.env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the job never writes to stderr
    got = json.loads(done.stdout)
    assert got["click_loaded"] is False
    assert got["exit_code"] == 0, got
    assert {p["role"] for p in got["ports"]} == {"prefill", "decode"}
    assert len(got["ports"]) == len(before)
    for port in got["ports"]:
        assert port["emptied"] and port["result"] == "emptied", port
        assert port["tiers"]["gpu"] == ["emptied"]
    after = [st for pod in cluster.live_pods() for st in (pod.get("ports") or {}).values() if st.get("role") == "vllm"]
    assert after and all(st["prefix_cache_blocks"] == 0 for st in after)


VERIFY_SCRIPT = """
import json, sys
from kubectl_kvreset.job import Cancel, ClearOptions, Targets, connect, plan, run, select_targets

kube = connect(namespace=sys.argv[1])
the_plan = plan(select_targets(kube, Targets(all=True)), ClearOptions(verify=True))
outcome = run(the_plan, Cancel())
print(json.dumps({"rows": [{"verify": r["verify"], "proof": r["proof"]} for r in outcome.rows],
                  "exit_code": int(outcome.exit_code)}))
"""


def test_verify_from_python(sim) -> None:
    """``ClearOptions(verify=True)``: the same canary proof as ``clear --verify``."""
    cluster = sim([DEMO_MANIFEST], namespace=NS)
    done = subprocess.run([sys.executable, "-c", VERIFY_SCRIPT, NS], env=cluster.env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    got = json.loads(done.stdout)
    assert got["exit_code"] == 0 and got["rows"], got
    for row in got["rows"]:
        assert row["verify"] == "cold", row
        assert row["proof"][0]["control"]["cached_tokens"] > 0
        assert [p["cached_tokens"] for p in row["proof"][0]["probes"]] == [0]


ORDER_SCRIPT = """
import json, sys
from kubectl_kvreset.job import Cancel, ClearOptions, Targets, connect, plan, run, select_targets

execute = sys.modules["kubectl_kvreset.job.execute"]
calls = []
reset_route = execute.reset_route

def recorded(the_plan, pod_plan, port, route, on_busy=None):
    calls.append([pod_plan.pod.name, port.port, route])
    return reset_route(the_plan, pod_plan, port, route, on_busy)

execute.reset_route = recorded
kube = connect(namespace=sys.argv[1])
the_plan = plan(select_targets(kube, Targets(all=True)), ClearOptions(max_concurrency=1))
outcome = run(the_plan, Cancel())
print(json.dumps({"calls": calls, "routes": [list(p.routes) for p in the_plan.pods],
                  "results": [p.result for p in outcome.ports], "exit_code": int(outcome.exit_code)}))
"""


def test_every_ports_first_route_is_sent_before_the_other_routes(sim) -> None:
    # one call at a time shows the order: the prefix-cache resets (the ones that can take long)
    # first, then the other routes; each route of each port is still called exactly once
    cluster = sim([DEMO_MANIFEST], namespace=NS)
    done = subprocess.run([sys.executable, "-c", ORDER_SCRIPT, NS], env=cluster.env(), cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["exit_code"] == 0 and set(got["results"]) == {"emptied"}, got
    routes = [route for _pod, _port, route in got["calls"]]
    firsts = {p[0] for p in got["routes"] if p}
    assert firsts == {"/reset_prefix_cache"} and any(len(p) > 1 for p in got["routes"]), got["routes"]
    count = sum(1 for route in routes if route in firsts)
    assert count and set(routes[:count]) == firsts and firsts.isdisjoint(routes[count:]), routes
    assert sorted(map(tuple, got["calls"])) == sorted(set(map(tuple, got["calls"])))  # none twice
    assert len(got["calls"]) == sum(len(p) for p in got["routes"])  # one port per pod here
