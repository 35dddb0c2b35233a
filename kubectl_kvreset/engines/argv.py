"""Engine-neutral reading of one simple command's words: which Python module an interpreter
runs (:func:`python_module`). Every engine's command-line reader uses it. Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["python_module"]

_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$", re.ASCII)


def python_module(words: Sequence[str]) -> tuple[str, int] | None:
    """If ``words`` run a module with a Python interpreter (``python``, ``python3``,
    ``python3.12``; any path), return ``(module, index of the word after it)``, else None.

    Interpreter options before ``-m`` are skipped: single-dash flags (``-u``, ``-O``) and ``-X``/``-W``
    with their value; a ``--`` option, a script path or ``-c`` is not a module run.
    ``python3 -u -m vllm.entrypoints.openai.api_server --port 8000`` -> ("vllm.entrypoints.openai.api_server", 4).
    """
    if not words or not _PYTHON_RE.match(words[0].rsplit("/", 1)[-1]):
        return None
    j = 1
    while j < len(words):
        arg = words[j]
        if arg == "-m":
            return (words[j + 1], j + 2) if j + 1 < len(words) else None
        if arg in ("-X", "-W"):
            j += 2
        elif arg.startswith("-") and not arg.startswith("--"):
            j += 1
        else:
            return None
    return None
