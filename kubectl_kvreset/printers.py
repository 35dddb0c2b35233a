"""kubectl's machine-readable printers for a list of rows: ``-o name``, ``-o jsonpath=TEMPLATE``
(and ``jsonpath-file=FILE``), ``-o custom-columns=SPEC`` (and ``custom-columns-file=FILE``),
with kubectl's syntax and output (``k8s.io/cli-runtime/pkg/printers`` and
``k8s.io/client-go/util/jsonpath``).

The rows are printed as ``kubectl get`` prints several objects: as one ``List`` (``{"kind":
"List", "apiVersion": "v1", "items": [rows...]}``), so ``-o jsonpath='{.items[*].pod}'`` reads
as it does for ``kubectl get pods``, and custom columns take one row per item.

The selection inside each ``{...}`` action is done by the ``python-jsonpath`` library: kubectl's
path (``.items[*].metadata.labels.llm-d\\.ai/role``) is written in that library's syntax first
(``$['items'][*]['metadata']['labels']['llm-d.ai/role']``). The template around the paths
(literal text, ``{range ...}``/``{end}``, quoted strings) and how kubectl prints what a path
selects (strings as they are, maps and lists as compact JSON, several results separated by a
space; a missing key prints nothing) are kubectl's, written here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MACHINE_FORMATS", "OutputFormat", "PrinterError", "custom_columns", "escaped", "jsonpath", "names",
           "parse_output", "row_name"]

#: Formats whose output is the whole of stdout (no progress, no notes on stdout).
MACHINE_FORMATS = ("json", "yaml", "name", "jsonpath", "jsonpath-file", "custom-columns", "custom-columns-file")

#: Every ``-o`` value, as kubectl's error message lists them (``table`` is this plugin's default).
ALLOWED = ("custom-columns", "custom-columns-file", "json", "jsonpath", "jsonpath-file", "name", "table", "wide",
           "yaml")


class PrinterError(ValueError):
    """A ``-o`` value kubectl would refuse: an unknown format, a template or spec that does not
    parse. The message is kubectl's (without its ``error:`` prefix)."""


@dataclass(frozen=True)
class OutputFormat:
    """A parsed ``-o`` value: ``name`` (one of :data:`ALLOWED`; the ``-file`` forms are read and
    turned into their inline form) and its ``argument`` (template or spec; empty for others)."""

    name: str
    argument: str = ""

    @property
    def machine(self) -> bool:
        """True when stdout is for a program: json, yaml, name, jsonpath, custom-columns."""
        return self.name in MACHINE_FORMATS

    def __str__(self) -> str:
        return f"{self.name}={self.argument}" if self.argument else self.name


def parse_output(value: str) -> OutputFormat:
    """Parse a ``-o`` value as kubectl does: ``json``, ``yaml``, ``name``, ``wide``, ``table``,
    ``jsonpath=TEMPLATE``, ``jsonpath-file=PATH``, ``custom-columns=SPEC``,
    ``custom-columns-file=PATH``. The template or spec is checked here, so a bad one is refused
    before any work.

    Raises:
        PrinterError: kubectl's message for an unknown format or a bad template/spec; OSError
            for a ``-file`` that cannot be read.
    """
    name, sep, arg = value.partition("=")
    if name in ("json", "yaml", "name", "wide", "table") and not sep:
        return OutputFormat(name)
    if name in ("jsonpath-file", "custom-columns-file") and arg:
        with open(arg, encoding="utf-8") as fh:
            text = fh.read()
        if name == "jsonpath-file":
            return parse_output("jsonpath=" + text)
        return parse_output("custom-columns=" + _columns_file_spec(text))
    if name == "jsonpath" and arg:
        _Template(arg)  # raises on a template kubectl would not parse
        return OutputFormat("jsonpath", arg)
    if name == "custom-columns" and arg:
        _columns(arg)
        return OutputFormat("custom-columns", arg)
    if name in ("jsonpath", "jsonpath-file"):
        raise PrinterError("template format specified but no template given")
    if name in ("custom-columns", "custom-columns-file"):
        raise PrinterError("custom-columns format specified but no custom columns given")
    raise PrinterError(f'unable to match a printer suitable for the output format "{value}", allowed formats are: '
                       + ",".join(ALLOWED))


#: Characters that would break a table line or rewrite the terminal: C0/C1 controls and DEL
#: (newline, carriage return, escape...), the line and paragraph separators that
#: ``str.splitlines`` splits on, and the bidirectional overrides and isolates.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def escaped(text: str) -> str:
    """``text`` fit for one table cell: unchanged when it holds no character of :data:`_UNSAFE`,
    else quoted as a JSON string would be (``"a\\nb"``; backslashes and quotes escaped, each
    unsafe character as ``\\n`` or ``\\uXXXX``, every other character kept), so the cell stays
    on its line and the value can be read back. JSON and YAML output keep the real value."""
    if _UNSAFE.search(text) is None:
        return text
    body = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _UNSAFE.sub(lambda m: _SHORT_ESCAPES.get(m.group(0), f"\\u{ord(m.group(0)):04x}"), body) + '"'


# ----------------------------------------------------------------------------- -o name


def row_name(row: Mapping[str, Any]) -> str | None:
    """The ``resource/name`` of a row for ``-o name``: ``pod/NAME`` for a row about a pod, the
    owner (``deployment/NAME``, ``leaderworkerset/NAME``) for a row about an owner, else the
    row's kind lower-cased with its store address or volume (``storeclear/redis.llm:6379``);
    None for a row naming none of these."""
    if row.get("pod") and isinstance(row.get("pod"), str):
        return f"pod/{row['pod']}"
    owner = row.get("owner")
    if isinstance(owner, str) and "/" in owner:
        return owner
    for key in ("address", "volume", "store"):
        if row.get(key):
            return f"{str(row.get('kind') or 'row').lower()}/{row[key]}"
    return None


def names(rows: Sequence[Mapping[str, Any]]) -> str:
    """``-o name``: one ``resource/name`` per line, each once, in the rows' order (kubectl prints
    each object once; several rows of one pod, one per port or container, name it once)."""
    seen: list[str] = []
    for row in rows:
        name = row_name(row)
        if name is not None and name not in seen:
            seen.append(name)
    return "".join(f"{n}\n" for n in seen)


# ----------------------------------------------------------------------------- jsonpath


def _library() -> Any:
    """python-jsonpath, imported on first use: it (and the ``regex`` package it imports) costs
    a run that prints no template some 40 ms of start-up (docs/performance.md)."""
    import jsonpath

    return jsonpath


def _as_list(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The rows as ``kubectl get`` prints several objects: a ``v1`` ``List``."""
    return {"apiVersion": "v1", "items": list(rows), "kind": "List", "metadata": {"resourceVersion": ""}}


def jsonpath(template: str, rows: Sequence[Mapping[str, Any]]) -> str:
    """``-o jsonpath=TEMPLATE`` of the rows, as kubectl prints it (no newline added).

    Raises:
        PrinterError: a template that does not parse.
    """
    return _Template(template).render(_as_list(rows))


def _go_scalar(value: Any) -> str:
    """A scalar as Go's ``fmt.Print`` writes the value JSON decoding gives (kubectl's text
    output of a string, number or bool)."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _go_float(value: float) -> str:
    """``%v`` of a float64: the shortest representation, exponent form below 1e-4 or from 1e21."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    if "e" in text:
        mantissa, _, exp = text.partition("e")
        sign = "-" if exp.startswith("-") else "+"
        digits = exp.lstrip("+-")
        return f"{mantissa}e{sign}{digits.zfill(2)}"
    return text


def _go_json(value: Any) -> str:
    """Go's ``json.Marshal`` of a decoded JSON value: compact, map keys sorted, ``<``, ``>``
    and ``&`` escaped as ``\\u003c`` ``\\u003e`` ``\\u0026``."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _text(value: Any) -> str:
    """What kubectl's jsonpath prints for one result: maps and lists as JSON, the rest as text
    (``null`` for a JSON null)."""
    if isinstance(value, (Mapping, list, tuple)):
        return _go_json(value)
    if value is None:
        return "null"
    return _go_scalar(value)


def _library_path(path: str, template: str) -> tuple[str, ...]:
    """kubectl's path (``.items[*].a\\.b``, ``$.x``, ``@``, ``..name``, ``[...]`` kept as
    written) as the segments of python-jsonpath's syntax, each field name in brackets and
    quotes (the leading ``$`` left out).

    Raises:
        PrinterError: an unclosed bracket or quote.
    """
    out: list[str] = []
    i = 0
    if path.startswith("$"):
        i = 1
    elif path.startswith("@"):
        i = 1
    while i < len(path):
        ch = path[i]
        if ch == ".":
            recursive = path.startswith("..", i)
            i += 2 if recursive else 1
            name, i = _field(path, i)
            if recursive:
                out.append("..")
            if name == "*":
                out.append("[*]")
            elif name:
                out.append("[" + json.dumps(name) + "]")
            elif not recursive and i < len(path) and path[i] != "[":
                raise PrinterError(f"error parsing jsonpath {template}, unrecognized character in action: "
                                   f"U+{ord(path[i]):04X} {path[i]!r}")
        elif ch == "[":
            end = _bracket_end(path, i, template)
            out.append(path[i:end + 1])
            i = end + 1
        elif ch.isspace():
            i += 1
        else:  # a bare field at the start (kubectl reads "items" as ".items")
            name, i = _field(path, i)
            out.append("[" + json.dumps(name) + "]")
    return tuple(out)


def _first_line(exc: Exception) -> str:
    """The library's message without the source excerpt it draws below it."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _union_members(segment: str) -> list[str] | None:
    """The members of a union segment (``['pod','role']``, ``[0,2]``), None for any other."""
    if not segment.startswith("[") or segment.startswith("[?"):
        return None
    members: list[str] = []
    quote, start = "", 1
    for i, ch in enumerate(segment[1:-1], 1):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == ",":
            members.append(segment[start:i].strip())
            start = i + 1
    if not members:
        return None
    members.append(segment[start:-1].strip())
    return members


_FIELD_END = ".[ \t\n"


def _field(path: str, i: int) -> tuple[str, int]:
    """The field name at ``path[i:]`` (``\\.`` is a dot inside the name) and where it ends."""
    name: list[str] = []
    while i < len(path) and path[i] not in _FIELD_END:
        if path[i] == "\\" and i + 1 < len(path):
            name.append(path[i + 1])
            i += 2
            continue
        name.append(path[i])
        i += 1
    return "".join(name), i


def _bracket_end(path: str, start: int, template: str) -> int:
    """The index of the ``]`` closing the bracket at ``path[start]`` (quotes and nested
    brackets of a filter respected)."""
    depth, quote, i = 0, "", start
    while i < len(path):
        ch = path[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise PrinterError(f"error parsing jsonpath {template}, unterminated array")


@dataclass(frozen=True)
class _Node:
    """One part of a template: ``text`` (literal), ``path`` (an action), ``range`` (with its
    body) or ``end``."""

    kind: str
    value: str = ""
    body: tuple[_Node, ...] = ()
    path: tuple[str, ...] = ()


class _Template:
    """A parsed kubectl JSONPath template (``k8s.io/client-go/util/jsonpath/parser.go``'s
    grammar: literal text, ``{ACTION}``; an action is a path, a quoted string, ``range PATH``
    or ``end``)."""

    def __init__(self, template: str) -> None:
        self.template = template
        flat = self._lex(template)
        self.nodes, rest = self._nest(flat, 0, top=True)
        del rest

    def _lex(self, text: str) -> list[_Node]:
        nodes: list[_Node] = []
        i = 0
        while i < len(text):
            start = text.find("{", i)
            if start < 0:
                nodes.append(_Node("text", text[i:]))
                break
            if start > i:
                nodes.append(_Node("text", text[i:start]))
            end = self._action_end(text, start + 1)
            nodes.extend(self._action(text[start + 1:end]))
            i = end + 1
        return nodes

    def _action_end(self, text: str, i: int) -> int:
        quote = ""
        depth = 0
        while i < len(text):
            ch = text[i]
            if quote:
                if ch == "\\":
                    i += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
            elif ch == "}" and depth <= 0:
                return i
            i += 1
        raise PrinterError(f"error parsing jsonpath {self.template}, unclosed action")

    def _action(self, body: str) -> list[_Node]:
        stripped = body.strip()
        if stripped == "end":
            return [_Node("end")]
        if stripped.startswith("range ") or stripped == "range":
            path = stripped[len("range"):].strip()
            steps = _library_path(path, self.template)
            self._compile(steps)
            return [_Node("range", path=steps)]
        if stripped[:1] in ("'", '"'):
            return [_Node("text", _unquote(stripped, self.template))]
        if not stripped:
            return []
        selection = _library_path(stripped, self.template)
        self._compile(selection)
        return [_Node("path", path=selection)]

    def _compile(self, path: Sequence[str]) -> None:
        """Refuse a path the library cannot parse (a bad filter), before any work."""
        jsonpath_library = _library()
        try:
            jsonpath_library.compile("$" + "".join(path))
        except jsonpath_library.JSONPathError as exc:
            raise PrinterError(f"error parsing jsonpath {self.template}, {_first_line(exc)}") from exc

    def _nest(self, flat: list[_Node], i: int, *, top: bool) -> tuple[tuple[_Node, ...], int]:
        out: list[_Node] = []
        while i < len(flat):
            node = flat[i]
            if node.kind == "end":
                if top:
                    raise PrinterError(f'error executing jsonpath "{self.template}": Error executing template: '
                                       "not in range, nothing to end.")
                return tuple(out), i + 1
            if node.kind == "range":
                body, i = self._nest(flat, i + 1, top=False)
                out.append(_Node("range", body=body, path=node.path))
                continue
            out.append(node)
            i += 1
        return tuple(out), i  # a range never ended runs to the end of the template, as in kubectl

    def render(self, data: Any) -> str:
        """The template applied to ``data`` (kubectl's ``JSONPath.Execute``)."""
        return "".join(self._render(self.nodes, data))

    def _find(self, path: Sequence[str], data: Any) -> list[Any]:
        """What ``path`` selects in ``data``, in kubectl's order: a union (``[*]['pod','role']``)
        gives every value of its first member, then every value of the next (kubectl's
        ``evalUnion``), where the library would interleave them per item."""
        for k, segment in enumerate(path):
            members = _union_members(segment)
            if members is None:
                continue
            bases = self._select(path[:k], data)
            grouped = [v for m in members for base in bases for v in self._select(("[" + m + "]",), base)]
            return [v for g in grouped for v in self._find(path[k + 1:], g)]
        return self._select(path, data)

    def _select(self, path: Sequence[str], data: Any) -> list[Any]:
        jsonpath_library = _library()
        try:
            return list(jsonpath_library.findall("$" + "".join(path), data))
        except jsonpath_library.JSONPathError as exc:
            raise PrinterError(f"error parsing jsonpath {self.template}, {_first_line(exc)}") from exc

    def _render(self, nodes: Sequence[_Node], data: Any) -> list[str]:
        out: list[str] = []
        for node in nodes:
            if node.kind == "text":
                out.append(node.value)
            elif node.kind == "path":
                out.append(" ".join(_text(v) for v in self._find(node.path, data)))
            elif node.kind == "range":
                for found in self._find(node.path, data):
                    items = found if isinstance(found, list) else [found]
                    for item in items:
                        out.extend(self._render(node.body, item))
        return out


def _unquote(text: str, template: str) -> str:
    """A quoted literal of an action (``"\\n"``, ``'\\t'``), its escapes decoded as Go's
    ``strconv.Unquote`` does for the common ones."""
    quote = text[0]
    if len(text) < 2 or text[-1] != quote:
        raise PrinterError(f"error parsing jsonpath {template}, unterminated quoted string")
    body = text[1:-1]
    escapes = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0", "a": "\a", "b": "\b",
               "f": "\f", "v": "\v"}
    out: list[str] = []
    i = 0
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body):
            out.append(escapes.get(body[i + 1], "\\" + body[i + 1]))
            i += 2
            continue
        out.append(body[i])
        i += 1
    return "".join(out)


# ----------------------------------------------------------------------------- custom-columns


def _columns_file_spec(text: str) -> str:
    """A custom-columns file (headers on the first line, paths on the second, separated by
    whitespace) as an inline spec.

    Raises:
        PrinterError: not two lines, or not as many headers as paths.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 2:
        raise PrinterError(f"unexpected custom-columns file: expected 2 lines, got {len(lines)}")
    headers, paths = lines[0].split(), lines[1].split()
    if len(headers) != len(paths):
        raise PrinterError(f"number of headers ({len(headers)}) does not match number of paths ({len(paths)})")
    return ",".join(f"{h}:{p}" for h, p in zip(headers, paths, strict=True))


_RELAXED = re.compile(r"^\{\.?([^{}]+)\}$|^\.?([^{}]+)$")


def _relaxed(path: str) -> str:
    """kubectl's ``RelaxedJSONPathExpression`` (``k8s.io/cli-runtime/pkg/printers/jsonpath.go``):
    ``.pod``, ``pod`` and ``{.pod}`` all mean ``{.pod}`` (``$.pod`` is read as a field named
    ``$``, as kubectl reads it).

    Raises:
        PrinterError: braces inside the path.
    """
    found = _RELAXED.match(path)
    if found is None:
        raise PrinterError(f"unexpected path string, expected a 'name1.name2' or '.name1.name2' or '{{name1.name2}}' "
                           f"or '{{.name1.name2}}': {path}")
    return "{." + (found.group(1) or found.group(2)) + "}"


def _columns(spec: str) -> list[tuple[str, _Template]]:
    """``HEADER:PATH,...`` parsed (kubectl's ``NewCustomColumnsPrinterFromSpec``).

    Raises:
        PrinterError: an empty spec or a part without ``:``.
    """
    if not spec.strip():
        raise PrinterError("custom-columns format specified but no custom columns given")
    out: list[tuple[str, _Template]] = []
    for part in spec.split(","):
        header, sep, path = part.partition(":")
        if not sep or not path:
            raise PrinterError(f"unexpected custom-columns spec: {part}, expected <header>:<json-path-expr>")
        out.append((header, _Template(_relaxed(path))))
    return out


def _go_value(value: Any) -> str:
    """Go's ``%v`` of a decoded JSON value (custom columns print each result so): ``[a b]`` for
    a list, ``map[k:v]`` for a map (keys sorted)."""
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{k}:{_go_value(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(_go_value(v) for v in value) + "]"
    return _go_scalar(value)


def custom_columns(spec: str, rows: Sequence[Mapping[str, Any]], *, no_headers: bool = False) -> str:
    """``-o custom-columns=SPEC`` of the rows: a header line (unless ``no_headers``), then one
    line per row; a column's results joined by commas, ``<none>`` where the path finds nothing;
    columns laid out as kubectl's tab writer does (each cell padded to its column's widest plus
    3 spaces, at least 6, the last column unpadded). Cells are made safe for a terminal
    (:func:`escaped`: a value with control characters is quoted).

    Raises:
        PrinterError: a spec that does not parse.
    """
    columns = _columns(spec)
    lines: list[list[str]] = [] if no_headers else [[h for h, _ in columns]]
    for row in rows:
        cells: list[str] = []
        for _, template in columns:
            found = [v for node in template.nodes if node.kind == "path" for v in template._find(node.path, row)]
            cells.append(escaped(",".join(_go_value(v) for v in found)) if found else "<none>")
        lines.append(cells)
    return _tabwrite(lines)


def _tabwrite(lines: Sequence[Sequence[str]]) -> str:
    """Go's ``tabwriter`` as kubectl sets it up (minimum width 6, padding 3, spaces)."""
    if not lines:
        return ""
    count = max(len(line) for line in lines)
    widths = [max(6, max((len(line[c]) for line in lines if c < len(line)), default=0) + 3) for c in range(count)]
    out = []
    for line in lines:
        cells = [cell.ljust(widths[c]) if c < len(line) - 1 else cell for c, cell in enumerate(line)]
        out.append("".join(cells))
    return "".join(f"{line}\n" for line in out)
