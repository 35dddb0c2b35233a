"""The llm-d SGLang fixtures (tests/fixtures/llm-d-sglang: P/D disaggregation, HiCache with the
file backend on a PVC, HiCache on the Mooncake store): every SGLang pod of them is found as an
inference pod, with its role and the port its server listens on. The SGLang engine
(kubectl_kvreset/engines/sglang) reads each: engine, role, port (a decode pod's behind the routing
sidecar) and tiers; where the flags hide behind a script's ``"$@"``, no port and a note."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from kubectl_kvreset.otherpods import describe_other_containers
from kubectl_kvreset.pods import describe_pod_containers

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "llm-d-sglang"

#: (fixture, owner, role) -> (container, API port, the sidecar's front port or None,
#: the tiers as (kind, store or tier type) pairs the SGLang engine should read). The Mooncake
#: wrapper sources a file before ``exec ... "$@"``: that file may reset ``"$@"``, so the shell
#: reader does not follow the container's args and the port is not read (None).
EXPECTED: Mapping[tuple[str, str, str | None],
                  tuple[str, int | None, int | None, tuple[tuple[str, str | None], ...]]] = {
    ("pd-disaggregation.yaml", "pd-sglang-prefill", "prefill"): ("modelserver", 8000, None, (("gpu", None),)),
    ("pd-disaggregation.yaml", "pd-sglang-decode", "decode"): ("modelserver", 8200, 8000, (("gpu", None),)),
    ("tiered-hicache-file.yaml", "tiered-sglang-decode", "decode"): (
        "modelserver", 8000, None, (("gpu", None), ("cpu", None), ("shared", "hicache-file"))),
    # the flags are hidden behind "$@" after a sourced file: no port, and a note says why
    ("tiered-hicache-mooncake.yaml", "tiered-sglang-mooncake", "decode"): ("modelserver", None, None, (("gpu", None),)),
}


def _templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(owner name, pod template) of a Deployment, a LeaderWorkerSet or each role of a
    DisaggregatedSet (named ``<set>-<role>``)."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "DisaggregatedSet":
        for role in spec.get("roles") or []:
            lws = role["spec"]["leaderWorkerTemplate"]
            yield f"{doc['metadata']['name']}-{role['name']}", lws.get("leaderTemplate") or lws["workerTemplate"]
    elif doc.get("kind") == "Deployment":
        yield doc["metadata"]["name"], spec["template"]
    elif doc.get("kind") == "LeaderWorkerSet":
        yield doc["metadata"]["name"], spec["leaderWorkerTemplate"]["workerTemplate"]


def _pods() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(fixture file, owner, pod object) for every pod template of the fixtures, as the API would
    list one pod of it (owned by a ReplicaSet of a Deployment, else by its LeaderWorkerSet)."""
    for path in sorted(FIXTURES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if not isinstance(doc, dict):
                continue
            for owner, template in _templates(doc):
                kind, ref = ("ReplicaSet", f"{owner}-5d8f7c9b4") if doc["kind"] == "Deployment" else (
                    "LeaderWorkerSet", owner)
                pod = {"metadata": {"name": f"{owner}-0", "namespace": "llm", "uid": f"u-{owner}",
                                    "labels": dict((template.get("metadata") or {}).get("labels") or {}),
                                    "ownerReferences": [{"kind": kind, "name": ref, "controller": True}]},
                       "spec": template["spec"],
                       "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
                yield path.name, owner, pod


def test_fixtures_parse_and_cover_each_case() -> None:
    found = {(f, owner, p["metadata"]["labels"].get("llm-d.ai/role")) for f, owner, p in _pods()}
    assert found == set(EXPECTED)
    for path in FIXTURES.glob("*.yaml"):
        head = path.read_text(encoding="utf-8").splitlines()[0]
        assert head.startswith("# ") and "llm-d" in path.read_text(encoding="utf-8")[:400], path.name
        assert "commit " in path.read_text(encoding="utf-8")[:600], path.name  # the upstream version followed


def test_sglang_fixture_tiers() -> None:
    """With the SGLang engine registered: each pod is a server pod of engine ``sglang`` with its
    role, its API port (a decode pod's 8200 behind the sidecar's 8000, as for vLLM) and its tiers
    (GPU; HiCache's host memory; HiCache's storage backend: the file backend's directory on the PVC,
    or the Mooncake store)."""
    for name, owner, pod in _pods():
        role = pod["metadata"]["labels"]["llm-d.ai/role"]
        container, port, front, tiers = EXPECTED[(name, owner, role)]
        (server,) = describe_pod_containers(pod)
        assert (server.engine.name, server.container, server.role) == ("sglang", container, role)
        assert [(p.port, p.front) for p in server.ports] == ([(port, front)] if port is not None else [])
        got = tuple((t.kind.value, t.store or t.tier_type) for t in server.layout.tiers)
        assert got == tiers, (name, owner, got)
        if port is None:
            assert any("flags are not known" in n for n in server.notes), server.notes
        assert describe_other_containers(pod, vllm_containers=[server.container]) == []
