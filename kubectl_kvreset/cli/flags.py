"""kubectl's global flags, accepted on either side of the sub-command.

kubectl passes every flag after the plugin name to the plugin and parses none of them itself
(``k8s.io/kubectl/pkg/cmd/plugin.go``), and kubectl's own commands take the global flags
(``kubectl options``) before or after the verb, so ``kubectl kvreset -n NS clear --all`` and
``kubectl kvreset clear -n NS --all`` mean the same. The group and every sub-command carry the
same options (:func:`kube_flags`); :func:`merge_global_flags` combines them: a single-valued
flag given on both sides takes the value after the sub-command, a repeatable one
(``--as-group``) adds up, an on/off flag (``-A``, ``--insecure-skip-tls-verify``) is on when
given on either side; ``-A`` wins over ``-n`` wherever each stands, as in kubectl.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

if TYPE_CHECKING:
    from ..kube import KubeFlags

F = TypeVar("F", bound=Callable[..., Any])

#: The parameter names :func:`kube_flags` defines.
KUBE_PARAMS = ("kubeconfig", "context", "cluster", "user", "namespace", "all_namespaces", "server", "token",
               "certificate_authority", "insecure_skip_tls_verify", "request_timeout", "as_user", "as_group",
               "verbosity")

#: Repeatable flags: the values before and after the sub-command add up.
REPEATABLE = frozenset({"as_group"})


def kube_flags(fn: F) -> F:
    """kubectl's global flags: kubeconfig, context, cluster, user, namespace, server, token,
    certificate authority, TLS skip, request timeout, impersonation, verbosity. Hidden from each
    command's help (listed once by ``kubectl kvreset options``, as ``kubectl options`` lists
    kubectl's), except ``-n`` and ``-A``, which every command's examples use."""
    for opt in reversed(_kube_options(hidden=True)):
        fn = opt(fn)
    return fn


def global_flags_help(width: int = 100) -> str:
    """The text of ``kubectl kvreset options``: every global flag with its help."""
    command = click.Command("options")
    for opt in _kube_options(hidden=False):  # a Command keeps its params in the order given
        opt(command)
    ctx = click.Context(command, info_name="kubectl kvreset", max_content_width=width)
    formatter = ctx.make_formatter()
    rows = [r for r in (p.get_help_record(ctx) for p in command.params) if r is not None]
    formatter.write_text("The following options can be passed to any command (before or after it):")
    with formatter.section("Global flags"):
        formatter.write_dl(rows)
    return formatter.getvalue()


def _kube_options(*, hidden: bool) -> list[Callable[[Any], Any]]:
    """The decorators of the global flags; ``hidden`` for all but ``-n``/``-A``."""
    opts = [
        click.option("--kubeconfig", metavar="PATH",
                     help="Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config)."),
        click.option("--context", metavar="NAME", help="The kubeconfig context to use."),
        click.option("--cluster", metavar="NAME", help="The kubeconfig cluster to use."),
        click.option("--user", metavar="NAME", help="The kubeconfig user to use."),
        click.option("-n", "--namespace", metavar="NS", help="Namespace (default: the context's, else 'default')."),
        click.option("-A", "--all-namespaces", is_flag=True, help="Act on every namespace."),
        click.option("-s", "--server", metavar="URL", help="Address of the Kubernetes API server."),
        click.option("--token", metavar="TOKEN", help="Bearer token for the API server."),
        click.option("--certificate-authority", metavar="PATH", help="Path to a CA certificate file."),
        click.option("--insecure-skip-tls-verify", is_flag=True, help="Do not verify the API server's certificate."),
        click.option("--request-timeout", metavar="DURATION", default=None,
                     help="Bound on each API request, e.g. 30s, 1m; 0 for none. [default: 30s]"),
        click.option("--as", "as_user", metavar="USER", help="Username to impersonate."),
        click.option("--as-group", "as_group", metavar="GROUP", multiple=True,
                     help="Group to impersonate (repeatable)."),
        click.option("-v", "--v", "verbosity", type=int, default=0, metavar="N",
                     help="Log level (details on stderr; tokens redacted)."),
    ]
    shown = ("--namespace", "--all-namespaces")
    return [opt if not hidden or any(s in _decls(opt) for s in shown) else _hidden(opt) for opt in opts]


def _decls(opt: Callable[[Any], Any]) -> tuple[str, ...]:
    probe = opt(click.Command("probe"))
    return tuple(d for p in probe.params for d in getattr(p, "opts", ()))


def _hidden(opt: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``opt`` with its option hidden from help."""

    def apply(fn: Any) -> Any:
        before = list(getattr(fn, "__click_params__", []))
        out = opt(fn)
        for param in getattr(out, "__click_params__", []):
            if param not in before and isinstance(param, click.Option):
                param.hidden = True
        return out

    return apply




def flags_from(params: dict[str, Any]) -> KubeFlags:
    """Build a :class:`~kubectl_kvreset.kube.KubeFlags` from the click parameters."""
    from ..kube import KubeFlags

    return KubeFlags(
        kubeconfig=params.get("kubeconfig"), context=params.get("context"), cluster=params.get("cluster"),
        user=params.get("user"), namespace=params.get("namespace"), all_namespaces=bool(params.get("all_namespaces")),
        server=params.get("server"), token=params.get("token"),
        certificate_authority=params.get("certificate_authority"),
        insecure_skip_tls_verify=bool(params.get("insecure_skip_tls_verify")),
        request_timeout=params.get("request_timeout"), impersonate=params.get("as_user"),
        impersonate_groups=tuple(params.get("as_group") or ()), verbosity=int(params.get("verbosity") or 0),
    )


def _given(ctx: click.Context, name: str) -> bool:
    return ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE


def merge_global_flags(ctx: click.Context, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` of a sub-command with kubectl's flags given before it (on the group, the
    parent of ``ctx``) merged in by the rules of the module docstring. Other parameters are
    returned unchanged; without a parent context (a command invoked on its own) ``params`` is."""
    parent = ctx.parent
    if parent is None:
        return params
    out = dict(params)
    for name in KUBE_PARAMS:
        if name not in parent.params:
            continue
        before = parent.params[name]
        if name in REPEATABLE:
            out[name] = tuple(before or ()) + tuple(params.get(name) or ())
        elif isinstance(before, bool):
            out[name] = bool(before) or bool(params.get(name))
        elif _given(parent, name) and not _given(ctx, name):
            out[name] = before
    return out
