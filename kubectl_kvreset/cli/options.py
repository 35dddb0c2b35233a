"""Options shared by every sub-command, defined once as decorators, and the helpers that turn
them into a connection, targets and output.

kubectl passes every flag after the plugin name to the plugin and parses none of them itself
(``k8s.io/kubectl/pkg/cmd/plugin.go``), so the plugin reads kubectl's global flags
(``kubectl options``) on each sub-command.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click

from ..pool import NOT_RUN, Cancel, NotRun
from ..redact import redact_text, redact_traceback
from ..report import ExitCode, Report
from . import signals
from .flags import flags_from, kube_flags, merge_global_flags
from .helptext import EXIT_CODES_HELP, EXIT_CODES_READ, EXIT_CODES_ROLLOUT
from .outputflags import bare_dry_run, dry_run_option, no_headers, output_option

F = TypeVar("F", bound=Callable[..., Any])

__all__ = [
    "EXIT_CODES_HELP", "EXIT_CODES_READ", "EXIT_CODES_ROLLOUT", "NOT_RUN",
    "NotRun",
    "bare_dry_run", "dry_run_option", "flags_from", "kube_flags", "output_option",
]
T = TypeVar("T")
R = TypeVar("R")



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
    """``--model-only``: FS-tier deletion limited to the targets' models' directories."""
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
    """A message for the user on stderr, its secrets masked (:func:`~kubectl_kvreset.redact.redact_text`),
    above the live progress line while one is shown (:mod:`.progress`)."""
    from . import progress

    if message.startswith(("error:", "warning:")) or " error: " in message[:80]:
        _SAID.append(message)
    if not progress.say(redact_text(message)):
        click.echo(redact_text(message), err=True)


#: The error and warning lines said on stderr in this run (an exit code above 0 is explained).
_SAID: list[str] = []


def fail(message: str, code: ExitCode = ExitCode.FAILED) -> None:
    """Print ``error: message`` on stderr (secrets masked) and exit with ``code``."""
    click.echo(f"error: {redact_text(message)}", err=True)
    sys.exit(int(code))


#: ``-v`` level from which requests are logged, and tracebacks shown, on stderr.
VERBOSE_REQUESTS = 6


def _redacting_formatter() -> Any:
    """A ``logging.Formatter`` whose every line goes through :func:`~kubectl_kvreset.redact.redact_text`
    (URLs with passwords, secret query parameters, headers)."""
    import logging

    class Formatter(logging.Formatter):
        def format(self, record: logging.LogRecord) -> str:
            return redact_text(super().format(record))

    return Formatter("%(message)s")


def configure_logging(verbosity: int) -> None:
    """``-v N``: from :data:`VERBOSE_REQUESTS` every API request is logged on stderr (method,
    URL, status, milliseconds; tokens never); from 8 also the request headers, redacted."""
    import logging

    logger = logging.getLogger("kubectl_kvreset")
    if verbosity >= VERBOSE_REQUESTS and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_redacting_formatter())
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
                click.echo(redact_traceback(sys.exc_info()[1]), err=True)

        try:
            with signals.command():
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
                from ..permissions import from_forbidden

                perm = from_forbidden(exc.message or str(exc))
                hint = (f"; {perm.refused('by this command')}" if perm is not None
                        else " (ask for the RBAC permission named above; see the README's Role)")
            elif exc.status == 401:
                hint = " (the credentials were refused: log in again or check the kubeconfig user)"
            fail(f"{exc}{hint}", ExitCode.FAILED)
        except KubeConnectionError as exc:
            trace()
            fail(str(exc), ExitCode.FAILED)
        except KeyboardInterrupt:  # raised only before anything changes (signals.changing)
            _stopped_before_any_change(str(kwargs.get("output") or ""))
        except click.Abort:  # end of input (or ^D) at a prompt: nothing was confirmed
            if INTERRUPTED.is_set():  # click turns a signal's KeyboardInterrupt at a prompt into Abort
                _stopped_before_any_change(str(kwargs.get("output") or ""))
            info("no answer (end of input): nothing changed")
            sys.exit(int(ExitCode.INTERRUPTED))
        except (click.ClickException, click.exceptions.Exit, SystemExit):
            raise
        except Exception as exc:  # a defect: say so in one line, never a traceback by default
            trace()
            fail(f"internal error: {type(exc).__name__}: {exc} (run again with -v=6 for details)", ExitCode.FAILED)

    return wrapper  # type: ignore[return-value]


def _stopped_before_any_change(output: str) -> NoReturn:
    """End a run a signal stopped before anything changed: ``[]`` on stdout for json/yaml (a
    script reads a list, as when there are no rows), the message on stderr, exit 130 or 143."""
    if output in ("json", "yaml"):
        click.echo("[]")
    info(f"{signals.stopped_word()} ({signals.signal_name()}) before anything was changed")
    signals.finish(int(signals.exit_code()))


def _say_interrupted(running: int) -> None:
    again = "SIGTERM again" if signals.exit_code() is ExitCode.TERMINATED else "Ctrl-C again"
    info(f"{signals.stopped_word()} ({signals.signal_name()}): no new calls start; waiting up to "
         f"{INTERRUPTED.inflight_bound_s:.0f}s for {running} in flight ({again} to stop waiting)")


#: The command line's cancel handle: set by SIGINT (Ctrl-C) or SIGTERM (:mod:`.signals`); no new
#: work starts, later phases are skipped, and the exit code is 130 (143 after SIGTERM).
INTERRUPTED = Cancel(on_cancel=_say_interrupted)



def emit(report: Report, fmt: str, *, empty_message: str, summary: bool = False) -> None:
    """Print the report on stdout in ``fmt`` (``No resources found`` style note on stderr when
    a table has no rows) and exit with the report's code (130 after Ctrl-C, 143 after SIGTERM)."""
    if INTERRUPTED.is_set():
        report.codes.append(signals.exit_code())
    from . import progress

    line = progress.active()
    if line is not None:
        line.close()
    if not report.rows and fmt in ("table", "wide"):
        info(empty_message)
    else:
        click.echo(report.render(fmt, no_headers=no_headers()), nl=False)
    if summary and line is not None:  # after the rows, where a terminal user looks last
        from ..report import summary_line

        signals.flush()
        info(summary_line(report.rows, report.exit_code))
    elif report.exit_code in (ExitCode.FAILED, ExitCode.UNCONFIRMED) and not _SAID:
        from ..report import exit_reason

        signals.flush()
        info(exit_reason(report.rows, report.exit_code))
    signals.finish(int(report.exit_code))
