"""Credentials of a kubeconfig user: exec credential plugins run by this adapter (bounded,
process-group kill, stdout capped), their ``ExecCredential`` answers, and the one message for a
credential source that failed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_LOG = logging.getLogger("kubectl_kvreset")

def credential_error(user_name: str, user: Mapping[str, Any], context: str, detail: str) -> str:
    """The one message for a credential source that failed: names the kubeconfig user, the
    context, the exec plugin's executable (never its arguments, which may carry a client
    secret, nor what it wrote on stderr) or auth provider, the failure, and the exec plugin's
    ``installHint`` when it has one (client-go prints it when the command is missing, and says
    only ``executable X failed with exit code N`` of a failing one:
    ``plugin/pkg/client/auth/exec/exec.go``)."""
    where = f'user "{user_name or "(none)"}" of context "{context or "(none)"}"'
    exec_cfg = user.get("exec") if isinstance(user.get("exec"), dict) else None
    if exec_cfg is not None:
        text = f"the exec credential plugin of {where} failed: {detail}"
        hint = str(exec_cfg.get("installHint") or "").strip()
        if hint:
            text += "; " + " ".join(hint.split())
        return text
    provider = user.get("auth-provider") if isinstance(user.get("auth-provider"), dict) else {}
    name = str((provider or {}).get("name") or "?")
    return f"the auth provider {name!r} of {where} failed: {detail}"


#: The ExecCredential versions client-go still speaks (``v1alpha1`` was removed in 1.24).
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class ExecPluginError(Exception):
    """An exec credential plugin that did not give credentials; ``str()`` is the one-line
    reason (``executable X failed with exit code N``), never its arguments or output."""


@dataclass(frozen=True)
class ExecCredential:
    """What an exec credential plugin handed back (``ExecCredential.status``): a bearer
    ``token``, or a PEM client certificate and key; ``expires`` is the epoch second of
    ``expirationTimestamp`` (None: valid until the API server refuses it)."""

    token: str | None = field(default=None, repr=False)
    client_certificate: str | None = field(default=None, repr=False)
    client_key: str | None = field(default=None, repr=False)
    expires: float | None = None


def exec_info(exec_cfg: Mapping[str, Any], cluster: Mapping[str, Any], interactive: bool) -> dict[str, Any]:
    """The ``KUBERNETES_EXEC_INFO`` object client-go hands an exec plugin: ``kind``,
    ``apiVersion``, ``spec.interactive`` and, with ``provideClusterInfo``, ``spec.cluster``
    (server, TLS settings, and the cluster's ``client.authentication.k8s.io/exec`` extension as
    ``config``), per ``k8s.io/client-go/pkg/apis/clientauthentication/v1/types.go``."""
    spec: dict[str, Any] = {"interactive": interactive}
    if exec_cfg.get("provideClusterInfo"):
        info: dict[str, Any] = {"server": cluster.get("server", "")}
        for src, dst in (("tls-server-name", "tls-server-name"),
                         ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
                         ("certificate-authority-data", "certificate-authority-data"), ("proxy-url", "proxy-url"),
                         ("disable-compression", "disable-compression")):
            if cluster.get(src) not in (None, ""):
                info[dst] = cluster[src]
        if cluster.get("certificate-authority") and not cluster.get("certificate-authority-data"):
            import base64

            try:
                info["certificate-authority-data"] = base64.b64encode(
                    Path(str(cluster["certificate-authority"])).read_bytes()).decode()
            except OSError:
                pass
        for ext in cluster.get("extensions") or []:
            if isinstance(ext, dict) and ext.get("name") == "client.authentication.k8s.io/exec":
                info["config"] = ext.get("extension")
        spec["cluster"] = info
    return {"kind": "ExecCredential", "apiVersion": str(exec_cfg.get("apiVersion") or ""), "spec": spec}


def _kill_group(proc: Any) -> None:
    """SIGKILL the plugin's whole process group (it was started in its own session), then reap it."""
    import signal

    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except Exception:  # already reaped or unkillable: nothing more to do
        pass


def _die_with_parent() -> Any:
    """A ``preexec_fn`` for the plugin's child: be sent SIGKILL when the plugin process dies,
    even by SIGKILL (Linux ``prctl(PR_SET_PDEATHSIG)``); None elsewhere. libc is looked up here,
    before the fork, so the child imports nothing (another thread may hold the import lock)."""
    import sys

    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no libc symbol: the process group kill still applies
        return None
    kill = int(signal.SIGKILL)

    def set_death_signal() -> None:
        prctl(1, kill, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG

    return set_death_signal


def run_exec_plugin(exec_cfg: Mapping[str, Any], cluster: Mapping[str, Any], *, timeout_s: float | None,
                    cwd: str | None = None) -> ExecCredential:
    """Run a kubeconfig user's exec credential plugin as client-go does
    (``plugin/pkg/client/auth/exec/exec.go``) and return its credential.

    The command runs with the kubeconfig's ``env`` added, ``KUBERNETES_EXEC_INFO`` set
    (:func:`exec_info`), in its own session (so its whole process group can be killed), bounded
    by ``timeout_s`` (``--request-timeout``; None: unbounded). ``interactiveMode``: ``Never``
    gives it no terminal; ``IfAvailable`` (the default) and ``Always`` give it the terminal's
    stdin and stderr when stdin is one, and ``Always`` fails without one. Otherwise its stderr
    is read and dropped: a plugin may print tokens there. Its stdout is read up to
    :data:`EXEC_STDOUT_LIMIT` (1 MiB); a plugin writing more is stopped. A Ctrl-C, SIGTERM or any error while
    it runs kills its process group before the error goes on.

    Raises:
        ExecPluginError: not found, killed at the bound or past the stdout limit, a non-zero
            exit, or an answer that is
            not an ExecCredential of the requested version with a token or certificate and key.
    """
    import shutil
    import subprocess
    import sys

    command = str(exec_cfg.get("command") or "")
    api_version = str(exec_cfg.get("apiVersion") or "")
    if not command:
        raise ExecPluginError("exec: the kubeconfig names no command")
    if api_version not in EXEC_API_VERSIONS:
        raise ExecPluginError(f"exec: apiVersion {api_version!r} is not supported; "
                              f"use one of {', '.join(EXEC_API_VERSIONS)}")
    mode = str(exec_cfg.get("interactiveMode") or "IfAvailable")
    terminal = bool(sys.stdin is not None and hasattr(sys.stdin, "isatty") and sys.stdin.isatty())
    interactive = mode != "Never" and terminal
    if mode == "Always" and not terminal:
        raise ExecPluginError(f"exec: executable {command} needs a terminal (interactiveMode: Always) "
                              "and standard input is not one")
    env = dict(os.environ)
    for item in exec_cfg.get("env") or []:
        if isinstance(item, dict) and item.get("name"):
            env[str(item["name"])] = str(item.get("value") or "")
    env["KUBERNETES_EXEC_INFO"] = json.dumps(exec_info(exec_cfg, cluster, interactive))
    path = command if os.sep in command else shutil.which(command, path=env.get("PATH"))
    if path is None or (os.sep in command and not os.path.exists(os.path.join(cwd or "", command))):
        raise ExecPluginError(f"exec: executable {command} not found")
    argv = [command] + [str(a) for a in exec_cfg.get("args") or []]
    try:
        proc = subprocess.Popen(argv, cwd=cwd or None, env=env, stdout=subprocess.PIPE,
                                stdin=None if interactive else subprocess.DEVNULL,
                                stderr=None if interactive else subprocess.PIPE,
                                start_new_session=True, preexec_fn=_die_with_parent())
    except OSError as exc:
        raise ExecPluginError(
            f"exec: executable {command} could not start: {exc.strerror or type(exc).__name__}") from exc
    readers = _ExecReaders(proc)
    try:
        with _on_sigterm_raise():
            finished = readers.wait(timeout_s)
    except BaseException:  # Ctrl-C, SIGTERM, anything: never leave the plugin running
        _kill_group(proc)
        raise
    if readers.overflow:
        _kill_group(proc)
        raise ExecPluginError(f"exec: executable {command} wrote more than {EXEC_STDOUT_LIMIT >> 20} MiB on "
                              "stdout (an ExecCredential is a small JSON object): stopped it")
    if not finished:
        # the message names the command only: TimeoutExpired would carry its arguments
        _kill_group(proc)
        raise ExecPluginError(f"exec: executable {command} gave no credentials within {timeout_s:g} s "
                              "(--request-timeout): stopped it")
    out = readers.stdout()
    if proc.returncode:
        if proc.returncode < 0:
            raise ExecPluginError(f"exec: executable {command} was killed by signal {-proc.returncode}")
        raise ExecPluginError(f"exec: executable {command} failed with exit code {proc.returncode}")
    return _read_exec_credential(out or b"", command, api_version)


#: The most an exec credential plugin may write on stdout (bytes): an ExecCredential is a small
#: JSON object; more is read no further and the plugin is stopped. Its stderr is read and dropped
#: in chunks of :data:`_EXEC_CHUNK` bytes, never held.
EXEC_STDOUT_LIMIT = 1 << 20
_EXEC_CHUNK = 1 << 16


class _ExecReaders:
    """Reads an exec plugin's stdout (up to :data:`EXEC_STDOUT_LIMIT` bytes) and its stderr
    (discarded) on two daemon threads, so neither pipe fills and memory stays bounded; a plugin
    that writes past the limit has its process group sent SIGKILL at once."""

    def __init__(self, proc: Any) -> None:
        self.proc, self.overflow = proc, False
        self._chunks: list[bytes] = []
        self._threads = [threading.Thread(target=self._read_stdout, daemon=True)]
        if proc.stderr is not None:
            self._threads.append(threading.Thread(target=self._drain, args=(proc.stderr,), daemon=True))
        for thread in self._threads:
            thread.start()

    def _read_stdout(self) -> None:
        import signal

        total, fd = 0, self.proc.stdout.fileno()
        while True:
            chunk = os.read(fd, _EXEC_CHUNK)
            if not chunk:
                return
            total += len(chunk)
            if total > EXEC_STDOUT_LIMIT:
                self.overflow = True
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                return
            self._chunks.append(chunk)

    @staticmethod
    def _drain(stream: Any) -> None:
        fd = stream.fileno()
        while os.read(fd, _EXEC_CHUNK):
            pass

    def wait(self, timeout_s: float | None) -> bool:
        """Wait for the plugin to exit and its pipes to close, at most ``timeout_s`` seconds in
        all (None: unbounded); False when the bound passed first."""
        import subprocess

        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if thread.is_alive():  # a child of the plugin still holds the pipe open
                return False
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return True

    def stdout(self) -> bytes:
        """What the plugin wrote on stdout (at most :data:`EXEC_STDOUT_LIMIT` bytes)."""
        return b"".join(self._chunks)


class _on_sigterm_raise:
    """Context manager (main thread only, else nothing): SIGTERM raises ``SystemExit(143)``
    while it is active, so the plugin's process group is killed on the way out. Only where
    SIGTERM has its default action (which ends the process with nothing cleaned up): a handler
    the caller installed (the command line's, which raises ``KeyboardInterrupt`` before anything
    is changed and says so) is kept."""

    def __enter__(self) -> None:
        import signal

        self.saved: Any = None
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None)):
            def stop(signum: int, frame: Any) -> None:
                raise SystemExit(128 + signum)

            self.saved = signal.signal(signal.SIGTERM, stop)

    def __exit__(self, *exc: Any) -> None:
        import signal

        if self.saved is not None:
            signal.signal(signal.SIGTERM, self.saved)


def _read_exec_credential(out: bytes, command: str, api_version: str) -> ExecCredential:
    import datetime

    try:
        doc = json.loads(out)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ExecPluginError(f"exec: executable {command} wrote no ExecCredential JSON on stdout") from exc
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ExecPluginError(f"exec: executable {command} answered something other than an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise ExecPluginError(f"exec: executable {command} answered apiVersion {doc.get('apiVersion')!r}, "
                              f"not the {api_version!r} the kubeconfig asks for")
    found = doc.get("status")
    status: dict[str, Any] = found if isinstance(found, dict) else {}
    token = status.get("token") or None
    cert, key = status.get("clientCertificateData") or None, status.get("clientKeyData") or None
    if not token and not (cert and key):
        raise ExecPluginError(f"exec: executable {command} gave neither a token nor a client certificate and key")
    expires = None
    if status.get("expirationTimestamp"):
        try:
            stamp = str(status["expirationTimestamp"]).replace("Z", "+00:00")
            expires = datetime.datetime.fromisoformat(stamp).timestamp()
        except ValueError as exc:
            raise ExecPluginError(f"exec: executable {command} gave an unreadable expirationTimestamp") from exc
    return ExecCredential(token=str(token) if token else None, client_certificate=str(cert) if cert else None,
                          client_key=str(key) if key else None, expires=expires)


def _exec_refresh_hook(exec_cfg: Mapping[str, Any], cluster: Mapping[str, Any], expires: float,
                       timeout_s: float | None, cwd: str | None) -> Any:
    """The client's ``refresh_api_key_hook`` for an exec token with an ``expirationTimestamp``:
    once it has passed, the plugin runs again before the next request; a failure is logged (the
    adapter collects it as :meth:`Transport.authorization` does) and the old token is kept."""
    state = {"expires": expires}

    def hook(configuration: Any) -> None:
        if time.time() < state["expires"]:
            return
        try:
            fresh = run_exec_plugin(exec_cfg, cluster, timeout_s=timeout_s, cwd=cwd)
        except ExecPluginError as exc:
            logging.error(str(exc))
            state["expires"] = time.time() + 5.0  # not again for every request
            return
        if fresh.token:
            configuration.api_key["BearerToken"] = "Bearer " + fresh.token
        state["expires"] = fresh.expires if fresh.expires is not None else float("inf")

    return hook


def exec_user(credential: ExecCredential) -> dict[str, Any]:
    """A static kubeconfig ``user`` entry holding ``credential`` (the client then loads it as
    any token or client-certificate user)."""
    import base64

    if credential.token:
        return {"token": credential.token}
    return {"client-certificate-data": base64.b64encode(str(credential.client_certificate).encode()).decode(),
            "client-key-data": base64.b64encode(str(credential.client_key).encode()).decode()}


def _detail(messages: Sequence[str], exc: BaseException | None = None) -> str:
    texts = [m.strip() for m in messages if m and m.strip()]
    if exc is not None:
        texts.append(str(exc).strip() or type(exc).__name__)
    return "; ".join(dict.fromkeys(texts)) or "no credentials came back"
