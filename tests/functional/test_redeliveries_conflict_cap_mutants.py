"""shared/redeliveries.py at an edge its mutants found: under a taken request id, five other bodies
are alerted, each once, and a sixth is only logged (docs/security.md, "Limits": 5)."""

from __future__ import annotations

from shared.ledger.store import LedgerStore
from shared.redeliveries import record_conflict
from tests.support.decisions import CapturedLog, FakePublisher, FakeVertex, World, make_settings


def test_five_other_bodies_under_a_taken_id_are_alerted_and_a_sixth_only_logged(gcs_bucket) -> None:
    world = World(LedgerStore(gcs_bucket), FakeVertex(), FakePublisher(), make_settings(gcs_bucket.name))
    record, _ = world.submitted()
    log = CapturedLog()

    decided = [
        record_conflict(world.ledger.get("req-1"), {**record.request, "priority": n}, world.ports, log.logger).wrote
        for n in range(1, 7)
    ]

    assert decided == [True] * 5 + [False]
    assert world.ledger.get("req-1").count_marks("request_id_conflict:") == 5
    assert [line["alerted_bodies"] for line in log.events("request_id_conflict_not_alerted")] == [5]
