"""Kubeconfig resolution as kubectl does it (``k8s.io/client-go/tools/clientcmd/loader.go``): with
``KUBECONFIG=a:b`` the first file that sets a value wins (``current-context`` included), relative
certificate paths are resolved against the file that names them, and ``--context``,
``--cluster``, ``--user``, ``--server``, ``--token``, ``--certificate-authority``,
``--insecure-skip-tls-verify`` and ``--as`` override the chosen context as kubectl's flags do.
Also kubectl's duration syntax (``--request-timeout``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from .errors import _PATH_KEYS, DEFAULT_REQUEST_TIMEOUT_S, KubeConfigError, KubeFlags

_LOG = logging.getLogger("kubectl_kvreset")

def parse_duration(text: str | None, default: float = DEFAULT_REQUEST_TIMEOUT_S) -> float | None:
    """Parse a kubectl duration (``--request-timeout``, ``--timeout``) into seconds.

    Accepts Go durations (``"1m30s"``, ``"500ms"``, ``"2h"``) and a bare number of seconds, as
    kubectl does. ``"0"`` means no bound and returns None; None returns ``default``.

    Raises:
        KubeConfigError: the text is not a duration (the message names the flag's value).
    """
    if text is None:
        return default
    t = text.strip()
    try:
        seconds = float(t)
    except ValueError:
        import durationpy  # small, pure Python, a dependency of the kubernetes client

        try:
            seconds = durationpy.from_str(t).total_seconds()
        except Exception as exc:  # durationpy raises its own error types
            raise KubeConfigError(
                f"invalid duration {text!r}: use a number of seconds or a unit such as 30s, 2m, 1h"
            ) from exc
    if seconds < 0:
        raise KubeConfigError(f"invalid duration {text!r}: must not be negative")
    return None if seconds == 0 else seconds


def kubeconfig_paths(flag: str | None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The kubeconfig files kubectl would read, in precedence order.

    ``--kubeconfig`` alone if given; else every entry of ``KUBECONFIG`` (``os.pathsep``
    separated, empty entries and duplicates dropped); else ``~/.kube/config``.
    Files that do not exist are kept out, as kubectl ignores them (except ``--kubeconfig``,
    which must exist: see :func:`merge_kubeconfigs`).
    """
    env = os.environ if environ is None else environ
    if flag:
        return [Path(flag).expanduser()]
    raw = env.get("KUBECONFIG", "")
    if raw:
        seen: list[Path] = []
        for part in raw.split(os.pathsep):
            if part and Path(part).expanduser() not in seen:
                seen.append(Path(part).expanduser())
        return [p for p in seen if p.exists()]
    default = Path(env.get("HOME", str(Path.home()))) / ".kube" / "config"
    return [default] if default.exists() else []


def _absolutise(entry: dict[str, Any], keys: Iterable[str], base: Path) -> None:
    for key in keys:
        value = entry.get(key)
        if isinstance(value, str) and value and not os.path.isabs(value):
            entry[key] = str((base / value).resolve())


def merge_kubeconfigs(paths: Sequence[Path]) -> dict[str, Any]:
    """Merge kubeconfig files with kubectl's rule: the first file that sets a value wins.

    Named clusters, users and contexts are taken from the first file defining each name;
    ``current-context`` from the first file that sets one. Relative ``certificate-authority``,
    ``client-certificate``, ``client-key`` and ``tokenFile`` paths are resolved against the
    directory of the file naming them (client-go ``ResolveLocalPaths``).

    Returns a kubeconfig dict (``clusters``, ``users``, ``contexts`` lists, ``current-context``).

    Raises:
        KubeConfigError: a file cannot be read or is not a kubeconfig mapping.
    """
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": [], "current-context": ""}
    names: dict[str, set[str]] = {"clusters": set(), "users": set(), "contexts": set()}
    for path in paths:
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except OSError as exc:
            raise KubeConfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise KubeConfigError(f"kubeconfig {path} is not valid YAML: {exc}") from exc
        if not isinstance(doc, dict):
            raise KubeConfigError(f"kubeconfig {path} is not a mapping")
        if not merged["current-context"] and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for section, inner in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in doc.get(section) or []:
                if not isinstance(item, dict) or not item.get("name") or item["name"] in names[section]:
                    continue
                names[section].add(item["name"])
                body = dict(item.get(inner) or {})
                _absolutise(body, _PATH_KEYS.get(section, ()), path.parent)
                merged[section].append({"name": item["name"], inner: body})
    return merged


def _find(cfg: Mapping[str, Any], section: str, name: str) -> dict[str, Any] | None:
    for item in cfg.get(section) or []:
        if item.get("name") == name:
            return dict(item)
    return None


def apply_overrides(cfg: dict[str, Any], flags: KubeFlags) -> tuple[dict[str, Any], str, str]:
    """Apply kubectl's override flags to a merged kubeconfig.

    Returns ``(config, context_name, namespace)``: a config whose ``current-context`` is a
    synthetic context combining the chosen cluster and user with the flag overrides, the name
    of the context the user chose, and the namespace (``-n``, else the context's, else
    ``default``).

    Raises:
        KubeConfigError: no context is selected, or a named context, cluster or user is absent.
    """
    ctx_name = flags.context or cfg.get("current-context") or ""
    ctx: dict[str, Any] = {}
    if ctx_name:
        found = _find(cfg, "contexts", ctx_name)
        if found is None:
            raise KubeConfigError(f'context "{ctx_name}" does not exist in the kubeconfig '
                                  '(see kubectl config get-contexts)')
        ctx = dict(found.get("context") or {})
    elif not flags.server:
        raise KubeConfigError(
            "no current context: set one with 'kubectl config use-context NAME' or pass --context"
        )
    cluster_name = flags.cluster or ctx.get("cluster", "")
    user_name = flags.user or ctx.get("user", "")
    cluster = dict((_find(cfg, "clusters", cluster_name) or {}).get("cluster") or {}) if cluster_name else {}
    if cluster_name and not cluster and not flags.server:
        raise KubeConfigError(f'cluster "{cluster_name}" does not exist in the kubeconfig')
    found_user = _find(cfg, "users", user_name) if user_name else None
    if flags.user and found_user is None:
        raise KubeConfigError(f'auth info "{flags.user}" does not exist in the kubeconfig (see kubectl config view)')
    user = dict((found_user or {}).get("user") or {})
    if flags.server:
        cluster["server"] = flags.server
    if flags.certificate_authority:
        cluster["certificate-authority"] = str(Path(flags.certificate_authority).expanduser().resolve())
        cluster.pop("certificate-authority-data", None)
    if flags.insecure_skip_tls_verify:
        cluster["insecure-skip-tls-verify"] = True
        cluster.pop("certificate-authority", None)
        cluster.pop("certificate-authority-data", None)
    if flags.token:
        for key in ("token", "tokenFile", "exec", "auth-provider", "username", "password"):
            user.pop(key, None)
        user["token"] = flags.token
    if not cluster.get("server"):
        raise KubeConfigError(
            f'cluster "{cluster_name or "(none)"}" has no server address: pass --server or fix the kubeconfig'
        )
    namespace = flags.namespace or ctx.get("namespace") or "default"
    out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kvreset", "cluster": cluster}],
        "users": [{"name": "kvreset", "user": user}],
        "contexts": [{"name": "kvreset", "context": {"cluster": "kvreset", "user": "kvreset", "namespace": namespace}}],
        "current-context": "kvreset",
    }
    return out, ctx_name, namespace
