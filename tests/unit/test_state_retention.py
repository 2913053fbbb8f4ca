"""Every object family the functions and the CLI write into the state bucket has a retention: the
code that removes it, a lifecycle rule in terraform/storage.tf that never deletes it while needed,
or a fixed set of names (docs/ARCHITECTURE.md, "What the state bucket keeps").

The walk reads every string the code builds object names from (constants and the literal parts of
f-strings in shared/, spotjobs/, functions/): a new family, a new prefix or a new file name, fails
here until it is given a retention below (and a row in the docs' table)."""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from shared.ledger.dedupe import HORIZON_SECONDS
from shared.triggers.retention import RETENTION_SECONDS as TRIGGER_WINDOW_RETENTION_SECONDS
from tests.support.lifecycle import deleted_by_lifecycle
from tests.support.terraform import REPO_ROOT

SOURCES = ("shared", "spotjobs", "functions")
# What looks like a piece of an object name: a prefix ("requests/"), a segment ("/windows/"), a
# file ("burst.json", "-run.json") or a last segment ("/sealed").
NAME_PIECE = re.compile(r"^(/?[a-z_][a-z0-9_.-]*(/[a-z_][a-z0-9_.-]*)*(/|\.json)|/[a-z_]+|-[a-z]+\.json)$")

# Pieces of names that are not objects in the state bucket.
NOT_STATE = {
    "projects/": "Google resource names (topics, jobs, networks)",
    "/topics/": "Google resource names",
    "/subscriptions/": "Google resource names",
    "/locations/": "Google resource names",
    "/global/networks/": "Google resource names",
    "price_table.json": "a file of the package",
    "topology.json": "a file of the package",
    "region_prior.json": "a file of the package",
    "/s": "a unit the HTML report shows (per second)",
    "/emulator/v1/": "the local Vertex emulator's HTTP paths",
    "/fleet": "a page path of `spotjobs dashboard`",
    "/alerts": "a page path of `spotjobs dashboard`",
}


@dataclass(frozen=True)
class Code:
    """Removed by the code: `remover` ("module:attribute") is what removes it."""

    remover: str


@dataclass(frozen=True)
class Lifecycle:
    """Deleted by a lifecycle rule, never while needed: `needed` after its creation (or, with
    `by_custom_time`, its Custom-Time)."""

    needed: timedelta
    by_custom_time: bool = False


@dataclass(frozen=True)
class Bounded:
    """A fixed set of names (per task, region, trigger): it does not grow with history."""

    why: str


@dataclass(frozen=True)
class Family:
    doc: str  # the family as the docs' table names it
    example: str  # an object of the family
    pieces: tuple[str, ...]  # the pieces of its name the code holds
    retentions: tuple[Code | Lifecycle | Bounded, ...]


FAMILIES = {
    "ledger records": Family(
        "requests/<id>.json", "requests/r1.json", ("requests/",), (Code("shared.ledger.retention:retire"),)
    ),
    "job index": Family(
        "jobs/<job id>.json", "jobs/7.json", ("jobs/",), (Code("shared.ledger.store:LedgerStore.forget_job"),)
    ),
    "active index": Family(
        "active/<id>", "active/r1", ("active/",), (Code("shared.ledger.store:LedgerStore.remove_stale_marker"),)
    ),
    "corrupt notes": Family(
        "maintenance/corrupt/<id>.json",
        "maintenance/corrupt/r1.json",
        ("corrupt/",),
        (Code("shared.ledger.store:LedgerStore.forget_corrupt"),),
    ),
    "prune report journal": Family(
        "maintenance/prune-reports/<run>/<id>.json",
        "maintenance/prune-reports/0a1b2c/r1.json",
        ("maintenance/prune-reports/",),
        (Code("shared.pruning.journal:ReportJournal.settle"),),
    ),
    "trigger manifests": Family(
        "manifests/<id>.json",
        "manifests/trg-daily-w20261129t170000z.json",
        ("manifests/",),
        (Code("shared.ledger.store:LedgerStore.forget_manifest"),),
    ),
    "archived records": Family(
        "archive/<id>.json", "archive/r1.json", ("archive/",), (Lifecycle(timedelta(days=364)),)
    ),  # nothing reads them: kept for the operator, ledger_archive_retention_days
    "maintenance documents": Family(
        "maintenance/<task>-cursor.json",
        "maintenance/reconcile-cursor.json",
        ("maintenance/", "maintenance/locations/", "-cursor.json", "-run.json", "active-index.json"),
        (Bounded("one per task (cursor, run lease, sweep state) and one per location a create was sent to"),),
    ),
    "dedupe documents": Family(
        "dedupe/<sha256>.json",
        "dedupe/0a1b.json",
        ("dedupe/",),
        (Lifecycle(timedelta(seconds=HORIZON_SECONDS), by_custom_time=True),),
    ),
    "redrive claims": Family(
        "deadletters/redriven/<id>.json",
        "deadletters/redriven/m1.json",
        ("deadletters/redriven/",),
        (Lifecycle(timedelta(days=31)),),  # a dead letter can be pulled at most 31 days
    ),
    "unindexed preemption and kit lines": Family(
        "unindexed/<job id>/<sha256>.json",
        "unindexed/7/0a1b.json",
        ("unindexed/",),
        (Lifecycle(timedelta(days=1)),),  # an older line is stale (SPOTJOBS_MAX_EVENT_AGE_SECONDS)
    ),
    "rejection notes": Family(
        "rejections/<message id>",
        "rejections/1234567890",
        ("rejections/",),
        (Lifecycle(timedelta(days=31)),),  # Pub/Sub delivers a message 31 days at most
    ),
    "trigger definitions": Family(
        "triggers/_definitions/<name>.json",
        "triggers/_definitions/daily.json",
        ("triggers/", "_definitions/"),
        (Bounded("one per trigger; `spotjobs triggers delete` removes it"),),
    ),
    "trigger retention sweep": Family(
        "triggers/_retention.json", "triggers/_retention.json", ("_retention.json",), (Bounded("one"),)
    ),
    "trigger state": Family(
        "triggers/<name>/state.json", "triggers/daily/state.json", ("/state.json",), (Bounded("one per trigger"),)
    ),
    "trigger open markers": Family(
        "triggers/<name>/open/<window>",
        "triggers/daily/open/w20261129t170000z",
        ("/open/",),
        (Code("shared.triggers.windows:close_window"),),
    ),
    "trigger windows": Family(
        "triggers/<name>/windows/<window>.json",
        "triggers/daily/windows/w20261129t170000z/objects/k1",
        ("/windows/", "/objects/", "/sealed"),
        (Code("shared.triggers.retention:retire_windows"),),
    ),
    "pacing slots": Family(
        "pacing/slots/<region>/<n>",
        "pacing/slots/us-central1/000000000001",
        ("pacing/", "slots/"),
        (Lifecycle(timedelta(minutes=1)),),  # taken in its own second, never read after
    ),
    "pacing line": Family(
        "pacing/<region>/waiting/<entry>",
        "pacing/us-central1/waiting/0000100~r1~1",
        ("waiting/",),
        (Code("shared.pacing:Pacer.remove"),),
    ),
    "drainer lease": Family(
        "pacing/<region>/drainer.json",
        "pacing/us-central1/drainer.json",
        ("drainer.json",),
        (Bounded("one per region"), Code("shared.pacing:Pacer.release")),
    ),
    "fleet observations": Family(
        "fleet/<class>/<location>/<fact>",
        "fleet/a3-highgpu-8g+nvidia_h100_80gb+8/us-east4/wait~1764590400~1800~0~0a1b-1~0",
        ("fleet/",),
        (Lifecycle(timedelta(days=7)),),  # the estimate reads a week (shared/fleet/store.py)
    ),
    "alerts log": Family(
        "alerts/<day>/<time>-<digest>.json",
        "alerts/2026-12-06/093000.000000-0a1b2c3d4e5f6a7b.json",
        ("alerts/",),
        (Lifecycle(timedelta(days=30)),),  # the dashboard shows a week; kept LOG_DAYS (shared/deciding/alert_log.py)
    ),
    "burst documents": Family(
        "pacing/<region>/burst.json",
        "pacing/us-central1/burst.json",
        ("burst.json",),
        (Code("shared.pacing:Pacer.end_burst"), Lifecycle(timedelta(days=6))),  # backstop: a 6-day drain
    ),
}


def name_pieces() -> dict[str, set[str]]:
    """Every piece of an object name the code holds, with the files holding it."""
    found: dict[str, set[str]] = {}
    for source in SOURCES:
        for path in sorted((REPO_ROOT / source).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.JoinedStr):
                    texts = [v.value for v in node.values if isinstance(v, ast.Constant)]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    texts = [node.value]
                else:
                    continue
                for text in texts:
                    if isinstance(text, str) and NAME_PIECE.match(text):
                        found.setdefault(text, set()).add(str(path.relative_to(REPO_ROOT)))
    return found


def test_every_name_the_code_writes_belongs_to_a_family_with_a_retention() -> None:
    claimed = {piece for family in FAMILIES.values() for piece in family.pieces}
    unknown = {
        piece: sorted(files) for piece, files in name_pieces().items() if piece not in claimed | NOT_STATE.keys()
    }
    assert not unknown, (
        f"object names built from {unknown} have no retention: add their family to FAMILIES with the "
        "code that removes it, a lifecycle rule (terraform/storage.tf) or why its names are a fixed set, "
        "and a row in docs/ARCHITECTURE.md 'What the state bucket keeps'"
    )


def test_every_family_the_walk_names_is_still_written() -> None:
    pieces = name_pieces()
    stale = {name: family.pieces for name, family in FAMILIES.items() if not any(p in pieces for p in family.pieces)}
    assert not stale


@pytest.mark.parametrize("name", [n for n, f in FAMILIES.items() if any(isinstance(r, Code) for r in f.retentions)])
def test_the_code_that_removes_a_family_exists(name: str) -> None:
    for retention in FAMILIES[name].retentions:
        if isinstance(retention, Code):
            module, _, attribute = retention.remover.partition(":")
            target: object = importlib.import_module(module)
            for part in attribute.split("."):
                target = getattr(target, part)
            assert callable(target), retention.remover


@pytest.mark.parametrize(
    "name", [n for n, f in FAMILIES.items() if any(isinstance(r, Lifecycle) for r in f.retentions)]
)
def test_a_lifecycle_rule_deletes_a_family_only_once_it_is_not_needed(name: str) -> None:
    family = FAMILIES[name]
    (rule,) = [r for r in family.retentions if isinstance(r, Lifecycle)]
    written = datetime(2026, 12, 1, tzinfo=UTC)
    # A Custom-Time family: the time set may be later than the write (a window scheduled ahead).
    custom_time = written + timedelta(days=60) if rule.by_custom_time else None
    since = custom_time or written

    def deleted(now: datetime) -> bool:
        return deleted_by_lifecycle(family.example, created=written, custom_time=custom_time, now=now)

    assert not deleted(since + rule.needed), f"{name}: a lifecycle rule deletes it while still needed"
    assert deleted(since + rule.needed + timedelta(days=2)), f"{name}: no lifecycle rule deletes it"


def test_trigger_windows_are_kept_as_long_as_dedupe_windows() -> None:
    # Both are named by a message's first publish time, which a redelivery or a redrive carries.
    assert TRIGGER_WINDOW_RETENTION_SECONDS >= HORIZON_SECONDS


def test_the_docs_table_names_every_family() -> None:
    text = (REPO_ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split("## What the state bucket keeps", 1)[1].split("\n## ", 1)[0]
    missing = [name for name, family in FAMILIES.items() if f"`{family.doc}`" not in section]
    assert not missing, f"docs/ARCHITECTURE.md 'What the state bucket keeps' has no row for {missing}"


def test_a_noncurrent_generation_is_deleted_too() -> None:
    # Versioning keeps what a write or a delete supersedes; a rule deletes it (the bucket would
    # otherwise grow with every compare-and-swap ever made).
    from tests.support.lifecycle import state_bucket_rules

    assert any(rule.condition.get("days_since_noncurrent_time") for rule in state_bucket_rules())
