"""The deadline rule's alerts at the deadline's own instant (the twelfth mutation pass): a read
taken before the deadline with work left says the deadline is at risk while it is still ahead
when decided; decided at the deadline itself, the deadline is no longer ahead to be at risk, and
the read, taken before it, cannot say it is missed (the job may have ended in time since)."""

from __future__ import annotations

from datetime import timedelta

from shared.deciding.decisions import Observation, decide
from shared.jobs import JobState
from tests.support.decide import DEADLINE, DEADLINE_STEPS, POLICY, job, running_toward_deadline


def kinds_decided_at(now) -> list[str]:
    record = running_toward_deadline(DEADLINE_STEPS // 2)  # half the work left
    read_before = Observation(1, job(JobState.RUNNING), read_at=DEADLINE - timedelta(seconds=60))
    return [alert.kind for alert in decide(record, read_before, POLICY, now).effects.alerts]


def test_a_read_before_the_deadline_decided_at_its_instant_says_neither_at_risk_nor_missed() -> None:
    assert kinds_decided_at(DEADLINE - timedelta(seconds=1)) == ["deadline_at_risk"]
    assert kinds_decided_at(DEADLINE) == []
