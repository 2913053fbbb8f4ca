"""shared/deciding/deadline_watch.py at an edge its mutants found: with every step committed, a
read at Vertex that finds the job not ended at the very moment of the deadline says it is missed,
as `_alert` names any moment from the deadline on (seed 4568's rule, at its boundary)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from shared.clock import iso, parse_iso
from shared.deciding.decisions import Observation, decide
from shared.jobs import JobState
from shared.ledger.states import RequestStatus
from tests.support.decide import NOW, POLICY, job, make_record

STEPS, CHANGEOVER = 1000, 60.0
DEADLINE = NOW + timedelta(hours=1)


def test_a_job_not_ended_at_the_deadline_itself_with_all_its_work_committed_missed_it() -> None:
    request = {
        "deadline": iso(DEADLINE),
        "total_steps": STEPS,
        "expected_step_seconds": 1.0,
        "changeover_seconds": CHANGEOVER,
    }
    record = make_record(request=request, status=RequestStatus.RUNNING, state=JobState.RUNNING)
    record.attempts[0].started_at = iso(NOW - timedelta(seconds=CHANGEOVER + 1))
    record.attempts[0].last_checkpoint = [0, STEPS]
    policy = replace(POLICY, allowed_fallback_strategies=("STANDARD",))

    decision = decide(record, Observation(1, job(JobState.RUNNING)), policy, parse_iso(iso(DEADLINE)))

    assert [alert.kind for alert in decision.effects.alerts] == ["deadline_missed"]
