"""What to keep of one request's checkpoints (shared/pruning/retention.py, pure), at the edges the
rules name: the instant a retention or a grace period ends, a checkpoint of the same step as the
newest complete one, an age nobody listed, the `keep_last` bounds, and the reason each verdict
shows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from spotjobs_kit.layout import Checkpoint, Kind, ListedObject

from shared.ledger.states import RequestStatus
from shared.pruning.retention import (
    NEWEST_KEPT_WITHOUT_COMPLETE,
    Lifecycle,
    PruneVerdict,
    contents_needed,
    judge_checkpoints,
)
from tests.support.prune_store import HOUR, NOW, policy, record

GRACE = timedelta(seconds=policy().incomplete_grace_seconds)
RETENTION = timedelta(seconds=policy().finished_retention_seconds)


def checkpoint(step: int, *, complete: bool = True, written: timedelta | None = 2 * HOUR) -> Checkpoint:
    """A prefix checkpoint last written `written` ago (None: nothing of it was listed)."""
    objects = () if written is None else (ListedObject(f"x/{step}/{complete}", 1, 1, NOW - written),)
    return Checkpoint(f"step-{step:06d}/", Kind.PREFIX, step, complete, objects, None if complete else objects)


def judged(checkpoints: list[Checkpoint], lifecycle: str = Lifecycle.ACTIVE, **kwargs: object) -> list[PruneVerdict]:
    keep_last = kwargs.pop("keep_last", 2)
    return judge_checkpoints(
        checkpoints,
        lifecycle=lifecycle,
        keep_last=keep_last,  # type: ignore[arg-type]
        policy=policy(**kwargs),
        now=NOW,
    )


def verdict_of(verdicts: list[PruneVerdict], c: Checkpoint) -> PruneVerdict:
    [found] = [v for v in verdicts if v.checkpoint is c]
    return found


# The lifecycle: a retention ends only once it has fully run.


@pytest.mark.parametrize(
    ("finished_ago", "lifecycle"),
    [(RETENTION, Lifecycle.FINISHED), (RETENTION + timedelta(seconds=1), Lifecycle.RETENTION_EXPIRED)],
)
def test_a_retention_expires_only_after_its_full_length(finished_ago: timedelta, lifecycle: str) -> None:
    assert policy().lifecycle_of(record(RequestStatus.SUCCEEDED, finished_ago=finished_ago), NOW) == lifecycle


# Incomplete checkpoints: the grace period, the same step, an unknown age.


@pytest.mark.parametrize(("idle", "deleted"), [(GRACE - timedelta(seconds=1), False), (GRACE, True)])
def test_an_incomplete_checkpoint_goes_once_idle_for_the_whole_grace_period(idle: timedelta, deleted: bool) -> None:
    abandoned = checkpoint(100, complete=False, written=idle)
    verdicts = judged([abandoned, checkpoint(200)])
    assert verdict_of(verdicts, abandoned).delete is deleted


def test_an_incomplete_checkpoint_of_the_newest_complete_step_written_at_the_same_instant_stays() -> None:
    """Same step, not provably older: it may be the next save of that step under way."""
    newest = checkpoint(200, written=3 * HOUR)
    again = checkpoint(200, complete=False, written=3 * HOUR)
    verdict = verdict_of(judged([checkpoint(100), newest, again]), again)
    assert (verdict.delete, verdict.reason) == (False, "incomplete, newer than the newest complete: in progress?")


def test_an_incomplete_checkpoint_of_the_newest_complete_step_written_before_it_goes() -> None:
    newest = checkpoint(200, written=3 * HOUR)
    earlier = checkpoint(200, complete=False, written=5 * HOUR)
    assert verdict_of(judged([checkpoint(100), newest, earlier]), earlier).delete is True


@pytest.mark.parametrize("unknown", ["candidate", "newest"])
def test_a_checkpoint_of_the_same_step_and_unknown_age_is_not_older(unknown: str) -> None:
    newest = checkpoint(200, written=None if unknown == "newest" else 3 * HOUR)
    same_step = checkpoint(200, complete=False, written=None if unknown == "candidate" else 5 * HOUR)
    assert verdict_of(judged([checkpoint(100), newest, same_step]), same_step).delete is False


def test_an_old_incomplete_checkpoint_whose_last_write_is_unknown_stays() -> None:
    unlisted = checkpoint(100, complete=False, written=None)
    verdict = verdict_of(judged([unlisted, checkpoint(200)]), unlisted)
    assert (verdict.delete, verdict.reason) == (False, "incomplete, last write unknown")


def test_an_incomplete_checkpoint_of_the_newest_complete_step_is_listed_before_judging() -> None:
    same_step = Checkpoint("step-000200-retry/", Kind.PREFIX, 200, False)
    later = Checkpoint("step-000300/", Kind.PREFIX, 300, False)
    assert contents_needed([checkpoint(100), checkpoint(200), same_step, later], Lifecycle.ACTIVE) == [same_step]
    assert contents_needed([same_step, later], Lifecycle.ACTIVE) == []  # nothing complete: nothing goes


# keep_last and its bounds.


def test_the_newest_complete_checkpoint_of_an_active_request_survives_any_keep_last() -> None:
    newest = checkpoint(200)
    verdicts = judged([checkpoint(100), newest], keep_last=0)
    assert [v.checkpoint.step for v in verdicts if not v.delete] == [200]


@pytest.mark.parametrize(("ceiling", "kept"), [(1, 1), (0, 1), (-5, 1), (3, 3)])
def test_the_keep_last_ceiling_bounds_an_override_never_below_one(ceiling: int, kept: int) -> None:
    assert policy(keep_last_ceiling=ceiling).keep_last_for(record(keep_last=5)) == kept


# The reasons the plan shows.


def test_an_active_requests_verdicts_say_why() -> None:
    verdicts = judged([checkpoint(100), checkpoint(200), checkpoint(300)], keep_last=2)
    assert [(v.delete, v.reason) for v in verdicts] == [
        (True, "complete, but 2 newer complete checkpoints are kept"),
        (False, "among the 2 newest complete checkpoints"),
        (False, "among the 2 newest complete checkpoints"),
    ]


@pytest.mark.parametrize("keep_final", [True, False])
def test_an_expired_requests_verdicts_say_why(keep_final: bool) -> None:
    old = checkpoint(50, complete=False, written=10 * 24 * HOUR)
    verdicts = judged(
        [old, checkpoint(100), checkpoint(200)], Lifecycle.RETENTION_EXPIRED, keep_final_checkpoint=keep_final
    )
    final = (
        (False, "final checkpoint of a request past its retention")
        if keep_final
        else (True, "request past its retention; final checkpoint not kept")
    )
    assert [(v.delete, v.reason) for v in verdicts] == [
        (True, "incomplete, request past its retention"),
        (True, "request past its retention; only the final checkpoint is kept"),
        final,
    ]


def test_an_expired_request_with_nothing_complete_keeps_its_newest_and_says_why() -> None:
    older, newest = checkpoint(100, complete=False), checkpoint(200, complete=False)
    verdicts = judged([older, newest], Lifecycle.RETENTION_EXPIRED)
    assert [(v.delete, v.reason) for v in verdicts] == [
        (True, "incomplete, request past its retention"),
        (False, NEWEST_KEPT_WITHOUT_COMPLETE),
    ]


def test_an_incomplete_checkpoint_of_an_expired_request_still_waits_for_its_grace_period() -> None:
    recent = checkpoint(300, complete=False, written=GRACE / 2)
    verdicts = judged([checkpoint(100), checkpoint(200), recent], Lifecycle.RETENTION_EXPIRED)
    assert verdict_of(verdicts, recent).reason == "incomplete, written within the grace period"
