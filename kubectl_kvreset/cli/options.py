"""Options shared by every sub-command, defined once as decorators, and the helpers that turn
them into a connection, targets and output.

kubectl passes every flag after the plugin name to the plugin and parses none of them itself
(``k8s.io/kubectl/pkg/cmd/plugin.go``), so the plugin reads kubectl's global flags
(``kubectl options``) on each sub-command.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import click

from ..pool import INFLIGHT_BOUND_S, NOT_RUN, Cancel, NotRun
from ..pool import parallel as run_parallel
from ..report import OUTPUT_FORMATS, ExitCode, Report
from .flags import flags_from, kube_flags, merge_global_flags

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["NOT_RUN", "NotRun", "flags_from", "kube_flags"]
T = TypeVar("T")
R = TypeVar("R")

EXIT_CODES_HELP = (
    "Exit codes: 0 every targeted tier emptied and confirmed (read-only commands: every pod "
    "answered); 1 something failed or a tier was left full; 2 usage or configuration error; "
    "3 done but some result could not be confirmed (vLLM < 0.26 answers an empty 200); "
    "130 interrupted."
)


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


def whole_tier_option(fn: F) -> F:
    """``--whole-tier``: on a volume pods outside the targets also mount, empty the FS tier
    root whole (their models' files too) instead of only the targets' models' directories."""
    return click.option(
        "--whole-tier", is_flag=True,
        help="On a volume that pods outside the targets also mount, delete every model's files under the FS tier "
             "root, theirs too. Default there: only the directories of the models the targets serve (a volume "
             "only targets mount is emptied whole). Not with --model-only, which keeps to the targets' models "
             "on every volume.")(fn)


def transport_option(fn: F) -> F:
    """``--transport auto|proxy|exec|port-forward``: how requests reach the pods."""
    return click.option(
        "--transport", type=click.Choice(["auto", "proxy", "exec", "port-forward"]), default="auto", show_default=True,
        help="How requests reach vLLM: the API server's pod proxy, exec (python3 inside the vLLM container), "
             "port-forward; auto tries them in that order, moving on after a 403 or an unreachable pod.",
    )(fn)


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

        current = click.get_current_context(silent=True)
        if current is not None:  # kubectl's flags given before the sub-command
            kwargs = merge_global_flags(current, kwargs)
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
        except click.Abort:  # end of input (or ^D) at a prompt: nothing was confirmed
            info("no answer: nothing changed")
            sys.exit(int(ExitCode.FAILED))
        except (click.ClickException, click.exceptions.Exit, SystemExit):
            raise
        except Exception as exc:  # a defect: say so in one line, never a traceback by default
            trace()
            fail(redact(f"internal error: {type(exc).__name__}: {exc} (run again with -v=6 for details)"),
                 ExitCode.FAILED)

    return wrapper  # type: ignore[return-value]


def _say_interrupted(running: int) -> None:
    info(f"interrupted: no new calls start; waiting up to {INFLIGHT_BOUND_S:.0f}s for {running} in flight "
         "(Ctrl-C again to stop waiting)")


#: The command line's cancel handle: set when the user pressed Ctrl-C during :func:`parallel`
#: (or a job phase); no new work starts, later phases are skipped, and the exit code is 130.
INTERRUPTED = Cancel(on_cancel=_say_interrupted)


def parallel(items: Iterable[T], fn: Callable[[T], R], max_workers: int) -> list[R | NotRun]:
    """:func:`kubectl_kvreset.pool.parallel` under the command line's :data:`INTERRUPTED`."""
    return run_parallel(items, fn, max_workers, INTERRUPTED)


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
