"""Finding the shared stores from a vLLM pod's configuration (kubectl_kvreset.stores.config)."""

from __future__ import annotations

import json

import pytest

from kubectl_kvreset.stores.config import (
    FileSource,
    StoreKind,
    Unread,
    file_source,
    glob_escape,
    parse_address,
    resolve_env,
    stores_of,
    wanted_files,
)

LMC = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def test_parse_address_forms() -> None:
    a = parse_address("rediss://u:p%40w@kv-redis.lmc.svc.cluster.local:6380/2")
    assert (a.host, a.port, a.db, a.username, a.password, a.tls) == (
        "kv-redis.lmc.svc.cluster.local", 6380, 2, "u", "p@w", True)
    assert "p@w" not in a.display() and a.display() == "rediss://kv-redis.lmc.svc.cluster.local:6380/2"
    assert parse_address("redis://r").port == 6379
    assert parse_address("10.0.0.5:50051").port == 50051
    assert parse_address("[::1]:7").host == "::1"
    assert parse_address("tcp://lmcache-server", default_port=6555).port == 6555
    assert parse_address("unix:///run/r.sock").path == "/run/r.sock"
    with pytest.raises(ValueError, match="not a number"):
        parse_address("h:abc")
    with pytest.raises(ValueError):
        parse_address("")


def test_glob_escape() -> None:
    assert glob_escape("org/m[1]*?\\") == "org/m\\[1\\]\\*\\?\\\\"


def test_redis_from_extra_config_wins_over_env_and_file() -> None:
    cfg = {**LMC, "kv_connector_extra_config": {"lmcache.remote_url": "redis://a:1"}}
    env = {"LMCACHE_REMOTE_URL": "redis://b:2", "LMCACHE_CONFIG_FILE": "/c/l.yaml"}
    files = {"/c/l.yaml": "remote_url: redis://c:3\n"}
    [use] = stores_of(cfg, env, files, model="org/A")
    assert use.kind is StoreKind.REDIS and use.scope == "model" and use.model == "org/A"
    assert use.address is not None and (use.address.host, use.address.port) == ("a", 1)
    assert use.source == "kv_connector_extra_config lmcache.remote_url"
    [use] = stores_of(LMC, env, files, model="m")
    assert use.address is not None and use.address.host == "b" and use.source == "env LMCACHE_REMOTE_URL"
    [use] = stores_of(LMC, {"LMCACHE_CONFIG_FILE": "/c/l.yaml"}, files, model="m")
    assert use.address is not None and use.address.host == "c" and use.source == "LMCACHE_CONFIG_FILE"


def test_unread_config_file_is_said() -> None:
    [use] = stores_of(LMC, {"LMCACHE_CONFIG_FILE": "/x.yaml"}, {"/x.yaml": Unread("on an emptyDir")}, model="m")
    assert use.kind is StoreKind.OTHER and "on an emptyDir" in use.notes[0]


def test_controller_worker_api_and_aliases() -> None:
    env = {"LMCACHE_ENABLE_CONTROLLER": "true", "LMCACHE_CONTROLLER_URL": "lmc-ctl.lmc:8300",
           "LMCACHE_LMCACHE_INSTANCE_ID": "inst-a", "LMCACHE_INTERNAL_API_SERVER_ENABLED": "True",
           "LMCACHE_INTERNAL_API_SERVER_PORT_START": "7100"}
    uses = stores_of(LMC, env, {}, model="m", argv=["vllm", "serve", "m", "--tensor-parallel-size", "2"])
    ctl, worker = uses
    assert ctl.kind is StoreKind.LMCACHE_CONTROLLER and ctl.instance_id == "inst-a" and ctl.scope == "instance"
    assert ctl.address is not None and ctl.address.host == "lmc-ctl.lmc" and ctl.address.port == 8300
    assert worker.kind is StoreKind.LMCACHE_WORKER and worker.ports == (7101, 7102)
    # no instance id: said
    [ctl] = stores_of(LMC, {"LMCACHE_ENABLE_CONTROLLER": "1", "LMCACHE_CONTROLLER_PULL_URL": "c:1"}, {}, model="m")
    assert any("lmcache_instance_id" in n for n in ctl.notes)


def test_multi_connector_mp_and_mooncake_key_spellings() -> None:
    cfg = {"kv_connector": "MultiConnector", "kv_connector_extra_config": {"connectors": [
        {"kv_connector": "LMCacheMPConnector",
         "kv_connector_extra_config": {"lmcache.mp.host": "tcp://10.1.2.3", "lmcache.mp.port": 6555}},
        {"kv_connector": "MooncakeStoreConnector"}]}}
    for key in ("master_server_address", "mooncake_master_server_addr"):
        env = {"MOONCAKE_CONFIG_PATH": "/etc/mc/mooncake.json"}
        files = {"/etc/mc/mooncake.json": json.dumps({key: "mooncake-master.mc.svc.cluster.local:50051"})}
        mp, mc = stores_of(cfg, env, files, model="m")
        assert mp.kind is StoreKind.LMCACHE_MP and mp.address is not None
        assert (mp.address.host, mp.address.port) == ("10.1.2.3", 6555)
        assert mc.kind is StoreKind.MOONCAKE and mc.scope == "store" and mc.address is not None
        assert mc.address.host == "mooncake-master.mc.svc.cluster.local" and \
            mc.source.startswith("MOONCAKE_CONFIG_PATH")
    [mc] = stores_of({"kv_connector": "MooncakeStoreConnector"}, {"MOONCAKE_CONFIG_PATH": "/m.json"},
                     {"/m.json": "{}"}, model="m")
    assert mc.address is None and "no master_server_address" in mc.notes[0]


def test_lmcache_mooncakestore_uses_extra_config_master() -> None:
    env = {"LMCACHE_REMOTE_URL": "mooncakestore://ignored:1",
           "LMCACHE_EXTRA_CONFIG": json.dumps({"mooncake_master_server_addr": "mc.lmc:50051"})}
    [use] = stores_of(LMC, env, {}, model="m")
    assert use.kind is StoreKind.MOONCAKE and use.address is not None and use.address.host == "mc.lmc"
    [lm] = stores_of(LMC, {"LMCACHE_REMOTE_URL": "lm://lmserver:65432"}, {}, model="m")
    assert lm.kind is StoreKind.LMCACHE_SERVER and lm.scope == "store"


POD = {"metadata": {"name": "p", "namespace": "ns", "labels": {"app": "x"}},
       "status": {"podIP": "10.0.0.9", "hostIP": "10.1.0.1"},
       "spec": {"volumes": [
           {"name": "cfg", "configMap": {"name": "lmc-cfg"}},
           {"name": "sec", "secret": {"secretName": "mc-sec", "items": [{"key": "cfg", "path": "mc/mooncake.json"}]}},
           {"name": "proj", "projected": {"sources": [{"configMap": {"name": "pcm"}}]}},
           {"name": "scratch", "emptyDir": {}}]}}


def test_resolve_env_envfrom_valuefrom_fieldref() -> None:
    data = {("ConfigMap", "base"): {"REMOTE_URL": "redis://from-envfrom:1", "X": "1"},
            ("Secret", "redis-auth"): {"url": "redis://:pw@r:6379"}}

    def lookup(kind: str, name: str) -> dict[str, str]:
        if name == "locked":
            raise PermissionError("forbidden")
        return data[(kind, name)]

    container = {"envFrom": [{"configMapRef": {"name": "base"}, "prefix": "LMCACHE_"},
                             {"secretRef": {"name": "locked"}}],
                 "env": [{"name": "LMCACHE_REMOTE_URL",
                          "valueFrom": {"secretKeyRef": {"name": "redis-auth", "key": "url"}}},
                         {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                         {"name": "MP", "value": "tcp://$(IP)"},
                         {"name": "GONE", "valueFrom": {"configMapKeyRef": {"name": "missing", "key": "k"}}}]}
    env, notes = resolve_env(POD, container, lookup)
    assert env["LMCACHE_REMOTE_URL"] == "redis://:pw@r:6379" and env["LMCACHE_X"] == "1"
    assert env["MP"] == "tcp://10.1.0.1" and "GONE" not in env
    assert any("not permitted to read Secret/locked" in n for n in notes)
    assert any("GONE" in n and "ConfigMap/missing does not exist" in n for n in notes)
    [use] = stores_of(LMC, env, {}, model="m")
    assert use.address is not None and use.address.password == "pw"


def test_file_source_volumes() -> None:
    c = {"volumeMounts": [{"name": "cfg", "mountPath": "/etc/lmcache"},
                          {"name": "sec", "mountPath": "/etc/sec"},
                          {"name": "cfg", "mountPath": "/one.yaml", "subPath": "lmc.yaml"},
                          {"name": "proj", "mountPath": "/p"},
                          {"name": "scratch", "mountPath": "/tmp/s"}]}
    assert file_source(POD, c, "/etc/lmcache/lmcache.yaml") == FileSource("ConfigMap", "lmc-cfg", "lmcache.yaml")
    assert file_source(POD, c, "/etc/sec/mc/mooncake.json") == FileSource("Secret", "mc-sec", "cfg")
    assert file_source(POD, c, "/one.yaml") == FileSource("ConfigMap", "lmc-cfg", "lmc.yaml")
    assert file_source(POD, c, "/p/a.json") == FileSource("ConfigMap", "pcm", "a.json")
    assert "emptyDir" in str(file_source(POD, c, "/tmp/s/x.yaml"))
    assert "no volume" in str(file_source(POD, c, "/opt/x.yaml"))
    assert "no key" in str(file_source(POD, c, "/etc/sec/other.json"))
    assert wanted_files({"LMCACHE_CONFIG_FILE": "/a", "MOONCAKE_CONFIG_PATH": "/b"}) == [
        ("LMCACHE_CONFIG_FILE", "/a"), ("MOONCAKE_CONFIG_PATH", "/b")]
