"""kubectl's output and dry-run flags on the sub-commands: ``-o/--output`` with kubectl's printers
(:mod:`kubectl_kvreset.printers`), ``--no-headers``, and ``--dry-run[=none|client]`` read as
kubectl reads it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..report import OUTPUT_FORMATS

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["OutputType", "bare_dry_run", "dry_run_option", "no_headers", "output_option", "parse_dry_run"]


class OutputType(click.ParamType[str]):
    """A ``-o`` value as kubectl reads it (:func:`kubectl_kvreset.printers.parse_output`): the
    value is kept as written (``jsonpath={.items[*].pod}``); a bad one is a usage error with
    kubectl's message, before any work."""

    name = "FORMAT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """``value`` unchanged once it parses; ``-file`` forms are read here (their inline form is kept)."""
        from ..printers import PrinterError, parse_output

        try:
            return str(parse_output(str(value)))
        except PrinterError as exc:
            raise click.UsageError(str(exc), ctx) from exc
        except OSError as exc:
            self.fail(f"cannot read {exc.filename}: {exc.strerror}", param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[click.shell_completion.CompletionItem]:
        """The formats starting with ``incomplete`` (``jsonpath=`` and ``custom-columns=`` to be
        followed by a template or spec)."""
        from click.shell_completion import CompletionItem

        values = [f"{f}=" if f in ("jsonpath", "custom-columns") else f for f in OUTPUT_FORMATS]
        return [CompletionItem(v) for v in values if v.startswith(incomplete)]

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        """The choices as help shows them."""
        return "[" + "|".join(f"{f}=..." if f in ("jsonpath", "custom-columns") else f for f in OUTPUT_FORMATS) + "]"


def output_option(fn: F) -> F:
    """``-o/--output`` (table, wide, json, yaml and kubectl's name, jsonpath=TEMPLATE,
    custom-columns=SPEC) and ``--no-headers``."""
    fn = click.option("--no-headers", is_flag=True,
                      help="Tables and custom columns without their header line, as kubectl get --no-headers.")(fn)
    return click.option(
        "-o", "--output", type=OutputType(), default="table", show_default=True,
        help="Output format. json/yaml print a list of objects, each with a 'kind' field; name, "
             "jsonpath=TEMPLATE and custom-columns=SPEC read that list as kubectl get reads a List "
             "(-o jsonpath='{.items[*].pod}', -o custom-columns=POD:.pod,RESULT:.result).",
    )(fn)


def parse_dry_run(ctx: click.Context, param: click.Parameter, value: Any) -> bool:
    """``--dry-run[=none|client]`` as kubectl reads it (``k8s.io/kubectl/pkg/cmd/util``'s
    ``GetDryRunStrategy``): ``client`` (or a bare ``--dry-run``, or ``true``) plans without
    changing anything, ``none`` (or ``false``) runs; ``server`` is refused: the API server's
    dry run does not reach vLLM, so nothing would be learnt."""
    text = str(value or "none").lower()
    if text in ("client", "true", "1"):
        return True
    if text in ("none", "false", "0"):
        return False
    if text == "server":
        raise click.BadParameter("server is not supported: the API server's dry run never reaches vLLM; "
                                 "use --dry-run=client (or --dry-run)", ctx, param)
    raise click.BadParameter(f'Invalid dry-run value ({value}). Must be "none" or "client".', ctx, param)


def dry_run_option(help_text: str) -> Callable[[F], F]:
    """``--dry-run[=none|client]`` (a bool parameter ``dry_run``): see :func:`parse_dry_run`; the
    group rewrites a bare ``--dry-run`` (:func:`bare_dry_run`), so it never takes the next word
    as its value."""
    return click.option("--dry-run", "dry_run", default="none", metavar="[=none|client]", callback=parse_dry_run,
                        help=help_text + " --dry-run alone means --dry-run=client, as in kubectl.")


def bare_dry_run(args: list[str]) -> list[str]:
    """``args`` of a sub-command with each bare ``--dry-run`` written ``--dry-run=client`` (none
    after ``--``): the flag takes a value only after ``=`` (pflag's ``NoOptDefVal``, as kubectl's
    flag), so ``--dry-run deployment/x`` is a dry run of ``deployment/x``."""
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg == "--":
            out.extend(args[i:])
            break
        out.append("--dry-run=client" if arg == "--dry-run" else arg)
    return out


def no_headers() -> bool:
    """Whether ``--no-headers`` was given to the running sub-command."""
    current = click.get_current_context(silent=True)
    return bool(current is not None and current.params.get("no_headers"))
