"""Parse a vLLM server command line, as a pod spec writes it, into a typed :class:`ServeConfig`.

Pure: no I/O, no Kubernetes import. The input is a container dict as the Kubernetes API returns it
(JSON-decoded) plus the container's resolved environment.

What is understood (facts from vLLM's ``FlexibleArgumentParser`` in
``vllm/utils/argparse_utils.py`` and from llm-d manifests; see the project's research notes):

* Kubernetes' ``$(VAR)`` expansion of ``command``/``args`` (``$$`` escapes ``$``; an unknown
  reference stays literal).
* A container without ``command`` runs its image's entrypoint (:data:`DEFAULT_ENTRYPOINTS`).
* ``bash -c``/``sh -c``/``bash -lc`` scripts: comments, line continuations, several commands
  (``;``, newlines, ``&&``, ``||``, ``|``), ``exec``, ``env``, ``eval``, assignments
  (``X=...``, ``export X=...``), ``$VAR``, ``${VAR}``, ``${VAR:-default}`` and ``$(( ... ))``
  arithmetic (``+ - * / %`` and parentheses, evaluated by a small parser, never ``eval``).
* ``vllm serve MODEL``, ``python3 -m vllm.entrypoints.openai.api_server --model M`` and
  ``python -m vllm.entrypoints.cli.main serve``.
* Flags spelled with ``_`` or ``-``, ``--flag=value`` or ``--flag value``; the last occurrence
  wins (argparse); ``--kv-transfer-config`` as full JSON (may span lines, human-readable numbers
  such as ``80g`` outside strings) or as dotted keys, which win over the full JSON as in vLLM.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

__all__ = [
    "BOOLEAN_FLAGS",
    "DEFAULT_ENTRYPOINTS",
    "ServeCommandError",
    "ServeConfig",
    "expand_human_readable_json",
    "human_readable_int",
    "image_entrypoint",
    "kubernetes_expand",
    "parse_argv",
    "parse_container",
]


class ServeCommandError(ValueError):
    """A vLLM command line that vLLM itself would reject, or that cannot be read.

    The message names the flag (e.g. ``--kv-transfer-config: invalid JSON ...``) or the shell
    construct (unbalanced quotes) at fault.
    """


@dataclass(frozen=True)
class ServeConfig:
    """What a vLLM API server was told on its command line.

    Attributes:
        argv: the vLLM invocation after every expansion, from ``vllm``/``python3`` on.
        entrypoint: ``"vllm serve"`` or ``"api_server"``
            (``python3 -m vllm.entrypoints.openai.api_server``).
        model: the positional model of ``vllm serve`` or ``--model``; None when absent.
        served_model_name: the first ``--served-model-name`` value, or None.
        api_ports: every API server port, ascending. ``--port`` (default 8000); with
            ``--data-parallel-multi-port-external-lb`` one port per local DP rank,
            ``port .. port+N-1`` where N is ``--data-parallel-size-local``. Empty when the port
            could not be resolved (see ``notes``).
        scheme: ``"https"`` when ``--ssl-certfile``/``--ssl-keyfile`` is given, else ``"http"``.
        kv_transfer_config: decoded ``--kv-transfer-config`` (dotted keys merged, human-readable
            numbers expanded), or None.
        kv_offloading_size_gib: ``--kv-offloading-size`` in GiB, or None.
        kv_offloading_backend: ``--kv-offloading-backend``; ``"native"`` when only the size is
            given; None without a size.
        data_parallel_size_local: ``--data-parallel-size-local`` (``-dpl``), or None.
        config_file: ``--config FILE``; the file lives in the pod and is not read here.
        unresolved_vars: names of ``$VAR``/``$(VAR)`` references the environment could not
            resolve (kept literally in ``argv``).
        notes: human-readable remarks about what could not be known.
        env: the environment vLLM would see: the container env plus what the script exported or
            set for the command (e.g. ``export VLLM_USE_SIMPLE_KV_OFFLOAD=1``).
    """

    argv: tuple[str, ...]
    entrypoint: str
    model: str | None
    served_model_name: str | None
    api_ports: tuple[int, ...]
    scheme: str
    kv_transfer_config: Mapping[str, Any] | None
    kv_offloading_size_gib: float | None
    kv_offloading_backend: str | None
    data_parallel_size_local: int | None
    config_file: str | None
    unresolved_vars: tuple[str, ...]
    notes: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


# --------------------------------------------------------------------------------------------
# Image entrypoints
# --------------------------------------------------------------------------------------------

_VLLM_SERVE: tuple[str, ...] = ("vllm", "serve")
_API_SERVER: tuple[str, ...] = ("python3", "-m", "vllm.entrypoints.openai.api_server")

#: Image repository glob (tag and digest removed, ``docker.io/`` and ``library/`` dropped) ->
#: the entrypoint argv the image runs when a container has no ``command``; None = not vLLM.
#: First match wins. Sources: ``vllm/vllm-openai`` images have ``ENTRYPOINT ["vllm","serve"]``
#: (research/vllm.md §4); llm-d images start ``python -m vllm.entrypoints.openai.api_server``
#: (llm-d ``docker/Dockerfile.cuda``, research/llmd.md §2.2). llm-d's sidecar, router and
#: scheduler images share the ``ghcr.io/llm-d/llm-d`` prefix and are excluded first.
DEFAULT_ENTRYPOINTS: tuple[tuple[str, tuple[str, ...] | None], ...] = (
    ("*sidecar*", None),
    ("*router*", None),
    ("*inference-scheduler*", None),
    ("*inference-sim*", None),
    ("*kv-cache*", None),
    ("vllm/vllm-openai", _VLLM_SERVE),
    ("vllm/vllm-openai-*", _VLLM_SERVE),
    ("ghcr.io/llm-d/llm-d", _API_SERVER),
    ("ghcr.io/llm-d/llm-d-*", _API_SERVER),
)

EntrypointTable = Sequence[tuple[str, "tuple[str, ...] | None"]]


def _image_repository(image: str) -> str:
    """Return ``image`` without tag or digest, and without ``docker.io/`` / ``library/``."""
    ref = image.strip().split("@", 1)[0]
    slash = ref.rfind("/")
    colon = ref.rfind(":")
    if colon > slash:
        ref = ref[:colon]
    for prefix in ("docker.io/", "index.docker.io/"):
        ref = ref.removeprefix(prefix)
    ref = ref.removeprefix("library/")
    return ref


def image_entrypoint(
    image: str, table: EntrypointTable = DEFAULT_ENTRYPOINTS
) -> tuple[str, ...] | None:
    """Return the argv an image runs when the container has no ``command``.

    Args:
        image: an image reference such as ``vllm/vllm-openai:v0.23.0`` or
            ``ghcr.io/llm-d/llm-d-cuda:v0.8.0@sha256:...``.
        table: ordered (repository glob, entrypoint or None) pairs; the first match wins.

    Returns:
        ``("vllm", "serve")`` for ``vllm/vllm-openai``, ``("python3", "-m",
        "vllm.entrypoints.openai.api_server")`` for llm-d images, None for anything else
        (unknown images and llm-d's non-vLLM images such as the routing sidecar).
    """
    repo = _image_repository(image)
    for pattern, entry in table:
        if fnmatch.fnmatchcase(repo, pattern):
            return entry
    return None


# --------------------------------------------------------------------------------------------
# Kubernetes $(VAR) expansion
# --------------------------------------------------------------------------------------------


def kubernetes_expand(text: str, env: Mapping[str, str], unresolved: list[str] | None = None) -> str:
    """Expand ``$(VAR)`` references in one ``command``/``args`` item as the kubelet does.

    ``$$`` becomes ``$``; ``$(NAME)`` becomes ``env[NAME]`` when defined and stays literal
    otherwise (its name is appended to ``unresolved`` when NAME looks like a variable name);
    any other ``$`` is kept. Rule from Kubernetes ``third_party/forked/golang/expansion``.
    """
    out: list[str] = []
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "$" and i + 1 < n:
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                close = text.find(")", i + 2)
                if close != -1:
                    name = text[i + 2:close]
                    if name in env:
                        out.append(env[name])
                    else:
                        out.append(text[i:close + 1])
                        if unresolved is not None and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
                            unresolved.append(name)
                    i = close + 1
                    continue
        out.append(c)
        i += 1
    return "".join(out)


# --------------------------------------------------------------------------------------------
# Human-readable numbers (vllm/utils/argparse_utils.py::human_readable_int and
# vllm/engine/arg_utils.py::_expand_json_human_readable_numbers, vLLM >= 0.20)
# --------------------------------------------------------------------------------------------

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgtKMGT])$", re.ASCII)
_HUMAN_IN_JSON_RE = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b", re.ASCII)


def human_readable_int(value: str) -> int:
    """Convert ``"25.6k"``/``"80g"``/``"2G"``/``"1000"`` to an int as vLLM does.

    Lower-case suffixes ``k m g t`` are powers of 1000 and allow decimals; upper-case ``K M G T``
    are powers of 1024 and must be whole numbers.

    Raises:
        ValueError: not a number of that form (including a decimal with an upper-case suffix).
    """
    text = value.strip()
    m = _HUMAN_RE.match(text)
    if m is None:
        return int(text)
    number, suffix = m.group(1), m.group(2)
    if suffix in _DECIMAL:
        try:
            return int(float(number) * _DECIMAL[suffix])
        except OverflowError as exc:
            raise ValueError(f"number too large: {value!r}") from exc
    if "." in number:
        raise ValueError(f"decimals are not allowed with binary suffix {suffix!r}: {value!r}")
    return int(number) * _BINARY[suffix]


def expand_human_readable_json(text: str) -> str:
    """Replace bare human-readable numbers (``80g``, ``1K``) outside JSON strings by integers.

    Raises:
        ValueError: a decimal with a binary (upper-case) suffix, such as ``1.5G``.
    """
    out: list[str] = []
    seg_start = 0
    i = 0
    n = len(text)
    in_str = False
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
                out.append(text[seg_start:i + 1])
                seg_start = i + 1
        elif c == '"':
            out.append(_HUMAN_IN_JSON_RE.sub(lambda m: str(human_readable_int(m.group(0))),
                                             text[seg_start:i]))
            seg_start = i
            in_str = True
        i += 1
    tail = text[seg_start:]
    out.append(tail if in_str else _HUMAN_IN_JSON_RE.sub(
        lambda m: str(human_readable_int(m.group(0))), tail))
    return "".join(out)


# --------------------------------------------------------------------------------------------
# A small POSIX-shell reader: enough of bash to find the vLLM command in a container script.
# --------------------------------------------------------------------------------------------

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=(.*)$", re.DOTALL)
_REDIRECT_RE = re.compile(r"^(\d*(?:>>?|<|>&|&>>?|<&)|&>)(.*)$", re.ASCII | re.DOTALL)
_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ash", "ksh"})
_SKIP_WORDS = frozenset({"then", "do", "else", "{", "!", "time", "nohup", "command", "builtin"})
_EXPORT_WORDS = frozenset({"export", "declare", "typeset", "readonly", "local"})


class _ArithError(ValueError):
    """An arithmetic expression that cannot be evaluated (unset name, syntax, division by 0)."""


class _Arith:
    """Recursive-descent evaluator of integer ``+ - * / %`` with parentheses and unary signs.

    Names are looked up in ``lookup`` (bash semantics for a set name; an unset name raises
    :class:`_ArithError` so the caller can report it instead of silently using 0).
    Division truncates toward zero, as bash does.
    """

    _TOKEN_RE = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(.))", re.ASCII)

    def __init__(self, expr: str, lookup: Callable[[str], str | None]) -> None:
        self.tokens: list[tuple[str, str]] = []
        for m in self._TOKEN_RE.finditer(expr):
            if m.group(1) is not None:
                self.tokens.append(("num", m.group(1)))
            elif m.group(2) is not None:
                self.tokens.append(("name", m.group(2)))
            elif m.group(3) is not None and m.group(3).strip():
                self.tokens.append(("op", m.group(3)))
        self.pos = 0
        self.lookup = lookup
        self.missing: list[str] = []

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _take(self) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            raise _ArithError("unexpected end of expression")
        self.pos += 1
        return tok

    def evaluate(self) -> int:
        """Evaluate the whole expression; raises :class:`_ArithError`."""
        if not self.tokens:
            return 0
        value = self._sum()
        if self._peek() is not None:
            raise _ArithError(f"unexpected token {self._peek()!r}")
        if self.missing:
            raise _ArithError("unset: " + ",".join(self.missing))
        return value

    def _sum(self) -> int:
        value = self._product()
        while (tok := self._peek()) is not None and tok in (("op", "+"), ("op", "-")):
            self.pos += 1
            rhs = self._product()
            value = value + rhs if tok[1] == "+" else value - rhs
        return value

    def _product(self) -> int:
        value = self._unary()
        while (tok := self._peek()) is not None and tok[0] == "op" and tok[1] in "*/%":
            self.pos += 1
            rhs = self._unary()
            if tok[1] == "*":
                value *= rhs
            else:
                if rhs == 0:
                    raise _ArithError("division by 0")
                quot = abs(value) // abs(rhs)
                if (value < 0) != (rhs < 0):
                    quot = -quot
                value = quot if tok[1] == "/" else value - quot * rhs
        return value

    def _unary(self) -> int:
        tok = self._peek()
        if tok in (("op", "+"), ("op", "-")):
            self.pos += 1
            val = self._unary()
            return -val if tok == ("op", "-") else val
        return self._atom()

    def _atom(self) -> int:
        kind, text = self._take()
        if kind == "num":
            return int(text)
        if kind == "name":
            raw = self.lookup(text)
            if raw is None or raw.strip() == "":
                self.missing.append(text)
                return 0
            try:
                return int(raw.strip())
            except ValueError as exc:
                raise _ArithError(f"{text}={raw!r} is not an integer") from exc
        if text == "(":
            value = self._sum()
            if self._take() != ("op", ")"):
                raise _ArithError("missing )")
            return value
        raise _ArithError(f"unexpected {text!r}")


def _escape_unquoted(value: str) -> str:
    """Make an expansion's value safe for :func:`shlex.split` outside quotes.

    Whitespace stays active (bash splits unquoted expansions into words); quotes and backslashes
    become literal.
    """
    return re.sub(r"""(["'\\])""", r"\\\1", value)


def _escape_dquoted(value: str) -> str:
    """Make a value safe inside a double-quoted shlex word."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _escape_literal(value: str) -> str:
    """Keep ``value`` as one literal shlex word outside quotes (whitespace escaped too)."""
    return re.sub(r"""(["'\\\s])""", r"\\\1", value)


def _matching(text: str, start: int, open_s: str, close_s: str) -> int:
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


class _Shell:
    """State of the tiny shell reader: variables, positional parameters, findings."""

    def __init__(self, env: Mapping[str, str], positional: Sequence[str] = ()) -> None:
        self.vars: dict[str, str] = dict(env)
        self.exported: set[str] = set(env)
        self.positional: list[str] = list(positional)
        self.unresolved: list[str] = []
        self.notes: list[str] = []

    def child(self, positional: Sequence[str]) -> _Shell:
        """A nested shell (``bash -c`` inside a script) that sees the exported variables."""
        sub = _Shell({k: v for k, v in self.vars.items() if k in self.exported}, positional)
        sub.unresolved = self.unresolved
        sub.notes = self.notes
        return sub

    def note(self, text: str) -> None:
        """Record a note once."""
        if text not in self.notes:
            self.notes.append(text)

    def missing(self, name: str) -> None:
        """Record an unresolved variable once."""
        if name not in self.unresolved:
            self.unresolved.append(name)

    # ---- splitting a script into simple commands ----------------------------------------

    @staticmethod
    def split_commands(script: str) -> list[str]:
        """Split a script into simple commands; drop comments and ``\\<newline>`` pairs.

        Separators (outside quotes and ``$( )``/``${ }``): newline, ``;``, ``&&``, ``||``, ``|``
        and a lone ``&``. Quoting is kept in the returned texts.

        Raises:
            ServeCommandError: unbalanced quotes.
        """
        cmds: list[str] = []
        buf: list[str] = []
        quote: str | None = None
        depth = 0
        i = 0
        n = len(script)

        def flush() -> None:
            text = "".join(buf).strip()
            if text:
                cmds.append(text)
            buf.clear()

        while i < n:
            c = script[i]
            nxt = script[i + 1] if i + 1 < n else ""
            if quote == "'":
                buf.append(c)
                if c == "'":
                    quote = None
                i += 1
                continue
            if c == "\\":
                if nxt == "\n":
                    i += 2
                    continue
                buf.append(c + nxt)
                i += 2
                continue
            if quote == '"':
                buf.append(c)
                if c == '"':
                    quote = None
                elif c == "$" and nxt == "(":
                    depth += 1
                    buf.append(nxt)
                    i += 1
                elif c == ")" and depth > 0:
                    depth -= 1
                i += 1
                continue
            # unquoted
            if c in "'\"":
                quote = c
                buf.append(c)
            elif c == "#" and (not buf or buf[-1][-1:].isspace() or buf[-1][-1:] in ";&|()"):
                end = script.find("\n", i)
                i = n if end == -1 else end
                continue
            elif c == "$" and nxt in "({":
                depth += 1
                buf.append(c + nxt)
                i += 2
                continue
            elif c == "(" and depth > 0:
                depth += 1
                buf.append(c)
            elif c in ")}" and depth > 0:
                depth -= 1
                buf.append(c)
            elif depth == 0 and c in "\n;":
                flush()
            elif depth == 0 and c == "&" and nxt == "&":
                flush()
                i += 2
                continue
            elif depth == 0 and c == "|":
                flush()
                i += 2 if nxt == "|" else 1
                continue
            elif depth == 0 and c == "&" and nxt != ">" and not (buf and buf[-1].endswith((">", "<"))):
                flush()
            else:
                buf.append(c)
            i += 1
        if quote is not None:
            raise ServeCommandError(f"shell script: unbalanced {quote} quote")
        flush()
        return cmds

    # ---- parameter expansion ------------------------------------------------------------

    def lookup(self, name: str) -> str | None:
        """Value of a variable or special parameter, None when unset."""
        if name.isascii() and name.isdigit():
            idx = int(name)
            if idx == 0:
                return self.vars.get("0", "bash")
            return self.positional[idx - 1] if idx - 1 < len(self.positional) else None
        if name in ("@", "*"):
            return " ".join(self.positional)
        if name == "#":
            return str(len(self.positional))
        return self.vars.get(name)

    def expand(self, text: str, raw: bool = False) -> str:
        """Expand ``$VAR``, ``${...}``, ``$((...))`` in ``text`` outside single quotes.

        With ``raw`` the values are inserted as they are (used inside arithmetic and for
        ``${VAR:-word}`` words); otherwise they are escaped so that :func:`shlex.split` reads
        them as bash would (word splitting of unquoted values only). Unresolvable references
        stay literal and are recorded.
        """
        out: list[str] = []
        i = 0
        n = len(text)
        quote: str | None = None

        def put(value: str, literal: bool = False) -> None:
            if raw:
                out.append(value)
            elif quote == '"':
                out.append(_escape_dquoted(value))
            elif literal:
                out.append(_escape_literal(value))
            else:
                out.append(_escape_unquoted(value))

        while i < n:
            c = text[i]
            nxt = text[i + 1] if i + 1 < n else ""
            if quote == "'":
                out.append(c)
                if c == "'":
                    quote = None
                i += 1
                continue
            if c == "\\":
                if quote == '"' and nxt in "$`":
                    out.append(nxt)
                else:
                    out.append(c + nxt)
                i += 2
                continue
            if c == '"' and not raw:
                quote = None if quote == '"' else '"'
                out.append(c)
                i += 1
                continue
            if c == "'" and quote is None and not raw:
                quote = "'"
                out.append(c)
                i += 1
                continue
            if c != "$" or not nxt:
                out.append(c)
                i += 1
                continue
            # c == "$"
            if text.startswith("$((", i):
                end = _matching(text, i + 3, "((", "))")
                if end == -1:
                    out.append(c)
                    i += 1
                    continue
                expr_src = text[i + 3:end]
                literal = text[i:end + 2]
                put(self._arith(expr_src, literal), literal=True)
                i = end + 2
                continue
            if nxt == "(":
                end = _matching(text, i + 2, "(", ")")
                if end == -1:
                    out.append(c)
                    i += 1
                    continue
                literal = text[i:end + 1]
                self.note(f"command substitution {literal} not evaluated")
                put(literal, literal=True)
                i = end + 1
                continue
            if nxt == "{":
                end = _matching(text, i + 2, "{", "}")
                if end == -1:
                    out.append(c)
                    i += 1
                    continue
                put(*self._brace(text[i + 2:end], text[i:end + 1]))
                i = end + 1
                continue
            m = _NAME_RE.match(text, i + 1)
            if m is not None:
                name = m.group(0)
                value = self.lookup(name)
                if value is None:
                    self.missing(name)
                    put("$" + name, literal=True)
                else:
                    put(value)
                i = m.end()
                continue
            if (nxt.isascii() and nxt.isdigit()) or nxt in "@*#":
                value = self.lookup(nxt)
                put(value if value is not None else "")
                i += 2
                continue
            out.append(c)
            i += 1
        return "".join(out)

    def _brace(self, inner: str, literal: str) -> tuple[str, bool]:
        """Expand the inside of ``${...}``; returns (value, is_literal_fallback)."""
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#])(?:(:?[-=+?])(.*))?", inner, re.DOTALL | re.ASCII)
        if m is None:
            if inner.startswith("#") and _NAME_RE.fullmatch(inner[1:]):
                value = self.lookup(inner[1:])
                if value is not None:
                    return str(len(value)), False
            self.note(f"parameter expansion {literal} not understood")
            return literal, True
        name, op, word = m.group(1), m.group(2), m.group(3) or ""
        value = self.lookup(name)
        if op is None:
            if value is None:
                self.missing(name)
                return literal, True
            return value, False
        unset_or_null = value is None or (op.startswith(":") and value == "")
        kind = op[-1]
        if kind in "-=":
            if unset_or_null:
                default = _unquote_word(self.expand(word, raw=True))
                if kind == "=":
                    self.vars[name] = default
                return default, False
            return value or "", False
        if kind == "+":
            return ("" if unset_or_null else _unquote_word(self.expand(word, raw=True))), False
        # "?": error when unset
        if unset_or_null:
            self.missing(name)
            return literal, True
        return value or "", False

    def _arith(self, expr_src: str, literal: str) -> str:
        """Evaluate ``$(( expr ))``; on failure keep ``literal`` and record why."""
        before = len(self.unresolved)
        expanded = self.expand(expr_src, raw=True)
        if len(self.unresolved) > before:
            return literal
        evaluator = _Arith(expanded, self.lookup)
        try:
            return str(evaluator.evaluate())
        except _ArithError as exc:
            for name in evaluator.missing:
                self.missing(name)
            if not evaluator.missing:
                self.note(f"arithmetic {literal} not evaluated: {exc}")
            return literal

    # ---- running a script ---------------------------------------------------------------

    def run_script(self, script: str) -> tuple[list[str], dict[str, str]] | None:
        """Walk the commands of ``script``; return the first vLLM invocation and its env."""
        for cmd in self.split_commands(script):
            expanded = self.expand(cmd)
            try:
                words = shlex.split(expanded, comments=False, posix=True)
            except ValueError as exc:
                raise ServeCommandError(f"shell script: {exc}: {cmd[:80]!r}") from exc
            found = self.run_words(_drop_redirections(words))
            if found is not None:
                return found
        return None

    def command_env(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The environment a command started now would get."""
        env = {k: v for k, v in self.vars.items() if k in self.exported}
        env.update(extra)
        return env

    def run_words(self, words: list[str]) -> tuple[list[str], dict[str, str]] | None:
        """Interpret one simple command (already split into words)."""
        temp: dict[str, str] = {}
        i = 0
        while i < len(words):
            w = words[i]
            if w in _SKIP_WORDS:
                i += 1
                continue
            m = _ASSIGN_RE.match(w)
            if m is not None:
                temp[m.group(1)] = m.group(2)
                i += 1
                continue
            break
        rest = words[i:]
        if not rest:
            self.vars.update(temp)
            return None
        head = rest[0]
        base = head.rsplit("/", 1)[-1]
        if base in _EXPORT_WORDS:
            for arg in rest[1:]:
                if arg.startswith(("-", "+")):
                    continue
                m = _ASSIGN_RE.match(arg)
                if m is not None:
                    self.vars[m.group(1)] = m.group(2)
                    if base in ("export", "declare", "typeset"):
                        self.exported.add(m.group(1))
                elif base == "export":
                    self.exported.add(arg)
            return None
        if base == "exec":
            j = 1
            while j < len(rest) and rest[j].startswith("-"):
                j += 2 if rest[j] == "-a" else 1
            return self._with_env(temp, rest[j:])
        if base == "env":
            j = 1
            while j < len(rest):
                arg = rest[j]
                m = _ASSIGN_RE.match(arg)
                if m is not None:
                    temp[m.group(1)] = m.group(2)
                elif arg in ("-u", "--unset"):
                    j += 1
                elif not arg.startswith("-"):
                    break
                j += 1
            return self._with_env(temp, rest[j:])
        if base == "eval":
            return self._with_env(temp, None, script=" ".join(rest[1:]))
        if base in _SHELLS:
            script, positional = _shell_c_script(rest)
            if script is not None:
                sub = self.child(positional)
                sub.vars.update(temp)
                sub.exported.update(temp)
                return sub.run_script(script)
            return None
        if _vllm_entrypoint(rest) is not None:
            return rest, self.command_env(temp)
        return None

    def _with_env(
        self, temp: dict[str, str], words: list[str] | None, script: str | None = None
    ) -> tuple[list[str], dict[str, str]] | None:
        """Run ``words`` (or ``script``) with ``temp`` assignments exported for it."""
        saved_vars, saved_exp = dict(self.vars), set(self.exported)
        self.vars.update(temp)
        self.exported.update(temp)
        try:
            if script is not None:
                return self.run_script(script)
            return self.run_words(words or [])
        finally:
            self.vars, self.exported = saved_vars, saved_exp


def _unquote_word(word: str) -> str:
    """Remove one level of shell quoting from a ``${VAR:-word}`` word."""
    try:
        parts = shlex.split(word, comments=False, posix=True)
    except ValueError:
        return word
    return " ".join(parts) if parts else ""


def _drop_redirections(words: list[str]) -> list[str]:
    """Remove ``2>&1``, ``> file``, ``>>log`` and similar redirections from a word list."""
    out: list[str] = []
    skip = False
    for w in words:
        if skip:
            skip = False
            continue
        m = _REDIRECT_RE.match(w)
        if m is not None:
            if m.group(2) == "":
                skip = True
            continue
        out.append(w)
    return out


def _shell_c_script(argv: Sequence[str]) -> tuple[str | None, list[str]]:
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


_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)?)?$", re.ASCII)


def _vllm_entrypoint(words: Sequence[str]) -> tuple[str, int] | None:
    """If ``words`` start a vLLM API server, return (entrypoint, index of its first argument).

    ``vllm serve ...`` -> ("vllm serve", 2); ``python3 [-u] -m vllm.entrypoints.openai.api_server``
    -> ("api_server", k); ``python -m vllm.entrypoints.cli.main serve`` -> ("vllm serve", k).
    Other ``vllm`` sub-commands (``vllm launch render``, ``vllm bench``) are not API servers.
    """
    if not words:
        return None
    base = words[0].rsplit("/", 1)[-1]
    if base == "vllm":
        if len(words) > 1 and words[1] == "serve":
            return "vllm serve", 2
        return None
    if _PYTHON_RE.match(base):
        j = 1
        while j < len(words):
            arg = words[j]
            if arg == "-m" and j + 1 < len(words):
                module = words[j + 1]
                if module == "vllm.entrypoints.openai.api_server":
                    return "api_server", j + 2
                if module == "vllm.entrypoints.cli.main" and j + 2 < len(words) and words[j + 2] == "serve":
                    return "vllm serve", j + 3
                return None
            if arg in ("-X", "-W"):
                j += 2
                continue
            if arg.startswith("-") and not arg.startswith("--"):
                j += 1
                continue
            return None
    return None


# --------------------------------------------------------------------------------------------
# vLLM flags
# --------------------------------------------------------------------------------------------

#: vLLM flags that take no value (``store_true``/``BooleanOptionalAction``), normalised to
#: dashes. Needed so that a following positional (the model of ``vllm serve``) is not read as
#: their value. Any ``--no-*`` flag is also boolean. From ``vllm/engine/arg_utils.py`` and
#: ``vllm/entrypoints/openai/cli_args.py``.
BOOLEAN_FLAGS: frozenset[str] = frozenset({
    "enable-expert-parallel", "data-parallel-multi-port-external-lb", "enable-dbo",
    "data-parallel-hybrid-lb", "data-parallel-external-lb", "enable-eplb", "enforce-eager",
    "trust-remote-code", "enable-prefix-caching", "enable-chunked-prefill",
    "disable-log-requests", "enable-log-requests", "disable-log-stats", "enable-log-outputs",
    "enable-auto-tool-choice", "disable-frontend-multiprocessing", "enable-lora",
    "enable-lora-bias", "fully-sharded-loras", "enable-sleep-mode", "headless",
    "disable-custom-all-reduce", "disable-sliding-window", "skip-tokenizer-init",
    "enable-request-id-headers", "disable-fastapi-docs", "enable-server-load-tracking",
    "enable-force-include-usage", "enable-prompt-tokens-details", "disable-uvicorn-access-log",
    "enable-tokenizer-info-endpoint", "return-tokens-as-token-ids", "async-scheduling",
    "disable-cascade-attn", "kv-sharing-fast-prefill", "enable-prompt-embeds",
    "disable-chunked-mm-input", "use-tqdm-on-load", "enable-ssl-refresh",
    "disable-async-output-proc", "calculate-kv-scales", "disable-hybrid-kv-cache-manager",
    "enable-return-routed-experts", "enable-reasoning", "log-error-stack",
    "enable-multimodal-encoder-data-parallel", "enable-mfu-metrics", "enable-log-deltas",
    "disable-mm-preprocessor-cache", "enable-chunked-local-attn", "ray-workers-use-nsight",
    "enable-layerwise-nvtx-tracing", "enable-microbatching", "enable-elastic-ep",
    "allow-deprecated-quantization", "enable-dual-batch-overlap", "disable-log-stats-server",
})

#: Flags that take one or more values (argparse ``nargs="+"``).
_MULTI_VALUE_FLAGS = frozenset({"served-model-name", "lora-modules", "cuda-graph-sizes",
                                "prompt-adapters"})

#: Short vLLM aliases -> long flag (``vllm/engine/arg_utils.py``).
_SHORT_FLAGS = {
    "-tp": "tensor-parallel-size", "-pp": "pipeline-parallel-size",
    "-dp": "data-parallel-size", "-dpl": "data-parallel-size-local",
    "-dpa": "data-parallel-address", "-dpp": "data-parallel-rpc-port",
    "-dpr": "data-parallel-rank", "-dpb": "data-parallel-backend",
    "-dph": "data-parallel-hybrid-lb", "-dpe": "data-parallel-external-lb",
    "-ep": "enable-expert-parallel", "-q": "quantization", "-asc": "api-server-count",
    "-cc": "compilation-config", "-ac": "attention-config",
}
_SHORT_BOOLEAN = frozenset({"-dph", "-dpe", "-ep"})


def _normalise_flag(raw: str) -> str:
    """``--kv_transfer_config.kv_connector`` -> ``kv-transfer-config.kv_connector``.

    Underscores become dashes only before the first dot, as vLLM's ``FlexibleArgumentParser``
    does; the dotted part names JSON keys and keeps its spelling.
    """
    name = raw.lstrip("-")
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


def _is_value_token(token: str) -> bool:
    """Can ``token`` be the value of a preceding flag? (not a flag; negative numbers are)."""
    return not token.startswith("-") or bool(re.match(r"^-[0-9]", token)) or token == "-"


@dataclass
class _Parsed:
    """Raw result of walking vLLM's argv."""

    flags: dict[str, list[str]] = field(default_factory=dict)   # name -> values per occurrence
    dotted: list[tuple[str, str]] = field(default_factory=list)  # (flag.path, value) in order
    positionals: list[str] = field(default_factory=list)
    config_eq_form: bool = False


def _walk_flags(args: Sequence[str]) -> _Parsed:
    """Split vLLM's arguments into flags, dotted dict flags and positionals."""
    parsed = _Parsed()
    i = 0
    n = len(args)
    while i < n:
        tok = args[i]
        if tok == "--":
            parsed.positionals.extend(args[i + 1:])
            break
        if tok.startswith("-") and not _is_value_token(tok):
            if tok.startswith("--"):
                raw_name, eq, inline = tok.partition("=")
                name = _normalise_flag(raw_name)
            else:
                short, eq, inline = tok.partition("=")
                if short in _SHORT_FLAGS:
                    name = _SHORT_FLAGS[short]
                elif short.startswith("-O") and len(short) > 2:
                    name, eq, inline = "compilation-config", "=", short[2:]
                else:
                    name = short.lstrip("-")
            if name == "config" and eq:
                parsed.config_eq_form = True
            values: list[str]
            if eq:
                values = [inline]
            elif name in BOOLEAN_FLAGS or name.startswith("no-") or tok in _SHORT_BOOLEAN:
                values = []
            elif name in _MULTI_VALUE_FLAGS:
                values = []
                while i + 1 < n and _is_value_token(args[i + 1]):
                    values.append(args[i + 1])
                    i += 1
            elif i + 1 < n and _is_value_token(args[i + 1]):
                values = [args[i + 1]]
                i += 1
            else:
                values = []
            if "." in name:
                parsed.dotted.append((name, values[0] if values else "true"))
            else:
                parsed.flags.setdefault(name, []).append(" ".join(values) if name not in
                                                         _MULTI_VALUE_FLAGS else "\0".join(values))
        else:
            parsed.positionals.append(tok)
        i += 1
    return parsed


def _decode_dotted_value(value: str) -> Any:
    """Value of a dotted dict flag: JSON, else a human-readable int, else the string (vLLM)."""
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        pass
    try:
        return human_readable_int(value)
    except ValueError:
        return value


def _merge_dotted(items: Sequence[tuple[str, str]], flag: str) -> dict[str, Any]:
    """Build the dict vLLM builds from ``--flag.a.b value`` items (``key+`` appends to a list)."""
    result: dict[str, Any] = {}
    for name, raw in items:
        path = name.split(".")[1:]
        if not path or any(p == "" for p in path):
            raise ServeCommandError(f"--{flag}: malformed dotted key {name!r}")
        value = _decode_dotted_value(raw)
        node = result
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = {}
                node[key] = child
            node = child
        last = path[-1]
        if last.endswith("+"):
            last = last[:-1]
            existing = node.get(last)
            if isinstance(existing, list):
                existing.append(value)
            else:
                node[last] = [value]
        else:
            node[last] = value
    return result


def _decode_json_flag(flag: str, text: str) -> dict[str, Any]:
    """Decode a JSON dict flag value (human-readable numbers expanded).

    Raises:
        ServeCommandError: not valid JSON or not an object; the message names ``--flag``.
    """
    try:
        decoded = json.loads(expand_human_readable_json(text))
    except (ValueError, RecursionError) as exc:
        raise ServeCommandError(f"--{flag}: invalid JSON ({exc}): {text[:120]!r}") from exc
    if not isinstance(decoded, dict):
        raise ServeCommandError(f"--{flag}: expected a JSON object, got {type(decoded).__name__}")
    return decoded


def _last(parsed: _Parsed, name: str) -> str | None:
    values = parsed.flags.get(name)
    return values[-1] if values else None


def _int_flag(parsed: _Parsed, name: str, notes: list[str]) -> tuple[int | None, bool]:
    """(value, ok) of an int flag; a value holding an unexpanded ``$`` is noted, not raised."""
    raw = _last(parsed, name)
    if raw is None:
        return None, True
    try:
        return int(raw), True
    except ValueError:
        if "$" in raw:
            notes.append(f"--{name} {raw!r} could not be resolved")
            return None, False
        raise ServeCommandError(f"--{name}: not an integer: {raw!r}") from None


def _build_config(argv: list[str], entrypoint: str, first_arg: int, env: Mapping[str, str],
                  unresolved: list[str], notes: list[str]) -> ServeConfig:
    """Turn a vLLM invocation into a :class:`ServeConfig`."""
    parsed = _walk_flags(argv[first_arg:])

    model = _last(parsed, "model")
    if entrypoint == "vllm serve" and parsed.positionals:
        model = parsed.positionals[0]
    served_raw = _last(parsed, "served-model-name")
    served = served_raw.split("\0")[0] if served_raw else None

    port, port_ok = _int_flag(parsed, "port", notes)
    if port is None and port_ok:
        port = 8000
    dpl, dpl_ok = _int_flag(parsed, "data-parallel-size-local", notes)
    if port is not None and not 0 < port < 65536:
        raise ServeCommandError(f"--port: {port} is not a TCP port")
    if dpl is not None and not 0 < dpl <= 4096:
        raise ServeCommandError(f"--data-parallel-size-local: {dpl} out of range")
    if "data-parallel-multi-port-external-lb" in parsed.flags and port is not None:
        count = dpl
        if count is None and dpl_ok:
            dps, _ = _int_flag(parsed, "data-parallel-size", notes)
            count = dps if dps is not None else 1
            notes.append("--data-parallel-multi-port-external-lb without "
                         f"--data-parallel-size-local: assumed {count} local API server(s)")
        if count is None:
            ports: tuple[int, ...] = (port,)
            notes.append("number of local DP API servers unknown; only the first port listed")
        else:
            ports = tuple(p for p in range(port, port + max(min(count, 4096), 1)) if p < 65536)
    else:
        ports = (port,) if port is not None else ()

    scheme = "https" if ("ssl-certfile" in parsed.flags or "ssl-keyfile" in parsed.flags) else "http"

    ktc: dict[str, Any] | None = None
    full = _last(parsed, "kv-transfer-config")
    dotted = [(k, v) for k, v in parsed.dotted if k.startswith("kv-transfer-config.")]
    if dotted:
        ktc = _merge_dotted(dotted, "kv-transfer-config")
        if full is not None:
            notes.append("--kv-transfer-config given both as JSON and as dotted keys: "
                         "vLLM keeps the dotted keys only")
    elif full is not None:
        ktc = _decode_json_flag("kv-transfer-config", full)

    size_raw = _last(parsed, "kv-offloading-size")
    size: float | None = None
    if size_raw is not None:
        try:
            size = float(size_raw)
        except ValueError:
            if "$" not in size_raw:
                raise ServeCommandError(f"--kv-offloading-size: not a number: {size_raw!r}") from None
            notes.append(f"--kv-offloading-size {size_raw!r} could not be resolved")
    backend = _last(parsed, "kv-offloading-backend")
    if backend is None and size is not None:
        backend = "native"

    config_file = _last(parsed, "config")
    if config_file is not None:
        notes.append(f"--config {config_file}: the file lives in the pod and was not read; "
                     "flags set there are unknown")
        if parsed.config_eq_form:
            notes.append("--config=FILE is accepted but not expanded by vLLM (only '--config FILE')")

    return ServeConfig(
        argv=tuple(argv),
        entrypoint=entrypoint,
        model=model,
        served_model_name=served,
        api_ports=tuple(sorted(set(ports))),
        scheme=scheme,
        kv_transfer_config=MappingProxyType(ktc) if ktc is not None else None,
        kv_offloading_size_gib=size,
        kv_offloading_backend=backend,
        data_parallel_size_local=dpl,
        config_file=config_file,
        unresolved_vars=tuple(unresolved),
        notes=tuple(notes),
        env=MappingProxyType(dict(env)),
    )


def parse_argv(argv: Sequence[str], env: Mapping[str, str]) -> ServeConfig | None:
    """Parse a process argv (after Kubernetes expansion) that may start vLLM.

    ``argv`` may be the vLLM invocation itself (``vllm serve ...``, ``python3 -m ...``) or a
    wrapper: ``/bin/bash -c SCRIPT``, ``sh -c``, ``bash -lc``, ``env X=1 vllm ...``,
    ``exec ...``. ``env`` is the process environment (used for ``$VAR`` in scripts).

    Returns:
        A :class:`ServeConfig`, or None when no vLLM API server is started.

    Raises:
        ServeCommandError: malformed vLLM arguments (e.g. invalid ``--kv-transfer-config``
            JSON, non-integer ``--port``) or an unreadable script (unbalanced quotes).
    """
    shell = _Shell(env)
    try:
        found = shell.run_words(list(argv))
    except RecursionError as exc:
        raise ServeCommandError("command line too deeply nested to read") from exc
    if found is None:
        return None
    words, cmd_env = found
    entry = _vllm_entrypoint(words)
    if entry is None:  # pragma: no cover - run_words only returns vLLM invocations
        return None
    entrypoint, first = entry
    try:
        return _build_config(list(words), entrypoint, first, cmd_env, shell.unresolved,
                             shell.notes)
    except RecursionError as exc:
        raise ServeCommandError("vLLM arguments too deeply nested to read") from exc


def parse_container(
    container: Mapping[str, Any],
    env: Mapping[str, str],
    image_entrypoints: EntrypointTable = DEFAULT_ENTRYPOINTS,
) -> ServeConfig | None:
    """Parse a pod-spec container into a :class:`ServeConfig`.

    Args:
        container: one item of ``spec.containers`` as the API returns it (``command``, ``args``,
            ``image`` are read).
        env: the container's resolved environment (name -> value), used for Kubernetes
            ``$(VAR)`` expansion of ``command``/``args`` and for ``$VAR`` in shell scripts.
        image_entrypoints: image -> entrypoint table for containers without ``command``.

    Returns:
        None when the container does not run a vLLM API server (or its image is unknown and it
        has no ``command``).

    Raises:
        ServeCommandError: see :func:`parse_argv`.
    """
    unresolved: list[str] = []
    command = [kubernetes_expand(str(x), env, unresolved) for x in container.get("command") or []]
    args = [kubernetes_expand(str(x), env, unresolved) for x in container.get("args") or []]
    notes: list[str] = []
    if not command:
        entry = image_entrypoint(str(container.get("image", "")), image_entrypoints)
        if entry is None:
            return None
        command = list(entry)
        notes.append(f"no command: image entrypoint {' '.join(entry)!r} assumed")
    cfg = parse_argv(command + args, env)
    if cfg is None:
        return None
    merged_unresolved = tuple(dict.fromkeys([*unresolved, *cfg.unresolved_vars]))
    return ServeConfig(
        argv=cfg.argv, entrypoint=cfg.entrypoint, model=cfg.model,
        served_model_name=cfg.served_model_name, api_ports=cfg.api_ports, scheme=cfg.scheme,
        kv_transfer_config=cfg.kv_transfer_config,
        kv_offloading_size_gib=cfg.kv_offloading_size_gib,
        kv_offloading_backend=cfg.kv_offloading_backend,
        data_parallel_size_local=cfg.data_parallel_size_local, config_file=cfg.config_file,
        unresolved_vars=merged_unresolved, notes=tuple(notes) + cfg.notes, env=cfg.env,
    )
