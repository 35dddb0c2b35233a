"""Rows -> table / wide / json / yaml, and the exit code a run earns.

Rows are plain dicts with stable snake_case keys and a ``kind`` field (``VllmPod``,
``CacheReset``, ``EngineMetrics``); the JSON and YAML outputs are the list of rows exactly,
the table shows chosen columns as kubectl does (upper-case headers, ``-`` for nothing, no
borders). The README documents each kind's fields.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

OUTPUT_FORMATS = ("table", "wide", "json", "yaml")


class ExitCode(IntEnum):
    """Exit codes of every sub-command (documented in ``--help``).

    When several apply the most severe wins: INTERRUPTED, then FAILED, then UNCONFIRMED.
    """

    OK = 0            # every targeted tier emptied and confirmed / every pod read
    FAILED = 1        # something failed or a tier was left full
    USAGE = 2         # bad flags or configuration, before any work
    UNCONFIRMED = 3   # everything done but some result could not be confirmed (vLLM < 0.26)
    INTERRUPTED = 130

    @staticmethod
    def combine(codes: Iterable[ExitCode]) -> ExitCode:
        """The code of a run whose parts ended with ``codes`` (INTERRUPTED > FAILED > UNCONFIRMED > OK)."""
        rank = {ExitCode.OK: 0, ExitCode.UNCONFIRMED: 1, ExitCode.FAILED: 2, ExitCode.USAGE: 3, ExitCode.INTERRUPTED: 4}
        return max(codes, key=lambda c: rank[c], default=ExitCode.OK)


@dataclass(frozen=True)
class Column:
    """A table column: ``header``, the row ``key`` it shows, and whether only ``-o wide`` shows it."""

    header: str
    key: str
    wide: bool = False


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

    def render(self, fmt: str) -> str:
        """Render the rows as ``table``, ``wide``, ``json`` (a list, 2-space indent) or ``yaml``.

        Raises:
            ValueError: an unknown format.
        """
        if fmt == "json":
            return json.dumps(self.rows, indent=2, sort_keys=False) + "\n"
        if fmt == "yaml":
            import yaml

            return str(yaml.safe_dump(self.rows, sort_keys=False, default_flow_style=False))
        if fmt not in ("table", "wide"):
            raise ValueError(f"unknown output format {fmt!r}; use one of {', '.join(OUTPUT_FORMATS)}")
        cols = [c for c in self.columns if fmt == "wide" or not c.wide]
        return table([c.header for c in cols], [[cell(r.get(c.key)) for c in cols] for r in self.rows])


def cell(value: Any) -> str:
    """A table cell: None/empty -> ``-``, lists joined by commas, floats trimmed, bools lower-case."""
    if value is None or value == "" or value == [] or value == ():
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ",".join(cell(v) for v in value)
    if isinstance(value, Mapping):
        return ",".join(f"{k}={cell(v)}" for k, v in value.items())
    return str(value)


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
