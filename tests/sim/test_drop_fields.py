"""The scenario's ``drop_fields`` fault: served objects lack the named fields, storage does not."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator

import pytest

from tests.sim.__main__ import Simulator
from tests.sim.scenario import ScenarioError, parse_scenario, split_field_path
from tests.sim.simapikit import MANIFEST, STANDIN, Client

DROP = {"deployments": ["status.updatedReplicas", "spec.selector.matchLabels",
                        "metadata.labels.app\\.kubernetes\\.io/part-of"]}


def test_split_field_path() -> None:
    assert split_field_path("status.updatedReplicas") == ("status", "updatedReplicas")
    assert split_field_path("metadata.labels.llm-d\\.ai/role") == ("metadata", "labels",
                                                                   "llm-d.ai/role")
    with pytest.raises(ScenarioError):
        split_field_path("status..x")
    with pytest.raises(ScenarioError):
        parse_scenario({"drop_fields": {"deployments": "status.replicas"}})
    with pytest.raises(ScenarioError):
        parse_scenario({"drop_fields": ["status.replicas"]})


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulator]:
    d = tmp_path_factory.mktemp("drop")
    (d / "m.yaml").write_text(MANIFEST)
    s = Simulator([str(d / "m.yaml")], namespace="ns1",
                  scenario=parse_scenario({"drop_fields": DROP}), state_dir=d / "state",
                  ready_delay=0.05, backend=STANDIN)
    s.start()
    yield s
    s.stop()


def test_served_objects_lack_the_fields(broken: Simulator) -> None:
    api = Client(broken)
    code, dep, _ = api.call("GET", "/apis/apps/v1/namespaces/ns1/deployments/web")
    assert code == 200
    assert "updatedReplicas" not in dep["status"] and dep["status"]["replicas"] == 2
    assert "matchLabels" not in dep["spec"]["selector"]
    code, lst, _ = api.call("GET", "/apis/apps/v1/namespaces/ns1/deployments")
    assert code == 200 and lst["items"]
    assert all("updatedReplicas" not in d["status"] for d in lst["items"])
    # a write answers with the stripped object too; the store keeps every field
    code, patched, _ = api.call("PATCH", "/apis/apps/v1/namespaces/ns1/deployments/web",
                                {"metadata": {"annotations": {"x": "1"}}},
                                ctype="application/merge-patch+json")
    assert code == 200 and "matchLabels" not in patched["spec"]["selector"]
    rtype = broken.store.types.lookup("apps", "v1", "deployments")
    assert rtype is not None
    stored = broken.store.get(rtype, "ns1", "web")
    assert stored["spec"]["selector"]["matchLabels"] == {"app": "web"}
    assert stored["status"]["updatedReplicas"] == 2
    # other resources are untouched
    code, pods, _ = api.call("GET", "/api/v1/namespaces/ns1/pods?labelSelector=app%3Dweb")
    assert code == 200 and len(pods["items"]) == 2 and pods["items"][0]["status"]["phase"]


def test_watch_lines_are_stripped(broken: Simulator) -> None:
    ctx = ssl.create_default_context(cadata=broken.server.ca_pem().decode())
    req = urllib.request.Request(broken.server.url +
                                 "/apis/apps/v1/namespaces/ns1/deployments?watch=true"
                                 "&timeoutSeconds=1",
                                 headers={"Authorization": f"Bearer {broken.server.admin_token}"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
        first = json.loads(r.readline())
    assert first["type"] == "ADDED" and "updatedReplicas" not in first["object"]["status"]
