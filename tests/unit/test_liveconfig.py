"""What the running server says: versions by release, the live configuration, redaction, the
routes of an unknown build (kubectl_kvreset.engines.vllm.liveconfig, job.probes)."""

from __future__ import annotations

import json

from packaging.version import Version

from kubectl_kvreset.engines.vllm.api import ResetOutcome
from kubectl_kvreset.engines.vllm.kvconfig import layout_from_config
from kubectl_kvreset.engines.vllm.liveconfig import (
    LiveConfig,
    read_openapi,
    read_server_info,
    reconcile,
    redact,
    release_version,
)
from kubectl_kvreset.job.probes import contradicts, template_key
from kubectl_kvreset.tiers import TierKind
from tests.sim.fakevllm import FakeVLLM

SECRET = "s3cr3t"


def test_release_version_compares_dev_builds_by_their_release() -> None:
    assert release_version("0.23.1.dev42+g4ba787ec9") == Version("0.23.1")
    assert release_version("v0.26.0") == Version("0.26.0")
    assert release_version("0.32.0+cpu") == Version("0.32.0")
    for unknown in ("dev", "", None, "my-fork", "0.6.6", "0.0.0"):
        assert release_version(unknown) is None, unknown


def test_redact_removes_secret_names_and_url_credentials() -> None:
    doc = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
           "kv_connector_extra_config": {"lmcache.remote_url": f"redis://u:{SECRET}@h:6379",
                                         "api_key": SECRET, "nested": [{"Password": SECRET}], "chunk_size": 256}}
    out = redact(doc)
    assert SECRET not in json.dumps(out)
    assert out["kv_connector"] == "LMCacheConnectorV1" and out["kv_connector_extra_config"]["chunk_size"] == 256
    assert out["kv_connector_extra_config"]["lmcache.remote_url"] == "redis://<redacted>@h:6379"


def test_server_info_of_each_version_reads_as_it_should() -> None:
    offload = {"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
               "kv_connector_extra_config": {"cpu_bytes_to_use": 2**30, "auth_token": SECRET}}
    fake = FakeVLLM(port=8000, version="0.32.0", dev_mode=True, model="m", env={"VLLM_API_KEY": SECRET},
                    kv_transfer_config=offload)
    live = read_server_info(fake.handle("GET", "/server_info", "config_format=json", {}, b"")[2])
    assert live.readable and live.kv_transfer_config is not None
    assert live.kv_transfer_config["kv_connector"] == "OffloadingConnector"
    assert SECRET not in repr(live)
    # the text form (and a release before 0.11.0, which has no JSON form) says nothing
    assert not read_server_info(fake.handle("GET", "/server_info", "", {}, b"")[2]).readable
    old = FakeVLLM(port=8000, version="0.10.2", dev_mode=True, model="m", kv_transfer_config=offload)
    assert not read_server_info(old.handle("GET", "/server_info", "config_format=json", {}, b"")[2]).readable
    none = FakeVLLM(port=8000, version="0.26.0", dev_mode=True, model="m")
    got = read_server_info(none.handle("GET", "/server_info", "config_format=json", {}, b"")[2])
    assert got.readable and got.kv_transfer_config is None
    assert not read_server_info(b"not json").readable


def test_reconcile_the_live_answer_wins_with_a_note() -> None:
    spec = layout_from_config(None)
    live = LiveConfig(True, {"kv_connector": "OffloadingConnector", "kv_role": "kv_both"})
    layout, note = reconcile(spec, live)
    assert [t.kind for t in layout.tiers] == [TierKind.GPU, TierKind.CPU] and \
        layout.connectors == ("OffloadingConnector",)
    assert note is not None and "OffloadingConnector" in note and "pod spec shows connectors none" in note
    assert reconcile(layout, live) == (layout, None)  # they agree: no note
    assert reconcile(layout, LiveConfig(False, None)) == (layout, None)  # unreadable: the spec stays
    # the server runs without the connector the spec shows: the live answer wins there too
    gone, note = reconcile(layout, LiveConfig(True, None))
    assert [t.kind for t in gone.tiers] == [TierKind.GPU] and note is not None


def test_openapi_lists_the_routes_and_parameters_of_an_unknown_build() -> None:
    for version, routes, params in (("0.32.0", 3, {"reset_external", "reset_running_requests"}),
                                    ("0.12.0", 2, {"reset_running_requests"}), ("0.11.0", 1, set())):
        body = FakeVLLM(port=8000, version=version, dev_mode=True, model="m").handle(
            "GET", "/openapi.json", "", {}, b"")[2]
        got = read_openapi(body)
        assert got is not None and len(got.routes) == routes and got.params == params, version
    off = read_openapi(FakeVLLM(port=8000, version="0.32.0", dev_mode=False, model="m").handle(
        "GET", "/openapi.json", "", {}, b"")[2])
    assert off is not None and off.routes == ()
    assert read_openapi(b"{}") is None


def test_contradiction_is_an_answer_shape_the_version_cannot_give() -> None:
    assert contradicts("0.23.0", ResetOutcome.CLEARED) and contradicts("0.23.0", ResetOutcome.BUSY)
    assert contradicts("0.26.0", ResetOutcome.UNCONFIRMED)
    assert not contradicts("0.26.0", ResetOutcome.CLEARED) and not contradicts("0.25.1", ResetOutcome.UNCONFIRMED)
    assert not contradicts("dev", ResetOutcome.UNCONFIRMED) and not contradicts("0.26.0", ResetOutcome.DEV_MODE_OFF)


def test_template_key_groups_replicas_and_separates_bare_pods() -> None:
    from kubectl_kvreset.pods import describe_pod

    def pod(name: str, labels: dict[str, str], owner: str | None) -> dict[str, object]:
        refs = [{"kind": "ReplicaSet", "name": owner, "controller": True}] if owner else []
        return {"metadata": {"name": name, "namespace": "ns", "uid": name, "labels": labels, "ownerReferences": refs},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:latest",
                                         "command": ["vllm", "serve", "m"]}]}}

    a = describe_pod(pod("d-abc-1", {"pod-template-hash": "abc"}, "d-abc"))
    b = describe_pod(pod("d-abc-2", {"pod-template-hash": "abc"}, "d-abc"))
    c = describe_pod(pod("d-xyz-1", {"pod-template-hash": "xyz"}, "d-xyz"))
    bare1, bare2 = describe_pod(pod("p1", {}, None)), describe_pod(pod("p2", {}, None))
    assert a and b and c and bare1 and bare2
    assert template_key(a) == template_key(b) != template_key(c)
    assert template_key(bare1) != template_key(bare2)


def test_an_unknown_build_follows_its_openapi_and_its_connector_reset_is_unconfirmed() -> None:
    from kubectl_kvreset.engines.vllm.liveconfig import RouteSet
    from kubectl_kvreset.job.planning import pod_plan
    from kubectl_kvreset.job.probes import Probe
    from kubectl_kvreset.podapi import CallFailure
    from kubectl_kvreset.pods import describe_pod

    ktc = json.dumps({"kv_connector": "OffloadingConnector", "kv_role": "kv_both"})
    pod = describe_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                        "spec": {"containers": [{"name": "vllm", "image": "fork/vllm:dev",
                                                 "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}],
                                                 "command": ["vllm", "serve", "m", "--kv-transfer-config", ktc]}]}})
    assert pod is not None
    unknown = CallFailure("unknown-build", "'dev' is not a release this tool knows")
    listed = RouteSet(("/reset_prefix_cache", "/reset_mm_cache"), frozenset({"reset_external"}))
    p = pod_plan(pod, Probe("dev", unknown, routes=listed), "none", preempt=True)
    assert p.routes == ("/reset_prefix_cache", "/reset_mm_cache")
    assert p.query == (("reset_external", "true"),)  # reset_running_requests is not listed: not sent
    cpu = next(e for e in p.effects if e.tier.kind is TierKind.CPU)
    assert cpu.emptied_by_api_reset and cpu.tier in p.unconfirmed and "not known" in cpu.reason
    assert any("/openapi.json decided" in n for n in p.notes)
    # without reset_external in its openapi the connector tier is left, as on the oldest release
    bare = pod_plan(pod, Probe("dev", unknown, routes=RouteSet(("/reset_prefix_cache",), frozenset())), "none", False)
    assert bare.query == () and not bare.unconfirmed
    assert not next(e for e in bare.effects if e.tier.kind is TierKind.CPU).emptied_by_api_reset
    # a dev suffix on a release is that release
    known = pod_plan(pod, Probe("0.26.0.dev3+gabc", None), "none", False)
    assert known.routes == ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache") and not known.unconfirmed


def test_reconcile_keeps_a_disk_read_from_lmcache_config_file() -> None:
    """/server_info carries the connector, not the file LMCache reads in the pod: the disk read
    from LMCACHE_CONFIG_FILE stays, with no disagreement note; a live config naming its own disk wins."""
    import dataclasses

    from kubectl_kvreset.tiers import KVLayout, Tier

    ktc = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    spec = layout_from_config(ktc)
    disk = Tier(TierKind.FS, "LMCacheConnectorV1", None, root_dir="/cache/lmc", tier_type="lmcache_local_disk",
                from_file="/etc/lmcache/lmcache.yaml")
    spec = KVLayout(spec.connectors, (*spec.tiers, disk), spec.kv_role)
    assert reconcile(spec, LiveConfig(True, ktc)) == (spec, None)
    own = dict(ktc, kv_connector_extra_config={"lmcache.local_disk": "/live/disk"})
    found, note = reconcile(spec, LiveConfig(True, own))
    assert [t.root_dir for t in found.tiers if t.kind is TierKind.FS] == ["/live/disk"] and note is not None
    other = dataclasses.replace(spec, tiers=spec.tiers[:-1])
    assert reconcile(other, LiveConfig(True, ktc)) == (other, None)
