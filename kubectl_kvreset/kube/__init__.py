"""The one adapter over the official ``kubernetes`` client.

Nothing else in the package imports ``kubernetes``; this module imports it lazily, inside
:meth:`Kube.connect`, so ``kubectl kvreset --help`` stays fast.

The client is used for what it does well (reading kubeconfig users: tokens, client
certificates, exec credential plugins, in-cluster service accounts) and its urllib3 pool for
transport. Answers come back as plain JSON-decoded dicts with the API's own camelCase keys and
errors as :class:`KubeApiError` built from the API server's ``Status`` object, so callers see
what ``kubectl`` would show.

Kubeconfig resolution follows kubectl, not the Python client
(``k8s.io/client-go/tools/clientcmd/loader.go``): with ``KUBECONFIG=a:b`` the first file that
sets a value wins (``current-context`` included), relative certificate paths are resolved
against the file that names them, and ``--context``, ``--cluster``, ``--user``, ``--server``,
``--token``, ``--certificate-authority``, ``--insecure-skip-tls-verify`` and ``--as`` override
the chosen context as kubectl's flags do.

Start-up: only the parts of ``kubernetes`` that are used are imported (the kubeconfig and
in-cluster loaders, the exec credential provider and ``Configuration``): see
:func:`client_parts`. The package's ``__init__`` modules would import every API and model
(``kubernetes.client.models`` alone is about 770 modules, 0.3 s). Transport is this module's
own: one ``ssl.SSLContext`` and one urllib3 pool of keep-alive connections, at most
``pool_size`` of them (:class:`Transport`).

The package's modules, by concern: :mod:`.errors` (exception types, flags, answers),
:mod:`.client` (the lazy ``kubernetes`` import), :mod:`.credentials` (exec credential plugins),
:mod:`.kubeconfig` (kubeconfig merging and kubectl's overrides), :mod:`.transport` (TLS and the
keep-alive pool), :mod:`.api` (:class:`Kube`), :mod:`.streams` (exec and port-forward).
"""

from __future__ import annotations

from .api import (
    Kube,
)
from .client import (
    client_parts,
)
from .credentials import (
    EXEC_API_VERSIONS,
    EXEC_STDOUT_LIMIT,
    ExecCredential,
    ExecPluginError,
    credential_error,
    exec_info,
    exec_user,
    run_exec_plugin,
)
from .errors import (
    CONNECTION_RETRIES,
    DEFAULT_REQUEST_TIMEOUT_S,
    EXEC_OUTPUT_MAX_BYTES,
    MAX_RETRIES,
    POD_ANSWER_MAX_BYTES,
    HttpAnswer,
    KubeAnswerTooLarge,
    KubeApiError,
    KubeConfigError,
    KubeConnectionError,
    KubeCredentialError,
    KubeError,
    KubeFlags,
    is_apiserver_status,
    resource_path,
    retry_after_seconds,
    size_text,
    status_message,
)
from .kubeconfig import (
    apply_overrides,
    kubeconfig_paths,
    merge_kubeconfigs,
    parse_duration,
)
from .streams import (
    ExecResult,
    ForwardLoop,
    WsFrames,
    parse_http_response,
    read_exec_status,
)
from .transport import (
    Transport,
    _KeepAlive,
)

__all__ = [
    "CONNECTION_RETRIES",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "EXEC_API_VERSIONS",
    "EXEC_OUTPUT_MAX_BYTES",
    "EXEC_STDOUT_LIMIT",
    "ExecCredential",
    "ExecPluginError",
    "ExecResult",
    "ForwardLoop",
    "HttpAnswer",
    "Kube",
    "KubeAnswerTooLarge",
    "KubeApiError",
    "KubeConfigError",
    "KubeConnectionError",
    "KubeCredentialError",
    "KubeError",
    "KubeFlags",
    "MAX_RETRIES",
    "POD_ANSWER_MAX_BYTES",
    "Transport",
    "WsFrames",
    "_KeepAlive",
    "apply_overrides",
    "client_parts",
    "credential_error",
    "exec_info",
    "exec_user",
    "is_apiserver_status",
    "kubeconfig_paths",
    "merge_kubeconfigs",
    "parse_duration",
    "parse_http_response",
    "read_exec_status",
    "resource_path",
    "retry_after_seconds",
    "run_exec_plugin",
    "size_text",
    "status_message",
]
