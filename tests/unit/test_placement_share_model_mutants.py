"""The share model for a new request (shared/fleet/placement.py, `share_of_slack`,
`SHARE_MODEL_SLACK_CHANGEOVERS`) at its edges: a job of an hour of work or less, the fleet's own
time on Spot however short, and a job that does not say it is new (issue 43: the mutants
test_placement.py left in the eleventh pass)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.fleet.estimate import CapacityEstimate
from shared.fleet.placement import Candidate, Job, Move, expected_cost, share_of_slack

CHANGEOVER = 0.25
# 24 h of work, the deadline rule's three changeovers and 10 changeovers of slack beyond them.
HOURS_TO_DEADLINE = 24 + 3 * CHANGEOVER + 10 * CHANGEOVER


def east(spot_vm_seconds: float) -> Candidate:
    """us-east4 with capacity 95% of the time and runs of 4.6 h (a burst of preemptions), after
    `spot_vm_seconds` of the fleet's own VMs on Spot there."""
    estimate = CapacityEstimate(
        location="us-east4",
        available=0.95,
        sure=3.0,
        mean_lifetime_seconds=4.6 * 3600,
        lifetime_censored=False,
        median_wait_seconds=600.0,
        changeover_p90_seconds=None,
        open_waits=0,
        share_available=0.95,
        spot_vm_seconds=spot_vm_seconds,
    )
    return Candidate("us-east4", 14.85, 82.53, estimate)


NEW = Job(24, CHANGEOVER, None, hours_to_deadline=HOURS_TO_DEADLINE, new_request=True)


def test_the_share_model_splits_a_job_of_an_hour_or_less_like_any_other() -> None:
    # Half the time with capacity: each hour waited comes with an hour on Spot, so half an hour
    # of slack pays half of an hour's work; only no work at all is all on Spot.
    assert share_of_slack(1.0, 0.5, 0.5) == (0.5, 1.0)
    assert share_of_slack(0.5, 0.8, 0.05) == (pytest.approx(0.4), 1.0)  # 0.8 x 0.05 / (0.2 x 0.5)


def test_a_second_of_the_fleets_own_time_on_spot_is_its_own_time() -> None:
    # A run preempted within its first second is still the fleet's own: the share model, whose
    # slack pays all of the work on Spot; with none, only the prior speaks and run length is weighed.
    assert expected_cost(NEW, east(spot_vm_seconds=1.0), Move()).spot_share == 1.0
    assert expected_cost(NEW, east(spot_vm_seconds=0.0), Move()).spot_share < 1.0


def test_a_job_that_does_not_say_it_is_new_is_weighed_as_a_re_queue() -> None:
    # The placer always says (shared/fleet/placing.py); a caller that does not (bench's probes)
    # gets the run-length model, as a re-queue does.
    unsaid = Job(24, CHANGEOVER, None, hours_to_deadline=HOURS_TO_DEADLINE)
    requeue = replace(NEW, new_request=False)
    own_time = east(spot_vm_seconds=13.8 * 3600)
    assert expected_cost(unsaid, own_time, Move()) == expected_cost(requeue, own_time, Move())
    assert expected_cost(unsaid, own_time, Move()).spot_share < 1.0
