"""The alert catalogue (`shared.alerts.AlertKind`) is the one list of alert kinds: every producer
names a kind from it, the alert table of docs/operations.md is rendered from it, and the docs name no
other."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from shared.alerts import Alert, AlertKind

REPO_ROOT = Path(__file__).resolve().parents[2]
ALERT_PAGE = REPO_ROOT / "docs" / "operations.md"
TABLE = re.compile(r"<!-- alert-kinds:begin -->\n(.*?)<!-- alert-kinds:end -->", re.DOTALL)
DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]


def alert_table() -> str:
    rows = [f"| `{kind}` | {kind.severity} | {kind.meaning} |" for kind in AlertKind]
    return "\n".join(["| kind | severity | meaning |", "|---|---|---|", *rows]) + "\n"


def test_the_alert_table_is_the_catalogue() -> None:
    found = TABLE.search(ALERT_PAGE.read_text())
    assert found is not None, "docs/operations.md lost its <!-- alert-kinds:begin/end --> markers"
    assert found.group(1) == alert_table(), "paste this table between the markers:\n" + alert_table()


def test_every_kind_has_a_severity_and_a_one_line_meaning() -> None:
    for kind in AlertKind:
        assert kind.severity in ("INFO", "WARNING", "ERROR"), kind
        assert kind.meaning and "\n" not in kind.meaning and "|" not in kind.meaning, kind


def test_an_alert_takes_its_severity_from_its_kind_and_keeps_its_kind_as_a_string() -> None:
    alert = Alert.of(AlertKind.STRAY_JOB, "cancelled", request_id="r1")
    assert (alert.kind, alert.severity) == ("stray_job", "WARNING")
    assert type(alert.to_json()["kind"]) is str
    assert Alert.of(AlertKind.PRUNE_REPORT, "pruned", severity="ERROR").severity == "ERROR"


def string_kinds(source: str) -> list[tuple[int, str]]:
    """(line, literal) of every alert kind written as a string where the catalogue belongs: the
    kind of `Alert(...)`/`Alert.of(...)`, the kind argument of `attempt_alert` and `alert_marker`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        candidates = [kw.value for kw in node.keywords if kw.arg == "kind"]
        if name == "attempt_alert" and len(node.args) > 2:
            candidates.append(node.args[2])
        if name in ("alert_marker", "of") and node.args:
            candidates.append(node.args[0])
        if name in ("Alert", "of", "attempt_alert", "alert_marker"):
            found += [
                (c.lineno, c.value) for c in candidates if isinstance(c, ast.Constant) and isinstance(c.value, str)
            ]
    return found


def test_the_scan_finds_a_kind_written_as_a_string() -> None:
    source = (
        'Alert(kind="job_failed", severity="ERROR", message="m")\n'
        'attempt_alert(record, attempt, "job_stuck", now, "m")\n'
        'alert_marker("stray_job", 1)\n'
        "attempt_alert(record, attempt, AlertKind.JOB_STUCK, now, 'm')\n"
    )
    assert string_kinds(source) == [(1, "job_failed"), (2, "job_stuck"), (3, "stray_job")]


def test_every_producer_names_its_kind_from_the_catalogue() -> None:
    written = {
        f"{path.relative_to(REPO_ROOT)}:{line}": literal
        for root in ("shared", "spotjobs", "functions")
        for path in sorted((REPO_ROOT / root).rglob("*.py"))
        for line, literal in string_kinds(path.read_text())
    }
    assert written == {}


def test_the_docs_name_only_catalogue_kinds() -> None:
    kinds = {kind.value for kind in AlertKind}
    named = {
        (doc.name, name)
        for doc in DOCS
        for name in re.findall(r"`([a-z_]+)` alerts?\b", doc.read_text())
        if name not in kinds
    }
    assert named == set()
