"""Rows -> table / wide / json / yaml, and the exit code a run earns.

Rows are plain dicts with stable snake_case keys and a ``kind`` field (``VllmPod``,
``CacheReset``, ``EngineMetrics``); the JSON and YAML outputs are the list of rows exactly,
the table shows chosen columns as kubectl does (upper-case headers, ``-`` for nothing, no
borders). The README documents each kind's fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from .engines import ENGINES
from .printers import escaped
from .redact import redact_value

#: The ``-o`` formats (``jsonpath`` and ``custom-columns`` take ``=TEMPLATE``/``=SPEC``, and have
#: ``-file=PATH`` forms: :mod:`~kubectl_kvreset.printers`).
OUTPUT_FORMATS = ("table", "wide", "json", "yaml", "name", "jsonpath", "custom-columns")


class ExitCode(IntEnum):
    """Exit codes of every sub-command (documented in ``--help``).

    When several apply the most severe wins: INTERRUPTED (or TERMINATED), then FAILED, then
    UNCONFIRMED.
    """

    OK = 0            # every targeted tier emptied and confirmed / every pod read
    FAILED = 1        # something failed or a tier was left full
    USAGE = 2         # bad flags or configuration, before any work
    UNCONFIRMED = 3   # everything done but some result could not be confirmed (vLLM < 0.26)
    INTERRUPTED = 130
    TERMINATED = 143  # SIGTERM, stopped as after Ctrl-C (128 + 15, the shells' code for it)

    @staticmethod
    def combine(codes: Iterable[ExitCode]) -> ExitCode:
        """The code of a run whose parts ended with ``codes`` (TERMINATED > INTERRUPTED > FAILED > UNCONFIRMED > OK)."""
        rank = {ExitCode.OK: 0, ExitCode.UNCONFIRMED: 1, ExitCode.FAILED: 2, ExitCode.USAGE: 3, ExitCode.INTERRUPTED: 4,
                ExitCode.TERMINATED: 5}
        return max(codes, key=lambda c: rank[c], default=ExitCode.OK)


@dataclass(frozen=True)
class Column:
    """A table column: ``header``, the row ``key`` it shows, and whether only ``-o wide`` shows it.

    For the default table only (``-o wide``, JSON and YAML show the row as it is): ``short``
    turns the value into a shorter one (:func:`step_codes`, :func:`fold_ports`); ``notes``
    moves each long text of the cell (the whole string, or each long item of a list) under the
    table as a numbered note, the cell showing ``[n]``: a sentence repeated on many rows is
    printed once."""

    header: str
    key: str
    wide: bool = False
    short: Callable[[Any], Any] | None = None
    notes: bool = False


#: A text this long or longer, in a ``notes`` column, goes under the table as a numbered note.
NOTE_AT = 40


@dataclass
class Report:
    """The rows of one run, the columns to show them in, and the exit code they earn."""

    kind: str
    columns: Sequence[Column]
    rows: list[dict[str, Any]] = field(default_factory=list)
    codes: list[ExitCode] = field(default_factory=list)

    def add(self, row: Mapping[str, Any], code: ExitCode = ExitCode.OK) -> None:
        """Append a row (``kind`` is filled in) and the exit code it earns."""
        self.rows.append({"kind": self.kind, **row})
        self.codes.append(code)

    @property
    def exit_code(self) -> ExitCode:
        """The combined exit code of every row."""
        return ExitCode.combine(self.codes)

    def render(self, fmt: str, *, no_headers: bool = False) -> str:
        """Render the rows as ``table``, ``wide``, ``json`` (a list, 2-space indent), ``yaml``,
        or one of kubectl's printers (:mod:`~kubectl_kvreset.printers`: ``name``,
        ``jsonpath=TEMPLATE``, ``custom-columns=SPEC``; ``fmt`` is a ``-o`` value).
        ``no_headers``: tables and custom columns without their header line (``--no-headers``).

        Every format shows the rows with their secrets masked (:func:`~.redact.redact_value`:
        secret flags' values in ``argv``, URL passwords, secret fields of JSON arguments); the
        rows themselves keep what they hold.

        Raises:
            ValueError: an unknown format (:class:`~kubectl_kvreset.printers.PrinterError`).
        """
        from . import printers

        rows: list[dict[str, Any]] = redact_value(self.rows)
        if fmt == "json":
            return json.dumps(rows, indent=2, sort_keys=False) + "\n"
        if fmt == "yaml":
            import yaml

            return str(yaml.safe_dump(rows, sort_keys=False, default_flow_style=False))
        if fmt not in ("table", "wide"):
            parsed = printers.parse_output(fmt)
            if parsed.name == "name":
                return printers.names(rows)
            if parsed.name == "jsonpath":
                return printers.jsonpath(parsed.argument, rows)
            if parsed.name == "custom-columns":
                return printers.custom_columns(parsed.argument, rows, no_headers=no_headers)
            return self.render(parsed.name, no_headers=no_headers)
        cols = [c for c in self.columns if fmt == "wide" or not c.wide]
        notes: list[str] = []
        cells = [[cell(_compact(r.get(c.key), c, notes) if fmt == "table" else r.get(c.key)) for c in cols]
                 for r in rows]
        text = table([c.header for c in cols], cells)
        if no_headers and text:
            text = text.split("\n", 1)[1]
        return text + "".join(f"[{i}] {escaped(note)}\n" for i, note in enumerate(notes, 1))


def summary_line(rows: Sequence[Mapping[str, Any]], code: int) -> str:
    """One line for the end of a ``clear`` run: ``64 ports on 32 pods: 60 emptied, 3
    unconfirmed, 1 left -> exit 1``, from its ``CacheReset`` rows (``emptied``, ``unconfirmed``,
    ``unknown`` for a reset interrupted in flight, ``skipped``; every other result counts as
    ``left``) and the run's exit code."""
    ports = [r for r in rows if r.get("kind") == "CacheReset"]
    pods = {(r.get("namespace"), r.get("pod")) for r in ports}
    counts: dict[str, int] = {"emptied": 0}
    for r in ports:
        result = str(r.get("result") or "")
        if result in ("emptied", "unconfirmed", "skipped"):
            group = result
        elif result == "interrupted" and "unknown: interrupted in flight" in str(r.get("message") or ""):
            group = "unknown"
        else:
            group = "left"
        counts[group] = counts.get(group, 0) + 1
    order = ("emptied", "unconfirmed", "unknown", "skipped", "left")
    said = ", ".join(f"{counts[k]} {k}" for k in order if k in counts and (counts[k] or k == "emptied"))
    stores = [r for r in rows if r.get("kind") == "StoreClear"]
    extra = f"; {len(stores)} store call{'s' if len(stores) != 1 else ''}" if stores else ""
    return (f"{len(ports)} port{'s' if len(ports) != 1 else ''} on {len(pods)} pod{'s' if len(pods) != 1 else ''}: "
            f"{said}{extra} -> exit {int(code)}")


#: Results of a row that earn no exit code above 0.
_FINE = frozenset({"emptied", "read", "enabled", "disabled", "unchanged", "restarted", "planned", "skipped", "ok",
                   "replaced", "would enable", "would disable", "cleared", "dry-run", "nothing to do"})


def exit_reason(rows: Sequence[Mapping[str, Any]], code: int) -> str:
    """One line on stderr saying why a run exits 1 or 3 when nothing else said it:
    ``error: 2 of 8 rows failed or left a tier (a: failed; ...): their RESULT, MESSAGE and
    ERROR columns say why (exit 1)`` (``warning:`` for 3)."""
    bad = [r for r in rows if r.get("error") or str(r.get("result") or "") not in _FINE]
    word = "unconfirmed" if int(code) == 3 else "failed or left a tier"
    shown = "; ".join(f"{r.get('pod') or r.get('owner') or r.get('address') or r.get('kind')}: "
                      f"{r.get('result') or 'error'}" for r in bad[:3])
    more = f"; {len(bad) - 3} more" if len(bad) > 3 else ""
    prefix = "warning" if int(code) == 3 else "error"
    return (f"{prefix}: {len(bad)} of {len(rows)} rows {word} ({shown}{more}): their RESULT, MESSAGE and ERROR "
            f"columns say why (exit {int(code)})")


def _compact(value: Any, column: Column, notes: list[str]) -> Any:
    """``value`` as the default table shows it in ``column`` (see :class:`Column`); a note
    added to ``notes`` once, however many rows hold it."""
    if column.short is not None:
        value = column.short(value)
    if not column.notes:
        return value

    def ref(text: Any) -> Any:
        if not isinstance(text, str) or len(text) < NOTE_AT:
            return text
        if text not in notes:
            notes.append(text)
        return f"[{notes.index(text) + 1}]"

    if isinstance(value, (list, tuple)):
        return [ref(v) for v in value]
    return ref(value)


def fold_ports(ports: Any) -> Any:
    """A list of port numbers with runs folded: ``[8200, 8201, ..., 8207, 9000]`` ->
    ``["8200-8207", 9000]``; anything else unchanged."""
    if not isinstance(ports, (list, tuple)) or not all(isinstance(p, int) and not isinstance(p, bool) for p in ports):
        return ports
    out: list[Any] = []
    run: list[int] = []
    for port in list(ports) + [None]:
        if port is not None and run and port == run[-1] + 1:
            run.append(port)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else run[0])
            if len(run) == 2:
                out.append(run[1])
        run = [port] if port is not None else []
    return out


#: Short codes of a plan's steps for the default table (``-o wide`` and JSON keep the routes).
STEP_CODES = tuple(code for engine in ENGINES for code in engine.step_codes) + (
    ("clear-fs", "fs"), ("restart", "restart"), ("devmode", "devmode"), ("none", "none"))


def step_codes(steps: Any) -> Any:
    """A plan's steps as short codes: ``POST /reset_prefix_cache?...`` -> ``prefix``,
    ``/reset_mm_cache`` -> ``mm``, ``/reset_encoder_cache`` -> ``encoder``, SGLang's ``/flush_cache``
    -> ``flush`` (each engine's :attr:`~kubectl_kvreset.engines.base.Engine.step_codes`),
    ``clear-fs ROOT`` -> ``fs``, ``restart OWNER`` -> ``restart``, ``devmode --enable OWNER`` -> ``devmode``, the
    fallback taken only if vLLM answers 404 -> ``restart-if-404`` / ``devmode-if-404``; any
    other step is kept as it is. Anything but a list is returned unchanged."""
    if not isinstance(steps, (list, tuple)):
        return steps
    out: list[Any] = []
    for step in steps:
        text = str(step)
        suffix = ""
        if text.startswith("if vLLM answers 404"):
            text, suffix = text.split(": ", 1)[-1], "-if-404"
        code = next((c for prefix, c in STEP_CODES if text.startswith(prefix)), None)
        if code == "prefix" and "reset_external=false" in text:
            code = "prefix?reset_external=false"  # a held store-wide hook stays visible in the table
        out.append(code + suffix if code else step)
    return out


def cell(value: Any) -> str:
    """A table cell: None/empty -> ``-``, lists joined by commas, floats trimmed, bools lower-case,
    control characters escaped (:func:`escaped`)."""
    if value is None or value == "" or value == [] or value == ():
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{escaped(str(k))}={cell(v)}" for k, v in value.items())
    return escaped(str(value))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """kubectl-style plain table: headers, columns separated by 3 spaces, no borders.
    No rows gives the empty string (the caller says "No resources found" on stderr)."""
    if not rows:
        return ""
    import tabulate as tabulate_module
    from tabulate import DataRow, TableFormat, tabulate

    tabulate_module.MIN_PADDING = 0  # headers as wide as their text, as kubectl prints them
    # kubectl's printers (k8s.io/cli-runtime/pkg/printers/tabwriter.go): left-aligned columns
    # separated by three spaces, no borders
    kubectl_format = TableFormat(lineabove=None, linebelowheader=None, linebetweenrows=None, linebelow=None,
                                 headerrow=DataRow("", "   ", ""), datarow=DataRow("", "   ", ""),
                                 padding=0, with_header_hide=None)
    text: str = tabulate(rows, headers=list(headers), tablefmt=kubectl_format, disable_numparse=True,
                         stralign="left")
    return "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
