"""Unit tests of the simulator's store, selectors, patches, dev-mode rule and scenario parsing (no server)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sim.__main__ import load_manifest_docs
from tests.sim.apierrors import ApiError
from tests.sim.clusterbase import expand_var_refs
from tests.sim.patches import json_patch, merge_patch, strategic_merge_patch
from tests.sim.podspecs import apply_dev_mode_to_podspec, is_vllm_container
from tests.sim.scenario import ScenarioError, parse_scenario
from tests.sim.selectors import labels_match, parse_field_selector, parse_label_selector
from tests.sim.simapikit import (
    fixture,
)
from tests.sim.store import Store


def test_label_selector_units() -> None:
    labels = {"a": "1", "b": "x"}
    assert labels_match(parse_label_selector("a=1,b in (x, y),!c,b"), labels)
    assert not labels_match(parse_label_selector("a notin (1)"), labels)
    assert labels_match(parse_label_selector("c notin (1),c!=2"), labels)
    assert not labels_match(parse_label_selector("c"), labels)
    with pytest.raises(ApiError) as ei:
        parse_label_selector("a in x")
    assert ei.value.code == 400
    assert parse_field_selector("metadata.name==x,status.phase!=Running") == [
        ("metadata.name", True, "x"), ("status.phase", False, "Running")]


def test_patch_units() -> None:
    doc: dict[str, Any] = {"spec": {"containers": [
        {"name": "a", "image": "i", "env": [{"name": "X", "value": "1"}],
         "ports": [{"containerPort": 80, "name": "h"}]},
        {"name": "b", "image": "j"}], "list": [1, 2]}}
    out = strategic_merge_patch(doc, {"spec": {"containers": [
        {"name": "a", "env": [{"name": "Y", "value": "2"}, {"name": "X", "$patch": "delete"}],
         "ports": [{"containerPort": 80, "name": "web"}]},
        {"name": "b", "$patch": "delete"}, {"name": "c", "image": "k"}], "list": [3]}})
    cs = out["spec"]["containers"]
    assert [c["name"] for c in cs] == ["a", "c"]
    assert cs[0]["env"] == [{"name": "Y", "value": "2"}] and cs[0]["image"] == "i"
    assert cs[0]["ports"] == [{"containerPort": 80, "name": "web"}]
    assert out["spec"]["list"] == [3]
    rep = strategic_merge_patch(doc, {"spec": {"containers": [{"$patch": "replace"},
                                                              {"name": "z"}]}})
    assert rep["spec"]["containers"] == [{"name": "z"}]
    rep = strategic_merge_patch(doc, {"spec": {"$patch": "replace", "x": 1}})
    assert rep["spec"] == {"x": 1}
    assert doc["spec"]["containers"][1]["name"] == "b"  # input untouched
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None}, "l": [2]}) == \
        {"a": {"c": 2}, "l": [2]}
    assert json_patch({"a": [1, 2]}, [{"op": "add", "path": "/a/-", "value": 3},
                                      {"op": "remove", "path": "/a/0"},
                                      {"op": "copy", "from": "/a", "path": "/b"}]) == \
        {"a": [2, 3], "b": [2, 3]}


def test_store_generation_and_rv() -> None:
    s = Store()
    t = s.types.lookup("apps", "v1", "deployments")
    assert t is not None
    d = s.create(t, {"metadata": {"name": "d"}, "spec": {"replicas": 1}}, "ns")
    assert d["metadata"]["generation"] == 1 and d["kind"] == "Deployment"
    d2 = s.patch(t, "ns", "d", "application/merge-patch+json", {"spec": {"replicas": 2}})
    assert d2["metadata"]["generation"] == 2
    assert int(d2["metadata"]["resourceVersion"]) > int(d["metadata"]["resourceVersion"])
    d3 = s.patch(t, "ns", "d", "application/merge-patch+json", {"metadata": {"labels": {"a": "b"}}})
    assert d3["metadata"]["generation"] == 2
    gt = s.types.ensure("example.com/v1", "Policy")
    assert gt.plural == "policies" and gt.strategic is False


def test_dev_mode_rule_on_fixtures() -> None:
    docs = load_manifest_docs([str(fixture("02")), str(fixture("03"))])
    seen = []
    for d in docs:
        if d["kind"] != "Deployment":
            continue
        spec = d["spec"]["template"]["spec"]
        for c in spec["containers"]:
            seen.append((c["name"], is_vllm_container(c)))
        for c in spec.get("initContainers") or []:
            assert not is_vllm_container(c)
        apply_dev_mode_to_podspec(spec, "invalid")
        vc = [c for c in spec["containers"] if is_vllm_container(c)]
        for c in vc:
            assert {"name": "VLLM_SERVER_DEV_MODE", "value": "true"} in c["env"]
        apply_dev_mode_to_podspec(spec, "off")
        assert all(e["name"] != "VLLM_SERVER_DEV_MODE" for c in vc for e in c["env"])
    assert ("modelserver", True) in seen and ("vllm", True) in seen
    assert ("epp", False) in seen


def test_expand_var_refs() -> None:
    assert expand_var_refs("$(A)-$(B)-$$(A)-$(", {"A": "1"}) == "1-$(B)-$(A)-$("


def test_scenario_parsing() -> None:
    sc = parse_scenario({"replicas": {"lws/x": 2, "y": 1}, "pods": [{"reset_delay_ms": 5}],
                         "users": ["bob"]})
    assert sc.replicas == {("leaderworkerset", "x"): 2, ("deployment", "y"): 1}
    assert sc.pod_settings(("deployment", "y"), 0, "ns", "p") == ({"reset_delay_ms": 5}, None)
    assert sc.users == ["bob"]
    with pytest.raises(ScenarioError):
        parse_scenario({"pods": [{"network": "flaky"}]})
    with pytest.raises(ScenarioError):
        parse_scenario({"bogus": 1})
