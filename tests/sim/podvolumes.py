"""A simulated pod's environment and volumes: env and envFrom resolved, ConfigMap, Secret,
projected, emptyDir, hostPath, NFS and PVC volumes provisioned as directories."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from .apierrors import ApiError
from .clusterbase import (
    _FIELD_LABEL_RE,
    SA_MOUNT,
    PodRecord,
    expand_var_refs,
)
from .rbac import service_account_user
from .resourcetypes import Obj


class PodVolumes:
    """Env and volumes of a pod (a mixin of :class:`tests.sim.controllers.Cluster`)."""

    # ---- env and volumes ----
    def resolve_env(self, pod: Obj, container: dict[str, Any], pod_ip: str) -> dict[str, str]:
        """Resolve a container's environment as the kubelet does: ``envFrom`` (ConfigMap /
        Secret, with ``prefix``) first, then ``env`` in order with ``$(VAR)`` expansion of
        values; ``valueFrom`` fieldRef (metadata.name/namespace/uid/labels['k']/annotations['k'],
        status.podIP, status.hostIP, spec.nodeName, spec.serviceAccountName), configMapKeyRef,
        secretKeyRef (base64-decoded ``data`` or ``stringData``). A missing source leaves the
        variable unset."""
        md = pod["metadata"]
        ns = md["namespace"]
        env: dict[str, str] = {}
        if self.api_server is not None and any(
                m.get("mountPath") == SA_MOUNT for m in container.get("volumeMounts") or []):
            # the kubelet's service variables of the `kubernetes` Service: here the API
            # server's own loopback address (pods share the machine's loopback)
            port = str(self.api_server.port)
            env.update({"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port,
                        "KUBERNETES_SERVICE_PORT_HTTPS": port,
                        "KUBERNETES_PORT": f"tcp://127.0.0.1:{port}",
                        "KUBERNETES_PORT_443_TCP": f"tcp://127.0.0.1:{port}"})
        for ef in container.get("envFrom") or []:
            prefix = ef.get("prefix", "")
            if "configMapRef" in ef:
                cm = self.store.try_get(self.t_cm, ns, ef["configMapRef"].get("name", ""))
                for k, v in ((cm or {}).get("data") or {}).items():
                    env[prefix + k] = str(v)
            elif "secretRef" in ef:
                sec = self.store.try_get(self.t_secret, ns, ef["secretRef"].get("name", ""))
                for k, v in self._secret_data(sec).items():
                    env[prefix + k] = v
        for e in container.get("env") or []:
            name = e.get("name")
            if not name:
                continue
            if "value" in e or "valueFrom" not in e:
                env[name] = expand_var_refs(str(e.get("value", "") or ""), env)
                continue
            vf = e.get("valueFrom") or {}
            val: str | None = None
            if "fieldRef" in vf:
                path = vf["fieldRef"].get("fieldPath", "")
                m = _FIELD_LABEL_RE.match(path)
                if m:
                    val = (md.get(m.group(1)) or {}).get(m.group(2))
                else:
                    val = {
                        "metadata.name": md.get("name"), "metadata.namespace": ns,
                        "metadata.uid": md.get("uid"), "status.podIP": pod_ip,
                        "status.podIPs": pod_ip,
                        "status.hostIP": self.host_ip((pod.get("spec") or {}).get("nodeName")),
                        "status.hostIPs": self.host_ip((pod.get("spec") or {}).get("nodeName")),
                        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
                        "spec.serviceAccountName":
                            (pod.get("spec") or {}).get("serviceAccountName"),
                    }.get(path)
            elif "configMapKeyRef" in vf:
                ref = vf["configMapKeyRef"]
                cm = self.store.try_get(self.t_cm, ns, ref.get("name", ""))
                val = ((cm or {}).get("data") or {}).get(ref.get("key", ""))
            elif "secretKeyRef" in vf:
                ref = vf["secretKeyRef"]
                sec = self.store.try_get(self.t_secret, ns, ref.get("name", ""))
                val = self._secret_data(sec).get(ref.get("key", ""))
            if val is not None:
                env[name] = str(val)
        return env

    @staticmethod
    def _secret_data(sec: Obj | None) -> dict[str, str]:
        if not sec:
            return {}
        out: dict[str, str] = {}
        for k, v in (sec.get("data") or {}).items():
            try:
                out[k] = base64.b64decode(v).decode("utf-8", "replace")
            except (ValueError, TypeError):
                continue
        for k, v in (sec.get("stringData") or {}).items():
            out[k] = str(v)
        return out

    def _pod_dir(self, rec: PodRecord) -> Path:
        return self.config.state_dir / "pods" / f"{rec.namespace}_{rec.name}_{rec.uid[:8]}"

    def provision_volumes(self, pod: Obj, rec: PodRecord, shm_dir: Path) -> dict[str, Path]:
        """Host directories backing the pod's volumes: a PVC is one directory per
        namespace/claim shared by all pods (the claim object is created, Bound, on first use);
        an emptyDir is per pod (the one mounted at ``/dev/shm`` is the pod's shm dir); a hostPath
        lives under the simulator's hostpath dir; a configMap or secret volume is a per-pod
        directory of its keys. A claim bound (``spec.volumeName``) to a PersistentVolume with an
        ``nfs`` or ``hostPath``/``local`` source, or a ``csi`` source of csi-driver-nfs
        (``server``/``share``/``subDir``), smb.csi.k8s.io (``source``/``subDir``) or
        efs.csi.aws.com (``fs-ID[:path]`` handle), and an inline ``nfs`` volume, use the directory
        of that storage (``nfs/<server>/<path>`` with the server's cluster DNS suffix dropped,
        ``smb/<host>/<share>``, ``efs/<id>/<path>``, the hostpath dir), so two claims on one
        share see the same files. Other volume kinds are absent."""
        spec = pod.get("spec") or {}
        shm_volumes = {m.get("name") for c in (spec.get("containers") or []) +
                       (spec.get("initContainers") or [])
                       for m in c.get("volumeMounts") or [] if m.get("mountPath") == "/dev/shm"}
        out: dict[str, Path] = {}
        for v in spec.get("volumes") or []:
            name = v.get("name")
            if not name:
                continue
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"].get("claimName", name)
                self._ensure_pvc(rec.namespace, claim)
                d = self._pv_dir(rec.namespace, claim) or self.config.state_dir / "pvc" / rec.namespace / claim
            elif "nfs" in v:
                nfs = v["nfs"] or {}
                d = self._nfs_dir(str(nfs.get("server", "")), str(nfs.get("path", "")))
            elif "emptyDir" in v:
                d = shm_dir if name in shm_volumes else self._pod_dir(rec) / "volumes" / name
            elif "hostPath" in v:
                d = self.config.state_dir / "hostpath" / str(
                    v["hostPath"].get("path", name)).lstrip("/")
            elif "configMap" in v or "secret" in v:
                d = self._pod_dir(rec) / "volumes" / name
                self._project_keys(rec.namespace, v, d)
            elif "projected" in v:
                d = self._pod_dir(rec) / "volumes" / name
                for source in (v["projected"] or {}).get("sources") or []:
                    if "configMap" in source:
                        self._project_keys(rec.namespace, {"configMap": source["configMap"]}, d)
                    elif "secret" in source:
                        sec = dict(source["secret"] or {})
                        sec["secretName"] = sec.get("name", "")
                        self._project_keys(rec.namespace, {"secret": sec}, d)
                    elif "serviceAccountToken" in source and self.api_server is not None:
                        rel = str((source["serviceAccountToken"] or {}).get("path") or "token")
                        sa = str(spec.get("serviceAccountName") or "default")
                        d.mkdir(parents=True, exist_ok=True)
                        (d / rel).write_text(self.api_server.mint_token(
                            service_account_user(rec.namespace, sa)))
                    elif "downwardAPI" in source:
                        md = pod.get("metadata") or {}
                        for item in (source["downwardAPI"] or {}).get("items") or []:
                            field_path = str((item.get("fieldRef") or {}).get("fieldPath") or "")
                            value = {"metadata.namespace": rec.namespace, "metadata.name": rec.name,
                                     "metadata.uid": rec.uid}.get(field_path, md.get(field_path))
                            rel = str(item.get("path") or "")
                            if value is not None and rel and ".." not in Path(rel).parts:
                                d.mkdir(parents=True, exist_ok=True)
                                (d / rel).write_text(str(value))
            else:
                continue
            d.mkdir(parents=True, exist_ok=True)
            out[name] = d
        return out

    def _project_keys(self, ns: str, volume: dict[str, Any], d: Path) -> None:
        """A ``configMap`` / ``secret`` volume as the kubelet lays it: one file per key (or per
        ``items`` entry at its ``path``), Secret values decoded; a missing source leaves the
        directory empty (the kubelet would keep the pod waiting unless ``optional``)."""
        if "configMap" in volume:
            src = volume["configMap"] or {}
            obj = self.store.try_get(self.t_cm, ns, str(src.get("name", "")))
            data = {k: str(v) for k, v in ((obj or {}).get("data") or {}).items()}
        else:
            src = volume["secret"] or {}
            data = self._secret_data(self.store.try_get(self.t_secret, ns,
                                                        str(src.get("secretName", ""))))
        items = src.get("items")
        chosen = [(str(i.get("key")), str(i.get("path") or i.get("key"))) for i in items
                  if isinstance(i, dict)] if isinstance(items, list) else [(k, k) for k in data]
        d.mkdir(parents=True, exist_ok=True)
        for key, rel in chosen:
            if key not in data or ".." in Path(rel).parts or rel.startswith("/"):
                continue
            target = d / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[key])

    def _nfs_dir(self, server: str, path: str) -> Path:
        """The directory of NFS export ``server:path``: a Service's ``name.ns``, ``name.ns.svc``,
        ``name.ns.svc.cluster.local`` and a trailing dot name one server (cluster DNS)."""
        host = server.strip().rstrip(".").lower()
        for suffix in (".cluster.local", ".svc"):
            host = host.removesuffix(suffix)
        return self.config.state_dir / "nfs" / host / path.strip("/")

    def _pv_dir(self, ns: str, claim: str) -> Path | None:
        """The directory of the storage the claim's bound PersistentVolume names, or None."""
        pvc = self.store.try_get(self.t_pvc, ns, claim) or {}
        name = (pvc.get("spec") or {}).get("volumeName")
        pv = self.store.try_get(self.t_pv, None, str(name)) if name else None
        spec = (pv or {}).get("spec") or {}
        if isinstance(spec.get("nfs"), dict):
            return self._nfs_dir(str(spec["nfs"].get("server", "")), str(spec["nfs"].get("path", "")))
        csi = spec.get("csi") if isinstance(spec.get("csi"), dict) else {}
        attrs = {str(k).lower(): str(v) for k, v in (csi.get("volumeAttributes") or {}).items()}
        driver, handle = str(csi.get("driver", "")), str(csi.get("volumeHandle", ""))
        if driver == "nfs.csi.k8s.io" and attrs.get("server"):
            return self._nfs_dir(attrs["server"], attrs.get("share", "/") + "/" + attrs.get("subdir", ""))
        if driver == "smb.csi.k8s.io" and attrs.get("source"):
            host, _, share = attrs["source"].replace("\\", "/").lstrip("/").partition("/")
            return (self.config.state_dir / "smb" / host.lower()
                    / share.strip("/") / attrs.get("subdir", "").strip("/"))
        if driver == "efs.csi.aws.com" and handle.startswith("fs-"):
            fsid, _, rest = handle.partition(":")
            return self.config.state_dir / "efs" / fsid / rest.partition(":")[0].strip("/")
        for kind in ("hostPath", "local"):
            if isinstance(spec.get(kind), dict):
                return self.config.state_dir / "hostpath" / str(spec[kind].get("path", "")).lstrip("/")
        return None

    def _ensure_pvc(self, ns: str, claim: str) -> None:
        if self.store.try_get(self.t_pvc, ns, claim) is not None:
            return
        try:
            self.store.create(self.t_pvc, {
                "metadata": {"name": claim, "namespace": ns},
                "spec": {"accessModes": ["ReadWriteMany"],
                         "resources": {"requests": {"storage": "1Ti"}},
                         "volumeMode": "Filesystem"},
                "status": {"phase": "Bound", "accessModes": ["ReadWriteMany"],
                           "capacity": {"storage": "1Ti"}}}, ns)
        except ApiError:
            pass
