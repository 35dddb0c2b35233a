"""``kubectl kvreset``: the click group. Sub-command modules load only when used, and none of
them imports the ``kubernetes`` package at import time, so ``--help`` answers fast."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from .. import __version__
from .commands import COMMANDS
from .flags import kube_flags
from .options import EXIT_CODES_HELP

__all__ = ["COMMANDS", "LazyGroup", "cli", "main"]

class LazyGroup(click.Group):
    """A group whose sub-commands are imported on first use (click's documented lazy-loading
    pattern), listed in the order of :data:`COMMANDS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The sub-command names, in :data:`COMMANDS` order."""
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import the sub-command's module on first use; None for an unknown name."""
        if cmd_name not in COMMANDS:
            return None
        module = importlib.import_module(f"{__name__}.{COMMANDS[cmd_name][0]}")
        command: click.Command = module.command
        return command

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """The sub-command and its arguments; an unknown name is a usage error that names the
        closest commands (cobra's "Did you mean this?"); a bare ``--dry-run`` is read as
        ``--dry-run=client`` (:func:`.outputflags.bare_dry_run`)."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib

            close = difflib.get_close_matches(name, list(COMMANDS), n=3, cutoff=0.6)
            if not close:
                close = [c for c in COMMANDS if c.startswith(name[:3])]
            hint = ("\n\nDid you mean this?\n" + "".join(f"\t{c}\n" for c in close)) if close else "\n"
            raise click.UsageError(f'unknown command "{name}" for "{ctx.command_path}"{hint}', ctx)
        cmd_name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None and any(p.name == "dry_run" for p in cmd.params):
            from .outputflags import bare_dry_run

            rest = bare_dry_run(rest)
        return cmd_name, cmd, rest

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the sub-commands with their short help without importing them."""
        rows = [(name, short) for name, (_, short) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def _prog_name() -> str:
    base = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "kubectl-kvreset"
    return "kubectl kvreset" if base.startswith("kubectl-") or base.startswith("kubectl_") else base


@click.group(
    cls=LazyGroup,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=(
        "\b\nExamples:\n"
        "  kubectl kvreset detect -n llm-d                 # which pods serve vLLM, on which ports\n"
        "  kubectl kvreset clear -n llm-d --all            # empty every tier of every vLLM pod\n"
        "  kubectl kvreset clear deployment/decode --dry-run\n"
        "  kubectl kvreset metrics -n llm-d -o json\n\n"
        + EXIT_CODES_HELP
    ),
)
@click.version_option(__version__, "--version", prog_name="kubectl-kvreset", message="%(prog)s %(version)s")
@kube_flags
@click.pass_context
def cli(ctx: click.Context, /, **_kube_flags: Any) -> None:
    """Empty every KV cache tier of the vLLM servers in a Kubernetes deployment
    (llm-d, KServe, plain vLLM), so the next benchmark or debugging run starts cold.

    kubectl's global flags (`kubectl kvreset options` lists them) are accepted before the
    sub-command too, with the same meaning: `kubectl kvreset -n NS clear --all`. Given on
    both sides, the value after the sub-command wins (--as-group adds up; -A wins over -n)."""
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())
        ctx.exit(0)


def _output_format(args: list[str]) -> str | None:
    """The value of the last ``-o``/``--output`` in ``args`` as click reads it (``-o json``,
    ``-ojson``, ``--output json``, ``--output=json``; none after ``--``), before click has parsed
    them; None when not given."""
    found: str | None = None
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("-o", "--output"):
            found = args[i + 1] if i + 1 < len(args) else None
        elif arg.startswith("--output="):
            found = arg[len("--output="):]
        elif arg.startswith("-o") and not arg.startswith("--"):
            found = arg[2:]
    return found


def main(argv: list[str] | None = None) -> Any:
    """Console entry point (``kubectl-kvreset``). ``argv`` defaults to ``sys.argv[1:]``.

    ``kubectl-kvreset __complete WORDS...`` (or ``__completeNoDesc``) answers a shell-completion
    request in cobra's format instead (:mod:`kubectl_kvreset.completion`), which is what the
    ``kubectl_complete-kvreset`` helper kubectl runs for plugins asks for.

    SIGINT and SIGTERM are routed to the commands' cancel handle first (:mod:`.signals`).
    """
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("__complete", "__completeNoDesc"):
        from .complete import main as complete_main

        return complete_main(cli, args)
    from . import signals
    from .options import INTERRUPTED

    signals.install(INTERRUPTED, output=_output_format(args))
    try:
        return cli.main(args=args, prog_name=_prog_name(), standalone_mode=False)
    except click.ClickException as exc:
        usage_error(exc)
    except click.Abort:  # end of input or a signal before a command's own handling: nothing changed
        click.echo("error: no answer: nothing changed", err=True)
        sys.exit(int(signals.exit_code()))


def usage_error(exc: click.ClickException) -> None:
    """Print a click error as kubectl prints its own (``error: MESSAGE``, then ``See 'kubectl
    kvreset CMD --help' for usage.`` after a usage error; one ``error:`` prefix everywhere) and
    exit with its code (2 for a usage error)."""
    message = exc.format_message()
    if isinstance(exc, click.BadParameter) and exc.param is not None and exc.param.name == "output":
        message = exc.message  # kubectl's own words, without click's "Invalid value for '-o'"
    click.echo(f"error: {message}", err=True)
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        click.echo(f"See '{exc.ctx.command_path} --help' for usage.", err=True)
    sys.exit(exc.exit_code)
