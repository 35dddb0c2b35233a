"""Resolving store addresses to Services and pods (kubectl_kvreset.stores.resolve)."""

from __future__ import annotations

from typing import Any

from kubectl_kvreset.stores.config import StoreKind, parse_address
from kubectl_kvreset.stores.resolve import ClusterIndex, admin_port, mp_has_http, remedy


def pod(ns: str, name: str, ip: str, *, host_ip: str = "10.9.0.1", host_network: bool = False,
        ports: tuple[int, ...] = (), args: list[str] | None = None) -> dict[str, Any]:
    return {"metadata": {"namespace": ns, "name": name},
            "spec": {"hostNetwork": host_network, "containers": [
                {"name": "c", "args": args or [], "ports": [{"containerPort": p} for p in ports]}]},
            "status": {"podIP": ip, "hostIP": host_ip, "conditions": [{"type": "Ready", "status": "True"}]}}


SVC = {"metadata": {"namespace": "lmc", "name": "kv-redis"},
       "spec": {"clusterIP": "10.96.0.7", "ports": [{"name": "redis", "port": 6379, "targetPort": "redis"}]}}
SLICE = {"metadata": {"namespace": "lmc", "name": "kv-redis-abcde",
                      "labels": {"kubernetes.io/service-name": "kv-redis"}},
         "ports": [{"name": "redis", "port": 6380}],
         "endpoints": [{"conditions": {"ready": True},
                        "targetRef": {"kind": "Pod", "namespace": "lmc", "name": "redis-0"}}]}
CLIENT = pod("llm", "vllm-0", "10.0.0.5", host_ip="10.9.0.1")
MP = pod("lmc", "lmcache-mp-x1", "10.9.0.1", host_network=True, ports=(6555,), args=["server", "--http-port", "8181"])
INDEX = ClusterIndex([SVC], [SLICE], [CLIENT, MP, pod("lmc", "redis-0", "10.0.0.8", ports=(6380,))])


def test_service_name_forms_and_cluster_ip() -> None:
    for text in ("kv-redis.lmc:6379", "kv-redis.lmc.svc:6379", "kv-redis.lmc.svc.cluster.local:6379",
                 "redis://10.96.0.7:6379"):
        res = INDEX.resolve(parse_address(text), CLIENT)
        assert (res.kind, res.namespace, res.name, res.service_port) == ("service", "lmc", "kv-redis", 6379), text
        assert [(e.name, e.port) for e in res.endpoints] == [("redis-0", 6380)]
    client_in_lmc = pod("lmc", "v", "10.0.0.6")
    assert INDEX.resolve(parse_address("kv-redis"), client_in_lmc).kind == "service"
    # a short name from another namespace is that namespace's service: absent
    res = INDEX.resolve(parse_address("kv-redis:6379"), CLIENT)
    assert res.kind == "outside" and "llm/kv-redis does not exist" in res.message
    assert INDEX.resolve(parse_address("kv-redis.lmc:7000"), CLIENT).kind == "outside"


def test_pod_ip_host_ip_localhost_and_outside() -> None:
    res = INDEX.resolve(parse_address("10.0.0.8:6380"), CLIENT)
    assert (res.kind, res.name) == ("pod", "redis-0")
    res = INDEX.resolve(parse_address("tcp://10.9.0.1", default_port=6555), CLIENT)
    assert (res.kind, res.name) == ("pod", "lmcache-mp-x1") and "status.hostIP" in res.message
    res = INDEX.resolve(parse_address("localhost:7000"), CLIENT)
    assert (res.kind, res.name) == ("pod", "vllm-0")
    res = INDEX.resolve(parse_address("redis.example.com:6379"), CLIENT)
    assert res.kind == "outside" and "not a cluster Service name" in res.message
    res = INDEX.resolve(parse_address("192.0.2.4:6379"), CLIENT)
    assert res.kind == "outside" and "no Service ClusterIP or pod IP" in res.message
    limited = ClusterIndex([], [], [], unlisted=["secret-ns"])
    res = limited.resolve(parse_address("r.secret-ns:6379"), CLIENT)
    assert "namespaces not listable: secret-ns" in res.message


def test_admin_ports_and_remedies() -> None:
    assert admin_port(StoreKind.LMCACHE_MP, MP) == 8181
    assert admin_port(StoreKind.MOONCAKE, pod("a", "m", "1.1.1.1", args=["--metrics_port=9100"])) == 9100
    assert admin_port(StoreKind.MOONCAKE, None) == 9003
    assert admin_port(StoreKind.LMCACHE_CONTROLLER, None) == 9000
    assert admin_port(StoreKind.REDIS, None) is None
    zmq = pod("a", "z", "1.1.1.2", args=["-m", "lmcache.v1.multiprocess.server"])
    assert not mp_has_http(zmq) and mp_has_http(MP)
    text = remedy(StoreKind.REDIS, parse_address("redis://r.example:6379"), model="org/m")
    assert "--scan --pattern 'org/m@*'" in text and "UNLINK" in text
    assert "remove_all?force=true" in remedy(StoreKind.MOONCAKE, None)
    assert "restart" in remedy(StoreKind.LMCACHE_SERVER, parse_address("lm://s:1"))


DENIED = 'services is forbidden: User "alice" cannot list resource "services" in API group "" in the namespace "llm"'


def test_a_refused_service_list_is_never_does_not_exist() -> None:
    # services of llm could not be listed (403): the address is unresolved, naming the
    # permission and the Role rule, never "does not exist" or "outside the cluster"
    index = ClusterIndex([], [], [CLIENT], unlisted=["other namespaces", "llm"], denied=[DENIED],
                         forbidden={("services", ""): DENIED.replace(' in the namespace "llm"',
                                                                     " at the cluster scope"),
                                    ("services", "llm"): DENIED},
                         listed={"services": frozenset(), "endpointslices": None, "pods": None})
    res = index.resolve(parse_address("kv-redis:6379"), CLIENT)
    assert res.kind == "unresolved" and res.describe() == "unresolved (forbidden)", res
    assert "does not exist" not in res.message
    assert "not permitted: list on services in namespace llm" in res.message, res.message
    assert '{apiGroups: [""], resources: [services], verbs: [list]}' in res.message
    # an IP: the refused list is no proof that nothing has it
    res = index.resolve(parse_address("192.0.2.4:6379"), CLIENT)
    assert res.kind == "unresolved" and "list on services" in res.message, res.message
    # endpointslices refused for a Service that was listed: the pods behind it are unknown
    index = ClusterIndex([SVC], [], [CLIENT], forbidden={("endpointslices", "lmc"): "forbidden"},
                         listed={"services": None, "endpointslices": frozenset({"llm"}), "pods": None})
    res = index.resolve(parse_address("kv-redis.lmc:6379"), CLIENT)
    assert res.kind == "unresolved" and "list on endpointslices.discovery.k8s.io in namespace lmc" in res.message
    # listed everywhere: an absent name is still "does not exist"
    assert INDEX.resolve(parse_address("kv-redis:6379"), CLIENT).kind == "outside"
