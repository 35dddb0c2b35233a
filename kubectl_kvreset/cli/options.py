"""Options shared by every sub-command, defined once as decorators, and the helpers that turn
them into a connection, targets and output.

kubectl passes every flag after the plugin name to the plugin and parses none of them itself
(``k8s.io/kubectl/pkg/cmd/plugin.go``), so the plugin reads kubectl's global flags
(``kubectl options``) on each sub-command.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import click

from ..report import OUTPUT_FORMATS, ExitCode, Report

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
R = TypeVar("R")

EXIT_CODES_HELP = (
    "Exit codes: 0 every targeted tier emptied and confirmed (read-only commands: every pod "
    "answered); 1 something failed or a tier was left full; 2 usage or configuration error; "
    "3 done but some result could not be confirmed (vLLM < 0.26 answers an empty 200); "
    "130 interrupted."
)


def kube_flags(fn: F) -> F:
    """kubectl's global flags: kubeconfig, context, cluster, user, namespace, server, token,
    certificate authority, TLS skip, request timeout, impersonation, verbosity."""
    opts = [
        click.option("--kubeconfig", metavar="PATH", help="Path to the kubeconfig file (default: KUBECONFIG, then ~/.kube/config)."),
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
        click.option("--as-group", "as_group", metavar="GROUP", multiple=True, help="Group to impersonate (repeatable)."),
        click.option("-v", "--v", "verbosity", type=int, default=0, metavar="N", help="Log level (details on stderr; tokens redacted)."),
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


def output_option(fn: F) -> F:
    """``-o/--output table|wide|json|yaml``."""
    return click.option(
        "-o", "--output", type=click.Choice(OUTPUT_FORMATS), default="table", show_default=True,
        help="Output format. json/yaml print a list of objects, each with a 'kind' field.",
    )(fn)


def target_options(fn: F) -> F:
    """Targets: OWNER arguments, ``--all``, ``-l/--selector``."""
    fn = click.option("-l", "--selector", metavar="SELECTOR", help="Label selector for pods, as kubectl get -l.")(fn)
    fn = click.option("--all", "all_targets", is_flag=True, help="Every vLLM server pod in the namespace(s).")(fn)
    fn = click.argument("owners", nargs=-1, metavar="[OWNER]...")(fn)
    return fn


def concurrency_option(fn: F) -> F:
    """``--max-concurrency``: how many pods are worked on at once."""
    return click.option("--max-concurrency", type=click.IntRange(1, 512), default=64, show_default=True,
                        help="Calls in flight at once.")(fn)


def yes_option(fn: F) -> F:
    """``-y/--yes``: do not ask on a terminal (the confirmation table of the README)."""
    return click.option("-y", "--yes", is_flag=True, help="Do not ask for confirmation on a terminal.")(fn)


def rollout_timeout_option(help_text: str) -> Callable[[F], F]:
    """``--timeout DURATION`` (default 300s) bounding a rollout wait, with the command's own help."""
    return click.option("--timeout", default="300s", show_default=True, metavar="DURATION", help=help_text)


def model_only_option(help_text: str) -> Callable[[F], F]:
    """``--model-only``: FS-tier deletion limited to the served model's directories."""
    return click.option("--model-only", is_flag=True, help=help_text)


def transport_option(fn: F) -> F:
    """``--transport auto|proxy|exec|port-forward``: how requests reach the pods."""
    return click.option(
        "--transport", type=click.Choice(["auto", "proxy", "exec", "port-forward"]), default="auto", show_default=True,
        help="How requests reach vLLM: the API server's pod proxy, exec (python3 inside the vLLM container), "
             "port-forward; auto tries them in that order, moving on after a 403 or an unreachable pod.",
    )(fn)


def flags_from(params: dict[str, Any]) -> Any:
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


def info(message: str) -> None:
    """A message for the user on stderr."""
    click.echo(message, err=True)


def fail(message: str, code: ExitCode = ExitCode.FAILED) -> None:
    """Print ``error: message`` on stderr and exit with ``code``."""
    click.echo(f"error: {message}", err=True)
    sys.exit(int(code))


#: ``-v`` level from which requests are logged, and tracebacks shown, on stderr.
VERBOSE_REQUESTS = 6


def redact(text: str) -> str:
    """``text`` with bearer tokens and ``token:``/``password:`` values replaced by ``<redacted>``."""
    import re

    text = re.sub(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+", r"\1<redacted>", text)
    return re.sub(r"(?i)((?:token|password|client-key-data)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+", r"\1<redacted>", text)


def configure_logging(verbosity: int) -> None:
    """``-v N``: from :data:`VERBOSE_REQUESTS` every API request is logged on stderr (method,
    URL, status, milliseconds; tokens never); from 8 also the request headers, redacted."""
    import logging

    logger = logging.getLogger("kubectl_kvreset")
    if verbosity >= VERBOSE_REQUESTS and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG if verbosity >= 8 else logging.INFO)


def handle_errors(fn: F) -> F:
    """Map this package's and the adapter's errors to a message and an exit code: a
    configuration error exits 2 before any work, an API or connection failure exits 1,
    Ctrl-C exits 130, anything unexpected exits 1 with a one-line message. Never a traceback
    unless ``-v`` is 6 or more (then on stderr, tokens redacted)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from ..discovery import TargetError
        from ..kube import KubeApiError, KubeConfigError, KubeConnectionError

        verbosity = int(kwargs.get("verbosity") or 0)
        configure_logging(verbosity)

        def trace() -> None:
            if verbosity >= VERBOSE_REQUESTS:
                import traceback

                click.echo(redact(traceback.format_exc()), err=True)

        try:
            return fn(*args, **kwargs)
        except KubeConfigError as exc:
            trace()
            fail(str(exc), ExitCode.USAGE)
        except TargetError as exc:
            trace()
            fail(str(exc), ExitCode.FAILED)
        except KubeApiError as exc:
            trace()
            if exc.status == 400 and "selector" in exc.message.lower():
                fail(f"{exc.message} (check -l/--selector)", ExitCode.USAGE)
            hint = ""
            if exc.status == 403:
                hint = " (ask for the RBAC permission named above; see the README's Role)"
            elif exc.status == 401:
                hint = " (the credentials were refused: log in again or check the kubeconfig user)"
            fail(f"{exc}{hint}", ExitCode.FAILED)
        except KubeConnectionError as exc:
            trace()
            fail(str(exc), ExitCode.FAILED)
        except KeyboardInterrupt:
            info("interrupted")
            sys.exit(int(ExitCode.INTERRUPTED))
        except (click.ClickException, click.exceptions.Exit, SystemExit):
            raise
        except Exception as exc:  # a defect: say so in one line, never a traceback by default
            trace()
            fail(redact(f"internal error: {type(exc).__name__}: {exc} (run again with -v=6 for details)"),
                 ExitCode.FAILED)

    return wrapper  # type: ignore[return-value]


#: Set when the user pressed Ctrl-C during :func:`parallel`: no new work starts, and the
#: report's exit code becomes 130.
INTERRUPTED = threading.Event()

#: How long calls already in flight may finish after Ctrl-C (each is bounded on its own too).
INFLIGHT_BOUND_S = 40.0


class NotRun:
    """The result of an item :func:`parallel` did not run (or whose call did not finish)
    because the run was interrupted."""

    def __repr__(self) -> str:
        return "NOT_RUN"


NOT_RUN = NotRun()


def parallel(items: Iterable[T], fn: Callable[[T], R], max_workers: int) -> list[R | NotRun]:
    """Apply ``fn`` to every item with at most ``max_workers`` calls in flight; results come
    back in the items' order.

    Ctrl-C stops new work: items not started get :data:`NOT_RUN`, calls in flight are waited
    for up to :data:`INFLIGHT_BOUND_S` (a second Ctrl-C stops waiting), and
    :data:`INTERRUPTED` is set so later phases are skipped and the exit code is 130.
    """
    from concurrent.futures import wait

    items = list(items)
    if not items:
        return []
    if INTERRUPTED.is_set():
        return [NOT_RUN] * len(items)
    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items))))
    futures = [pool.submit(fn, item) for item in items]
    try:
        results: list[R | NotRun] = [f.result() for f in futures]
    except KeyboardInterrupt:
        INTERRUPTED.set()
        for f in futures:
            f.cancel()
        running = [f for f in futures if not f.cancelled() and not f.done()]
        info(f"interrupted: no new calls start; waiting up to {INFLIGHT_BOUND_S:.0f}s for {len(running)} in flight "
             "(Ctrl-C again to stop waiting)")
        wait(running, timeout=INFLIGHT_BOUND_S)
        pool.shutdown(wait=False, cancel_futures=True)
        return [f.result() if f.done() and not f.cancelled() and f.exception() is None else NOT_RUN for f in futures]
    pool.shutdown(wait=True)
    return results


def emit(report: Report, fmt: str, *, empty_message: str) -> None:
    """Print the report on stdout in ``fmt`` (``No resources found`` style note on stderr when
    a table has no rows) and exit with the report's code (130 after Ctrl-C)."""
    if INTERRUPTED.is_set():
        report.codes.append(ExitCode.INTERRUPTED)
    if not report.rows and fmt in ("table", "wide"):
        info(empty_message)
    else:
        click.echo(report.render(fmt), nl=False)
    sys.exit(int(report.exit_code))
