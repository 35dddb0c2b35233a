"""``clear --container a`` on a pod whose two vLLM containers share one LMCache MP server: the
container left out is another user of the server, so container ``a`` is reset with
``reset_external=false`` and the server's objects survive without ``--shared-stores``."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from urllib.parse import parse_qs

import pytest

from tests.simctl import SimCluster

from .conftest import require_sandbox
from .test_mp_reset_consent import KTC, MANIFEST, NS, _l1, _pod

pytestmark = [pytest.mark.stores]


def _server(name: str, port: int) -> str:
    return textwrap.indent(textwrap.dedent(f"""\
        - name: {name}
          image: vllm/vllm-openai:v0.32.0
          command: [vllm, serve, org/model-{name}]
          args: [--port, "{port}", --kv-transfer-config, '{KTC}']
          env: [{{name: VLLM_SERVER_DEV_MODE, value: "1"}}]
        """), " " * 10)


PAIR = textwrap.dedent(f"""\
    apiVersion: apps/v1
    kind: Deployment
    metadata: {{name: pair, namespace: {NS}}}
    spec:
      replicas: 1
      selector: {{matchLabels: {{app: pair}}}}
      template:
        metadata: {{labels: {{app: pair}}}}
        spec:
          containers:
    """) + _server("a", 8000) + _server("b", 8001)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    require_sandbox()
    m = tmp_path_factory.mktemp("mpcc") / "m.yaml"
    # the MP server of test_mp_reset_consent.py without its two Deployments, and the pair
    m.write_text(MANIFEST.split("---\n" + "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: a,")[0]
                 + "---\n" + PAIR)
    scenario = {"pods": [{"match": {"namespace": NS}, "cluster_dns": True}]}
    with SimCluster([m], namespace=NS, scenario=scenario, ready_delay=0.05) as c:
        c.wait_ready()
        yield c


def test_the_left_out_container_holds_the_store_wide_reset_back(cluster: SimCluster) -> None:
    before = _l1(cluster)
    assert before > 0
    code, rows, err = cluster.run_json("clear", "deployment/pair", "--container", "a", "--yes")
    assert code == 1, (rows, err)
    pair = _pod(cluster, "pair")
    assert parse_qs(pair["ports"]["8000"]["last_reset_query"]) == {"reset_external": ["false"]}, pair["ports"]
    assert _l1(cluster) == before  # container b's objects are still there
    [row] = [r for r in rows if r.get("kind") == "CacheReset" and r.get("container") == "a"]
    assert row["result"] != "emptied" and "(container b)" in row["message"], row
    [store] = [r for r in rows if r.get("store") == "lmcache-mp"]
    assert store["result"] != "emptied" and "--shared-stores" in json.dumps(store), store
