"""kubectl's printers on rows (``tests/conformance/test_kubectl_printers.py`` compares them with
real kubectl; these check the rules without a cluster)."""

from __future__ import annotations

import pytest

from kubectl_kvreset import printers
from kubectl_kvreset.printers import PrinterError, custom_columns, jsonpath, names, parse_output
from kubectl_kvreset.report import Column, Report

ROWS = [
    {"kind": "CacheReset", "pod": "a", "port": 8000, "tiers": ["gpu", "cpu"], "m": {"b": 1, "a": "<x>"}, "f": 0.5},
    {"kind": "CacheReset", "pod": "a", "port": 8001, "role": "decode"},
    {"kind": "StoreClear", "address": "redis.llm:6379"},
]


def test_jsonpath_reads_the_rows_as_a_list() -> None:
    assert jsonpath("{.items[*].pod}", ROWS) == "a a"
    assert jsonpath("{.kind}", ROWS) == "List"
    assert jsonpath('{range .items[*]}{.port}{"\\n"}{end}', ROWS) == "8000\n8001\n\n"
    assert jsonpath("{.items[0].m}", ROWS) == '{"a":"\\u003cx\\u003e","b":1}'
    assert jsonpath("{.items[0].tiers}", ROWS) == '["gpu","cpu"]'
    assert jsonpath('{.items[?(@.role=="decode")].port}', ROWS) == "8001"
    assert jsonpath("{.items[*].nothing}", ROWS) == ""
    assert jsonpath("{.items[*]['pod','port']}", ROWS) == "a a 8000 8001"


@pytest.mark.parametrize("value,message", [
    ("jsonpath={.items", "error parsing jsonpath {.items, unclosed action"),
    ("jsonpath={end}", "not in range, nothing to end"),
    ("jsonpath=", "template format specified but no template given"),
    ("custom-columns=POD", "unexpected custom-columns spec: POD, expected <header>:<json-path-expr>"),
    ("custom-columns=", "custom-columns format specified but no custom columns given"),
    ("xml", 'unable to match a printer suitable for the output format "xml"'),
    ("json=x", 'unable to match a printer suitable for the output format "json=x"'),
])
def test_bad_values_are_refused_with_kubectl_words(value: str, message: str) -> None:
    with pytest.raises(PrinterError, match=message.replace("[", r"\[").replace("(", r"\(").replace(".", r"\.")
                       .replace("{", r"\{").replace("*", r"\*")):
        parse_output(value)


def test_custom_columns_as_kubectl_lays_them_out() -> None:
    out = custom_columns("POD:.pod,T:.tiers,M:.m,X:nothing,F:{.f}", ROWS[:2])
    lines = out.splitlines()
    assert lines[0].split() == ["POD", "T", "M", "X", "F"]
    assert lines[1].split() == ["a", "[gpu", "cpu]", "map[a:<x>", "b:1]", "<none>", "0.5"]
    assert lines[1].startswith("a     [gpu cpu]   ")  # each column at least 6 wide, padding 3
    assert not lines[0].endswith(" ")
    assert custom_columns("POD:.pod", ROWS, no_headers=True).splitlines() == ["a", "a", "<none>"]
    assert custom_columns("A:.x", []) == "A\n"  # the header alone, as kubectl prints it for no items
    # a control character cannot rewrite the terminal
    assert "\\n" in custom_columns("M:.message", [{"message": "a\nb"}])


def test_name_names_each_object_once() -> None:
    assert names(ROWS) == "pod/a\nstoreclear/redis.llm:6379\n"
    assert printers.row_name({"owner": "deployment/x", "kind": "Restart"}) == "deployment/x"


def test_files(tmp_path) -> None:
    cols = tmp_path / "c"
    cols.write_text("POD PORT\n.pod .port\n")
    assert str(parse_output(f"custom-columns-file={cols}")) == "custom-columns=POD:.pod,PORT:.port"
    tmpl = tmp_path / "t"
    tmpl.write_text("{.items[*].pod}")
    assert str(parse_output(f"jsonpath-file={tmpl}")) == "jsonpath={.items[*].pod}"


def test_report_renders_every_format_and_no_headers() -> None:
    report = Report("CacheReset", [Column("POD", "pod"), Column("PORT", "port")])
    for row in ROWS[:2]:
        report.add(row)
    assert report.render("table").splitlines()[0].split() == ["POD", "PORT"]
    assert report.render("table", no_headers=True).splitlines() == [line for line in
                                                                     report.render("table").splitlines()[1:]]
    assert report.render("name") == "pod/a\n"
    assert report.render("jsonpath={.items[*].port}") == "8000 8001"
    assert report.render("custom-columns=P:.port", no_headers=True) == "8000\n8001\n"


def test_short_cells_of_the_default_table() -> None:
    from kubectl_kvreset.report import fold_ports, step_codes

    assert fold_ports([8200, 8201, 8202, 8203, 9000, 9002, 9003]) == ["8200-8203", 9000, 9002, 9003]
    assert fold_ports([8000]) == [8000] and fold_ports("x") == "x"
    assert step_codes(["POST /reset_prefix_cache?reset_external=true", "POST /reset_mm_cache",
                       "clear-fs /mnt/x", "if vLLM answers 404 (dev mode off): restart deployment/d",
                       "devmode --enable deployment/d (x)"]) == ["prefix", "mm", "fs", "restart-if-404", "devmode"]
    # a reset whose store-wide hook is held for consent says so in the short code too
    assert step_codes(["POST /reset_prefix_cache?reset_external=false"]) == ["prefix?reset_external=false"]


def test_long_messages_become_numbered_notes_in_the_default_table_only() -> None:
    long = "vLLM < 0.26 answers an empty 200: the reset ran but its result is not known"
    report = Report("CacheReset", [Column("POD", "pod"), Column("MESSAGE", "message", notes=True),
                                   Column("LEFT", "left", notes=True)])
    report.add({"pod": "a", "message": long, "left": ["cpu", long + "!"]})
    report.add({"pod": "b", "message": long, "left": []})
    report.add({"pod": "c", "message": "short", "left": []})
    lines = report.render("table").splitlines()
    assert lines[1].split() == ["a", "[1]", "cpu,[2]"] and lines[2].split() == ["b", "[1]", "-"]
    assert lines[3].split() == ["c", "short", "-"]
    assert lines[4:] == [f"[1] {long}", f"[2] {long}!"]
    assert long in report.render("wide").splitlines()[1] and "[1]" not in report.render("wide")
    assert report.render("table", no_headers=True).splitlines()[0].startswith("a")


def test_summary_and_exit_reason_lines() -> None:
    from kubectl_kvreset.report import exit_reason, summary_line

    rows = [{"kind": "CacheReset", "namespace": "n", "pod": p, "result": r, "message": m}
            for p, r, m in (("a", "emptied", ""), ("a", "emptied", ""), ("b", "unconfirmed", ""),
                            ("c", "interrupted", "unknown: interrupted in flight (sent)"), ("d", "failed", "x"))]
    assert summary_line(rows, 1) == "5 ports on 4 pods: 2 emptied, 1 unconfirmed, 1 unknown, 1 left -> exit 1"
    line = exit_reason(rows, 1)
    assert line.startswith("error: 3 of 5 rows failed or left a tier (b: unconfirmed; c: interrupted; d: failed)")
    assert line.endswith("(exit 1)") and "\n" not in line
    replaced = rows[:1] + [{"kind": "CacheReset", "namespace": "n", "pod": "e", "result": "replaced", "message": ""}]
    assert exit_reason(replaced + rows[4:], 1).startswith("error: 1 of 3 rows failed or left a tier (d: failed)")
