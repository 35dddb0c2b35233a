"""``kubectl kvreset options``: kubectl's global flags, listed once (as ``kubectl options``
lists kubectl's) instead of in every sub-command's help."""

from __future__ import annotations

import click

from .flags import global_flags_help


@click.command("options", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """List the global flags every sub-command accepts, before or after its name."""
    click.echo(global_flags_help(), nl=False)
