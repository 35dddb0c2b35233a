"""The lexical pieces of a shell script: the patterns of names, assignments, redirections and
here-documents, the words that start or skip commands, quoting (escaping a value for
:func:`shlex.split`, ANSI-C ``$'...'``, removing one level of quotes) and the argument list of
``bash -c``. Pure: no state, no I/O.

Rules follow POSIX ``sh`` (XCU 2.x "Shell Command Language") and bash's manual where bash differs.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=(.*)$", re.DOTALL)
REDIRECT_RE = re.compile(r"^(\d*(?:>>?|<|>&|&>>?|<&)|&>)(.*)$", re.ASCII | re.DOTALL)
SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ash", "ksh"})
SKIP_WORDS = frozenset({"then", "do", "else", "elif", "{", "!", "time", "nohup", "command", "builtin"})
#: compound commands whose bodies may or may not run (POSIX XCU 2.9.4), closed by the value
COMPOUND = {"if": "fi", "while": "done", "until": "done", "for": "done", "select": "done", "case": "esac"}
CLOSERS = frozenset({"fi", "done", "esac"})
HEREDOC_RE = re.compile(r"""<<(-)?\s*(?:'([^']*)'|"([^"]*)"|\\?([A-Za-z0-9_.-]+))""")
FUNC_HEADER_RE = re.compile(r"^\s*(?:function\s+([A-Za-z_][A-Za-z0-9_.:-]*)(?:\s*\(\s*\))?|"
                            r"([A-Za-z_][A-Za-z0-9_.:-]*)\s*\(\s*\))\s*\{?")
FUNC_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.:-]*)\(\)$")
EXPORT_WORDS = frozenset({"export", "declare", "typeset", "readonly", "local"})


class ShellScriptError(ValueError):
    """A script that cannot be read (unbalanced quotes, a bad arithmetic expression); the
    message names the construct at fault."""


def escape_unquoted(value: str) -> str:
    """Make an expansion's value safe for :func:`shlex.split` outside quotes.

    Whitespace stays active (bash splits unquoted expansions into words); quotes and backslashes
    become literal.
    """
    return re.sub(r"""(["'\\])""", r"\\\1", value)


def escape_dquoted(value: str) -> str:
    """Make a value safe inside a double-quoted shlex word."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def escape_literal(value: str) -> str:
    """Keep ``value`` as one literal shlex word outside quotes (whitespace escaped too)."""
    return re.sub(r"""(["'\\\s])""", r"\\\1", value)


def ansi_c_end(text: str, start: int) -> int:
    """Index of the ``'`` closing a ``$'...'`` whose body starts at ``start`` (a backslash
    escapes the next character), or -1."""
    i = start
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "'":
            return i
        i += 1
    return -1


_ANSI_C_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
                  "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
#: the numeric escapes of ``$'...'`` after the backslash: (pattern, base); the value is group 1,
#: else the whole match
_ANSI_C_NUMERIC = tuple((re.compile(pattern), base) for pattern, base in (
    (r"[0-7]{1,3}", 8), (r"x([0-9A-Fa-f]{1,2})", 16), (r"u([0-9A-Fa-f]{1,4})", 16), (r"U([0-9A-Fa-f]{1,8})", 16)))


def _ansi_c_numeric(body: str, start: int) -> tuple[str, int] | None:
    """The character of a numeric escape (``\\nnn``, ``\\xHH``, ``\\uHHHH``, ``\\UHHHHHHHH``)
    whose letter or first digit is at ``start``, and the index after it; None when there is none.
    An octal value keeps its low 8 bits; a code point past U+10FFFF becomes U+10FFFF."""
    for pattern, base in _ANSI_C_NUMERIC:
        m = pattern.match(body, start)
        if m is not None:
            code = int(m.group(1) if m.groups() else m.group(0), base)
            return chr(code & 0xFF if base == 8 else min(code, 0x10FFFF)), m.end()
    return None


def ansi_c_decode(body: str) -> str:
    """The value of bash's ANSI-C quoting ``$'body'`` (bash manual, "ANSI-C Quoting"):
    ``\\a \\b \\e \\E \\f \\n \\r \\t \\v \\\\ \\' \\" \\?``, ``\\nnn`` (octal, 1-3 digits),
    ``\\xHH`` (1-2 hex digits), ``\\uHHHH``, ``\\UHHHHHHHH`` and ``\\cX`` (control-X); any other
    backslash stays with the character after it, as bash leaves it."""
    out: list[str] = []
    i = 0
    n = len(body)
    while i < n:
        c = body[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = body[i + 1]
        if e in _ANSI_C_SIMPLE:
            out.append(_ANSI_C_SIMPLE[e])
            i += 2
            continue
        numeric = _ansi_c_numeric(body, i + 1)
        if numeric is not None:
            out.append(numeric[0])
            i = numeric[1]
            continue
        if e == "c" and i + 2 < n:
            out.append(chr(ord(body[i + 2]) & 0x1F))
            i += 3
            continue
        out.append(c + e)
        i += 2
    return "".join(out)


def matching(text: str, start: int, open_s: str, close_s: str) -> int:
    """Index of the ``close_s`` that balances an ``open_s`` already consumed before ``start``.

    Quotes inside are skipped. Returns -1 when unbalanced.
    """
    depth = 1
    i = start
    n = len(text)
    quote: str | None = None
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 2
                continue
            if c == quote:
                quote = None
        elif c == "\\":
            i += 2
            continue
        elif c in "'\"":
            quote = c
        elif text.startswith(open_s, i):
            depth += 1
            i += len(open_s)
            continue
        elif text.startswith(close_s, i):
            depth -= 1
            if depth == 0:
                return i
            i += len(close_s)
            continue
        i += 1
    return -1


def unquote_word(word: str) -> str:
    """Remove one level of shell quoting from a ``${VAR:-word}`` word."""
    try:
        parts = shlex.split(word, comments=False, posix=True)
    except ValueError:
        return word
    return " ".join(parts) if parts else ""


def drop_redirections(words: list[str]) -> list[str]:
    """Remove ``2>&1``, ``> file``, ``>>log`` and similar redirections from a word list."""
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        m = REDIRECT_RE.match(w)
        if m is not None:
            if m.group(2) == "":
                skip = True
            continue
        out.append(w)
    return out


def shell_c_script(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """For ``bash [opts] -c SCRIPT [NAME [ARGS...]]`` return (SCRIPT, [NAME, ARGS...] minus NAME).

    Returns (None, []) when the shell is not given ``-c`` (e.g. it runs a script file).
    Positional list returned holds ``$1...``; ``$0`` is not tracked.
    """
    j = 1
    has_c = False
    while j < len(argv):
        arg = argv[j]
        if arg == "--":
            j += 1
            break
        if arg.startswith("--"):
            j += 1
            continue
        if arg.startswith(("-", "+")) and len(arg) > 1:
            letters = arg[1:]
            if "c" in letters:
                has_c = True
            j += 1
            if "o" in letters and j < len(argv):
                j += 1
            continue
        break
    if not has_c or j >= len(argv):
        return None, []
    return argv[j], list(argv[j + 2:])
