"""What reads of a job's state say of its attempt: whether a read is newer than what the record
holds (`is_fresh`; a settled attempt's job not ended, for its waits alone: `takes_wait_read`), the state it is in and since when (`take_read`), when the wait it is in began
(a stuck wait is timed from there: `shared.deciding.stuck`, the deadline rule) and how much of a
Spot restart's wait for a machine reads vouch for (no run time: `Attempt.rewaited_seconds`, left
out of the bill)."""

from __future__ import annotations

from datetime import datetime

from shared.clock import iso, parse_iso
from shared.deciding.preemptions import WAITING_STATES
from shared.jobs import JobSnapshot, JobState
from shared.ledger.records import Attempt

# A job can sit in these for too long; RUNNING is not among them: training legitimately runs
# for days, bounded by the job's own timeout.
STUCK_STATES = frozenset({JobState.QUEUED, JobState.PENDING, JobState.CANCELLING, JobState.UPDATING, JobState.PAUSED})


def is_fresh(attempt: Attempt, job: JobSnapshot) -> bool:
    """False for a read older than what the ledger already holds (`is_newer`), and for a read of a
    settled attempt's job that is not its end: its outcome is decided, and only a read of its wait
    is taken in until then (`takes_wait_read`)."""
    if attempt.outcome is not None and not job.is_terminal:
        return False
    return is_newer(attempt, job)


def is_newer(attempt: Attempt, job: JobSnapshot) -> bool:
    """False for a read older than what the ledger already holds (concurrent deliveries may write
    in any order; a job never leaves a terminal state). In the state the record holds, a read
    updated before the newest read taken in is of an earlier span of that state (a pass listed the
    job in its first wait and reached the record after it ran and waited anew: issue 43, after seed
    7338); Vertex's updateTime only moves forward for one job, and a read of the same update is as
    fresh as the one taken in. Not compared with `state_changed_at`, which the ledger's clock stamps
    when a read said no update time."""
    if not job.update_time:
        return True
    if attempt.state == job.state:
        newest = attempt.vertex_updated_at
        return newest is None or parse_iso(job.update_time) >= parse_iso(newest)
    if attempt.state is None or not attempt.state_changed_at:
        return True
    return parse_iso(job.update_time) >= parse_iso(attempt.state_changed_at)


def takes_wait_read(attempt: Attempt, job: JobSnapshot) -> bool:
    """Whether a read not fresh is taken in for its job's waits alone (`take_wait_read`): a newer
    read, not of the end, of a settled attempt whose job its cancel has not been seen to end (a
    deadline switch, a move). Its run or its switch's CANCELLING ends a wait the record holds, and
    without it the wait ran on in the record to the job's end (issue 43, after seed 11916)."""
    return attempt.outcome is not None and attempt.ending and not job.is_terminal and is_newer(attempt, job)


def take_read(attempt: Attempt, job: JobSnapshot, now: datetime, read_at: datetime | None = None) -> None:
    """A fresh read of the attempt's job taken into the attempt: its state and since when, the
    newest update time, its first start, and its waits."""
    take_wait_read(attempt, job, now)
    if job.start_time and not attempt.started_at:
        attempt.started_at = job.start_time
    track_rewait(attempt, job, read_at)


def take_wait_read(attempt: Attempt, job: JobSnapshot, now: datetime) -> None:
    """What a read says of its job's waits taken into the attempt: its state and since when, the
    newest update time, and the wait it is in. Alone, for a settled attempt's job (`takes_wait_read`):
    not its start nor its restart waits, which the bill and the fleet read, nor a preemption, which
    a fresh read alone counts (`shared.deciding.preemptions.count_preemptions`); its end's read
    takes those in."""
    was = attempt.state
    returned = came_back(attempt, job)  # its state changed since, and back
    if attempt.state != job.state or attempt.state_changed_at is None or returned:
        attempt.state = job.state
        attempt.state_changed_at = job.update_time or iso(now)
    newest = attempt.vertex_updated_at
    if job.update_time and (newest is None or parse_iso(job.update_time) > parse_iso(newest)):
        attempt.vertex_updated_at = job.update_time
    track_wait(attempt, job, was, returned)


def track_wait(attempt: Attempt, job: JobSnapshot, was: str | None, returned: bool = False) -> None:
    """One wait is every waiting state in a row (QUEUED then PENDING is one): a job that never ran
    waits from its create, one that ran from the state that ended its RUNNING (a record written
    before `wait_began_at` is read so too). Any other stuck state (CANCELLING, UPDATING, PAUSED) is
    no wait for capacity, nor part of one: stuck from its own start (a FLEX_START job cancelled by
    hand after its long wait by design is not stuck at once: review s10). A job whose start time is
    past the wait's beginning ran since, though no read saw it RUNNING: a wait of its own. So did
    one that ran before and is seen QUEUED after PENDING: resumed (job_state.proto), a restart whose
    run no read saw, as its start time is its first run's (seed 6699); and one seen in the waiting
    state it was in, updated since (`came_back`: seed 8151)."""
    never_ran = not (job.start_time or attempt.started_at)
    restarted = returned or (not never_ran and was == JobState.PENDING and job.state == JobState.QUEUED)
    after_another_state = restarted or (was is not None and was not in WAITING_STATES)  # a run, a pause
    if job.state not in STUCK_STATES:
        attempt.wait_began_at = None
    elif job.state not in WAITING_STATES:
        attempt.wait_began_at = attempt.state_changed_at
    elif attempt.wait_began_at is None or after_another_state:  # from the other state's end
        created = job.create_time or attempt.created_at
        from_create = never_ran and bool(created) and not after_another_state
        attempt.wait_began_at = created if from_create else attempt.state_changed_at
    elif job.start_time and parse_iso(job.start_time) > parse_iso(attempt.wait_began_at):
        # The run ended at the current state's start when a read saw that change, else by Vertex's last update.
        since_change = attempt.state_changed_at and parse_iso(attempt.state_changed_at) > parse_iso(job.start_time)
        attempt.wait_began_at = attempt.state_changed_at if since_change else (job.update_time or job.start_time)


def came_back(attempt: Attempt, job: JobSnapshot) -> bool:
    """Whether `job`, read in the waiting state the record holds, left it and came back since the
    newest read taken in (asked before this read is taken in): it ran before, and Vertex updated it
    since. No method updates a CustomJob (the API has create, get, list, cancel and delete), so its
    update time moves by Vertex's own changes of its state: a run and a Spot restart no read saw,
    which the start time, its first run's, does not tell (seed 8151: PENDING again after 20 s of
    RUNNING, alerted 32 s into the new wait as 6 h long). A job that never ran has no run to hide."""
    newest = attempt.vertex_updated_at
    if not (newest and job.update_time) or job.state not in WAITING_STATES or job.state != attempt.state:
        return False
    return bool(job.start_time or attempt.started_at) and parse_iso(job.update_time) > parse_iso(newest)


def track_rewait(attempt: Attempt, job: JobSnapshot, read_at: datetime | None) -> None:
    """A wait after the job had run (QUEUED or PENDING once it started: a Spot restart waiting for
    a machine) runs no machine, and Vertex bills none. What reads vouch for of it is no run time:
    a waiting state held from its update time until at least the start of a read that found it
    (`read_at`: None vouches for nothing). What came after that read is unknown (a run no read saw
    may hide there), so a wait ends, in `Attempt.rewaited_seconds`, at the last read that saw it.
    A read of a wait older than the one the record is in (a pass begun before it, decided after)
    vouches for nothing: that wait was closed, or preceded the first run (seed 7338)."""
    since = attempt.rewait_since
    if job.state in WAITING_STATES and attempt.started_at and job.update_time:
        if since is not None and parse_iso(job.update_time) < parse_iso(since):
            return
        if since is None or parse_iso(job.update_time) != parse_iso(since):  # a new state since
            _close_rewait(attempt)
            attempt.rewait_since = attempt.rewait_seen_until = job.update_time
        seen = attempt.rewait_seen_until
        if read_at is not None and (seen is None or read_at > parse_iso(seen)):
            attempt.rewait_seen_until = iso(read_at)
        return
    _close_rewait(attempt)


def _close_rewait(attempt: Attempt) -> None:
    if attempt.rewait_since and attempt.rewait_seen_until:
        seen = (parse_iso(attempt.rewait_seen_until) - parse_iso(attempt.rewait_since)).total_seconds()
        attempt.rewaited_seconds += max(0.0, seen)
    attempt.rewait_since = attempt.rewait_seen_until = None
