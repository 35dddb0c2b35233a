"""Building a client configuration from the kubeconfig (or the in-cluster service account) as
kubectl does, for :meth:`kubectl_kvreset.kube.api.Kube.connect`: the flags applied, an exec
credential plugin run here (bounded, in its own process group), and the same steps taken again
when the API server answers 401 (:meth:`ConfigLoader.load`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .client import _quiet_library
from .credentials import (
    ExecCredential,
    ExecPluginError,
    _detail,
    _exec_refresh_hook,
    credential_error,
    exec_user,
    run_exec_plugin,
)
from .errors import KubeConfigError, KubeCredentialError, KubeError, KubeFlags
from .kubeconfig import _find, apply_overrides, kubeconfig_paths, merge_kubeconfigs

#: where a pod's service account namespace is mounted (kubernetes ``rest.InClusterConfig``)
_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass
class ConfigLoader:
    """What :meth:`load` needs to build a fresh client configuration, and who it found.

    Attributes:
        flags: kubectl's flags of this run.
        parts: the kubernetes client's pieces (:func:`kubectl_kvreset.kube.client.client_parts`).
        timeout_s: the bound of an exec credential plugin's run (``--request-timeout``).
        paths: the kubeconfig files, merged in order (empty in a pod).
        in_cluster: no kubeconfig, ``KUBERNETES_SERVICE_HOST`` set and no ``--server``.
        user_name, user, cluster: the kubeconfig user's name and entry and the cluster's name,
            filled by :meth:`load` for credential messages.
    """

    flags: KubeFlags
    parts: Any
    timeout_s: float | None
    paths: list[Path] = field(default_factory=list)
    in_cluster: bool = False
    user_name: str = ""
    user: dict[str, Any] = field(default_factory=dict)
    cluster: str = ""

    @classmethod
    def for_flags(cls, flags: KubeFlags, parts: Any, timeout_s: float | None) -> ConfigLoader:
        """The loader for ``flags``: the kubeconfig files found as kubectl finds them.

        Raises:
            KubeConfigError: ``--kubeconfig`` names a missing file, or no kubeconfig is found
                outside a pod and no ``--server`` is given.
        """
        paths = kubeconfig_paths(flags.kubeconfig)
        if flags.kubeconfig and not paths[0].exists():
            raise KubeConfigError(f"kubeconfig {flags.kubeconfig} does not exist")
        in_cluster = not paths and bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and not flags.server
        if not in_cluster and not paths and not flags.server:
            raise KubeConfigError("no kubeconfig found: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config")
        return cls(flags, parts, timeout_s, list(paths), in_cluster,
                   cluster="(in-cluster)" if in_cluster else "")

    def load(self) -> tuple[Any, str, str]:
        """A fresh ``(configuration, namespace, context name)``; called again after a 401 to
        get new credentials.

        Raises:
            KubeCredentialError: the exec plugin or auth provider failed.
            KubeConfigError: an unusable context or in-cluster configuration.
        """
        if self.in_cluster:
            return self._in_cluster()
        return self._from_kubeconfig()

    def _in_cluster(self) -> tuple[Any, str, str]:
        configuration = self.parts.Configuration()
        try:
            with _quiet_library():
                self.parts.incluster.load_incluster_config(client_configuration=configuration)
        except self.parts.ConfigException as exc:
            raise KubeConfigError(f"in-cluster configuration failed: {exc}") from exc
        namespace = self.flags.namespace or (
            _NAMESPACE_FILE.read_text().strip() if _NAMESPACE_FILE.exists() else "default")
        if self.flags.token:
            configuration.api_key = {"authorization": "Bearer " + self.flags.token}
        return configuration, namespace, "(in-cluster)"

    def _cwd(self) -> str | None:
        # an exec plugin's relative command is found from its kubeconfig's directory
        return str(self.paths[0].parent) if self.paths else None

    def _from_kubeconfig(self) -> tuple[Any, str, str]:
        merged = merge_kubeconfigs(self.paths)
        cfg, ctx_name, namespace = apply_overrides(merged, self.flags)
        user = cfg["users"][0]["user"]
        context = ((_find(merged, "contexts", ctx_name) if ctx_name else None) or {}).get("context") or {}
        self.user_name = self.flags.user or str(context.get("user") or "")
        self.cluster = self.flags.cluster or str(context.get("cluster") or "")
        self.user = user
        sourced = isinstance(user.get("exec"), dict) or isinstance(user.get("auth-provider"), dict)
        credential: ExecCredential | None = None
        if isinstance(user.get("exec"), dict):
            credential = self._run_exec(user, cfg, ctx_name)
        configuration = self.parts.Configuration()
        with _quiet_library() as log:
            try:
                self.parts.kube_config.load_kube_config_from_dict(
                    cfg, context="kvreset", client_configuration=configuration, persist_config=False)
            except Exception as exc:
                if sourced and not isinstance(exc, KubeError):
                    raise KubeCredentialError(
                        credential_error(self.user_name, user, ctx_name, _detail(log.messages, exc))) from exc
                if isinstance(exc, (self.parts.ConfigException, ValueError, OSError)):
                    raise KubeConfigError(f"kubeconfig context {ctx_name!r} is unusable: {exc}") from exc
                raise
        if credential is not None and credential.expires is not None and credential.token:
            configuration.refresh_api_key_hook = _exec_refresh_hook(
                user["exec"], cfg["clusters"][0]["cluster"], credential.expires, self.timeout_s, self._cwd())
        has_token = bool(configuration.api_key)
        if sourced and (log.messages or not (has_token or configuration.cert_file)):
            detail = _detail(log.messages) if log.messages else (
                "this client cannot use that auth provider" if not user.get("exec") else "no credentials came back")
            raise KubeCredentialError(credential_error(self.user_name, user, ctx_name, detail))
        return configuration, namespace, ctx_name

    def _run_exec(self, user: dict[str, Any], cfg: dict[str, Any], ctx_name: str) -> ExecCredential:
        # run here, not by the client's ExecProvider: bounded, in its own process group, and its
        # arguments and stderr never reach a message; the user entry then holds what it returned
        try:
            credential = run_exec_plugin(user["exec"], cfg["clusters"][0]["cluster"], timeout_s=self.timeout_s,
                                         cwd=self._cwd())
        except ExecPluginError as exc:
            raise KubeCredentialError(credential_error(self.user_name, user, ctx_name, str(exc))) from exc
        static = {k: v for k, v in user.items() if k != "exec"}
        static.update(exec_user(credential))
        cfg["users"][0]["user"] = static
        return credential
