"""shared/deciding/deadline_watch.py at an edge its mutants found: with every step committed, a
read at Vertex that finds the job not ended at the very moment of the deadline says it is missed,
as `_alert` names any moment from the deadline on (seed 4568's rule, at its boundary)."""

from __future__ import annotations

from shared.clock import iso, parse_iso
from shared.deciding.decisions import Observation, decide
from shared.jobs import JobState
from tests.support.decide import DEADLINE, DEADLINE_POLICY, DEADLINE_STEPS, job, running_toward_deadline


def test_a_job_not_ended_at_the_deadline_itself_with_all_its_work_committed_missed_it() -> None:
    record = running_toward_deadline(DEADLINE_STEPS)

    decision = decide(record, Observation(1, job(JobState.RUNNING)), DEADLINE_POLICY, parse_iso(iso(DEADLINE)))

    assert [alert.kind for alert in decision.effects.alerts] == ["deadline_missed"]
