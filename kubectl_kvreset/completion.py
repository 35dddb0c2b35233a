"""Entry point of ``kubectl_complete-kvreset``: shell completion for ``kubectl kvreset`` in
cobra's plugin-completion format, over the plugin's own click group.

The logic lives in :mod:`kubectl_kvreset.cli.complete`, which takes the group as an argument;
this module, above the command line in the layers, binds it to :data:`kubectl_kvreset.cli.cli`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .cli import cli
from .cli.complete import (
    COMPLETION_TIMEOUT,
    DIRECTIVE_DEFAULT,
    DIRECTIVE_ERROR,
    DIRECTIVE_KEEP_ORDER,
    DIRECTIVE_NO_FILE_COMP,
    DIRECTIVE_NO_SPACE,
    Candidate,
    Lister,
    cluster_lister,
    format_cobra,
    kubeconfig_names,
    owner_candidates,
)
from .cli.complete import complete as complete_in
from .cli.complete import main as main_in

__all__ = [
    "COMPLETION_TIMEOUT", "DIRECTIVE_DEFAULT", "DIRECTIVE_ERROR", "DIRECTIVE_KEEP_ORDER", "DIRECTIVE_NO_FILE_COMP",
    "DIRECTIVE_NO_SPACE", "Candidate", "Lister", "cluster_lister", "complete", "format_cobra", "kubeconfig_names",
    "main", "owner_candidates",
]


def complete(words: Sequence[str], *, lister: Lister | None = None) -> tuple[list[Candidate], int]:
    """Complete the last of ``words`` (the words after ``kubectl kvreset``) against the plugin's
    commands; see :func:`kubectl_kvreset.cli.complete.complete`. Returns ``(candidates, directive)``."""
    return complete_in(cli, words, lister=lister)


def main(argv: Sequence[str] | None = None) -> int:
    """``kubectl_complete-kvreset WORDS...``: print cobra's completion answer on stdout; returns 0
    (see :func:`kubectl_kvreset.cli.complete.main`)."""
    return main_in(cli, argv)
