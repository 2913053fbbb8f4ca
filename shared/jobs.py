"""A Vertex AI CustomJob as spotjobs reads it: plain data and names, no client and no I/O.

The job states and how they classify, the snapshot a decision reads (`JobSnapshot`), the labels
and environment variables every spotjobs job carries, and the FLEX_START defaults. The requests,
deciding and ledger rooms import this, never the adapter (`shared.adapters.vertex`), which builds
and sends jobs with these names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from spotjobs_kit.lines import KEY_ENV as KIT_KEY_ENV

from shared.clock import iso, parse_rfc3339

if TYPE_CHECKING:
    from google.cloud.aiplatform_v1 import CustomJob

LABEL_REQUEST_ID = "spotjobs-request-id"
LABEL_ATTEMPT = "spotjobs-attempt"
# Which spotjobs deployment created the job: two deployments in one project (staging and prod,
# two teams) never look up, adopt or cancel each other's jobs.
LABEL_DEPLOYMENT = "spotjobs-deployment"
SYSTEM_LABELS = (LABEL_REQUEST_ID, LABEL_ATTEMPT, LABEL_DEPLOYMENT)
FLEX_START = "FLEX_START"
# How far Vertex's clock (a job's createTime) may lag ours (a record's created_at): a job created
# this long before its record is still taken for the record's (`created_before`).
CREATE_CLOCK_SKEW_SECONDS = 1.0
# How long a FLEX_START job waits for capacity when its request says nothing: Vertex's own default
# ("maxWaitDuration ... defaults to 1 day", Scheduling in
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec#scheduling), made
# explicit so the stuck-job threshold can be sized to it.
DEFAULT_FLEX_START_MAX_WAIT_SECONDS = 86400
# Set in every container of the job, for the trainer (and the trainer kit) to know its attempt.
ENV_REQUEST_ID = "SPOTJOBS_REQUEST_ID"
ENV_ATTEMPT = "SPOTJOBS_ATTEMPT"
# The attempt's own key, in its containers only: the kit signs its lines with it (docs/security.md).
ENV_KIT_KEY = KIT_KEY_ENV
RESERVED_LABEL_PREFIX = "spotjobs-"
# The prefixes of the request ids spotjobs derives: a bare body's (`content_request_id`) and a
# trigger window's (shared/triggers/render.py). Reserved: a publisher naming its request with one
# could claim the id a trigger or a bare body will get first (shared/redeliveries.py refuses
# them), and no training class may own one (Settings).
DERIVED_ID_PREFIX = "req-"
TRIGGER_ID_PREFIX = "trg-"
RESERVED_ID_PREFIXES = (DERIVED_ID_PREFIX, TRIGGER_ID_PREFIX)
MAX_LABELS = 64
# Vertex restarts a preempted Spot job at most six times, then fails it with a STOCKOUT error
# (docs/signals.md, "What Vertex documents"): a job has runs 0..6, so at most seven preemptions.
# What a job says of its own runs is bounded by it (docs/security.md, "Limits").
MAX_SPOT_RESTARTS = 6
MAX_SPOT_PREEMPTIONS = MAX_SPOT_RESTARTS + 1


def job_replicas(custom_job: Mapping[str, Any]) -> int:
    """The replicas of a CustomJob over every worker pool, each a VM of its own (at least 1); an
    empty pool is the API's placeholder, no replica."""
    pools = (custom_job.get("jobSpec") or {}).get("workerPoolSpecs") or []
    # A plain loop: asked about ten times per event (placement, the fleet's facts, preemption
    # bounds), where a generator under sum() costs three times as much.
    total = 0
    for pool in pools:
        if pool:
            replicas = int(pool.get("replicaCount") or 0)
            total += replicas if replicas > 1 else 1
    return total if total > 1 else 1


class JobState:
    """JobState names as the REST API spells them, and how they classify."""

    UNSPECIFIED = "JOB_STATE_UNSPECIFIED"
    QUEUED = "JOB_STATE_QUEUED"
    PENDING = "JOB_STATE_PENDING"
    RUNNING = "JOB_STATE_RUNNING"
    SUCCEEDED = "JOB_STATE_SUCCEEDED"
    FAILED = "JOB_STATE_FAILED"
    CANCELLING = "JOB_STATE_CANCELLING"
    CANCELLED = "JOB_STATE_CANCELLED"
    PAUSED = "JOB_STATE_PAUSED"
    EXPIRED = "JOB_STATE_EXPIRED"
    UPDATING = "JOB_STATE_UPDATING"
    PARTIALLY_SUCCEEDED = "JOB_STATE_PARTIALLY_SUCCEEDED"

    BY_NUMBER = {
        0: UNSPECIFIED,
        1: QUEUED,
        2: PENDING,
        3: RUNNING,
        4: SUCCEEDED,
        5: FAILED,
        6: CANCELLING,
        7: CANCELLED,
        8: PAUSED,
        9: EXPIRED,
        10: UPDATING,
        11: PARTIALLY_SUCCEEDED,
    }
    TERMINAL = frozenset({SUCCEEDED, FAILED, CANCELLED, EXPIRED, PARTIALLY_SUCCEEDED})


def state_name(state: object) -> str:
    """'JOB_STATE_RUNNING' from a JobState enum member, its number, or its name."""
    if isinstance(state, str):
        return state if state.startswith("JOB_STATE_") else f"JOB_STATE_{state}"
    name = getattr(state, "name", None)  # a proto-plus enum member (an IntEnum)
    if isinstance(name, str):
        return name
    return JobState.BY_NUMBER.get(int(state), JobState.UNSPECIFIED)  # type: ignore[call-overload]


def is_terminal(state: object) -> bool:
    return state_name(state) in JobState.TERMINAL


def job_error(job: CustomJob) -> dict[str, Any] | None:
    """The job's google.rpc.Status as {code, message}, or None when it has none."""
    if not job.error or (not job.error.code and not job.error.message):
        return None
    return {"code": int(job.error.code), "message": str(job.error.message)}


def _vertex_time(moment: datetime | None) -> str | None:
    # Microseconds, unlike the ledger's own times: freshness compares a job's update times,
    # which can be less than a millisecond apart.
    return None if moment is None else iso(moment, timespec="microseconds")


@dataclass(frozen=True)
class JobSnapshot:
    """A CustomJob as Vertex returned it, reduced to what decisions read."""

    name: str
    state: str
    error: dict[str, Any] | None = None
    create_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    update_time: str | None = None

    @classmethod
    def of(cls, job: CustomJob) -> JobSnapshot:
        raw = _raw_message(job)
        if raw is not None:
            return cls._of_raw(job, raw)
        return cls(
            name=job.name,
            state=state_name(job.state),
            error=job_error(job),
            create_time=_vertex_time(job.create_time),
            start_time=_vertex_time(job.start_time),
            end_time=_vertex_time(job.end_time),
            update_time=_vertex_time(job.update_time),
        )

    @classmethod
    def _of_raw(cls, job: CustomJob, raw: Any) -> JobSnapshot:
        """`of`, reading the protobuf under a proto-plus CustomJob: each proto-plus field read
        converts through its marshal, which cost most of a reconcile's read of a job. The values
        are the marshal's own (a state's name, a timestamp's `DatetimeWithNanoseconds`)."""
        state = _STATE_NAMES.get(raw.state)
        if state is None:
            state = _STATE_NAMES[raw.state] = state_name(job.state)
        error = raw.error
        return cls(
            name=raw.name,
            state=state,
            error=None
            if not error.code and not error.message
            else {"code": int(error.code), "message": str(error.message)},
            create_time=_raw_time(raw, "create_time"),
            start_time=_raw_time(raw, "start_time"),
            end_time=_raw_time(raw, "end_time"),
            update_time=_raw_time(raw, "update_time"),
        )

    @property
    def is_terminal(self) -> bool:
        return self.state in JobState.TERMINAL


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A job state's number -> `state_name` of it, as the proto-plus enum names it (learnt per number).
_STATE_NAMES: dict[int, str] = {}
# A timestamp's (seconds, nanos) -> `_raw_time`'s text of it: reconcile and on_job_event read the
# same jobs' times again and again, and the datetime arithmetic was most of a snapshot's cost.
_TIME_TEXTS: dict[tuple[int, int], str] = {}
_TIME_TEXTS_KEPT = 4096


def _raw_message(job: object) -> Any:
    """The protobuf message under a proto-plus CustomJob; None for anything else (a test's fake)."""
    import proto

    return type(job).pb(job) if isinstance(job, proto.Message) else None


def _raw_time(raw: Any, name: str) -> str | None:
    """What `_vertex_time` makes of the proto-plus field `name`; None when absent. The marshal's
    datetime (`DatetimeWithNanoseconds.from_timestamp_pb`), step by step: the second its seconds
    make as a float of microseconds, then the nanoseconds cut to microseconds, in UTC."""
    if not raw.HasField(name):
        return None
    stamp = getattr(raw, name)
    key = (stamp.seconds, stamp.nanos)
    text = _TIME_TEXTS.get(key)
    if text is None:
        second = _EPOCH + timedelta(microseconds=int(stamp.seconds * 1e6))
        text = _vertex_time(second.replace(microsecond=stamp.nanos // 1000))
        if len(_TIME_TEXTS) >= _TIME_TEXTS_KEPT:
            _TIME_TEXTS.clear()
        _TIME_TEXTS[key] = text
    return text


def max_wait_seconds(custom_job: Mapping[str, Any]) -> float:
    """How long a FLEX_START job of this request may wait for capacity (its maxWaitDuration)."""
    scheduling = (custom_job.get("jobSpec") or {}).get("scheduling") or {}
    raw = scheduling.get("maxWaitDuration") or scheduling.get("max_wait_duration")
    try:
        return float(str(raw).rstrip("s")) if raw else DEFAULT_FLEX_START_MAX_WAIT_SECONDS
    except ValueError:
        return DEFAULT_FLEX_START_MAX_WAIT_SECONDS


def create_seconds(job: CustomJob) -> float:
    """When Vertex created `job`, in epoch seconds (0 when it does not say)."""
    created = job.create_time
    return created.timestamp() if created else 0.0


def kit_key_of(job: CustomJob) -> str | None:
    """The kit key `job` was created with (`ENV_KIT_KEY` in its containers' environment), or None:
    a job created before the keys, or a listing that leaves the job's spec out."""
    for pool in job.job_spec.worker_pool_specs:
        for variable in [*pool.container_spec.env, *pool.python_package_spec.env]:
            if variable.name == ENV_KIT_KEY:
                return str(variable.value)
    return None


def of_another_claim(job: CustomJob, since: str, kit_key: str | None) -> bool:
    """Whether `job`, labelled for an attempt whose record was written at `since` and whose claim
    drew `kit_key`, was created for another claim of the id: an earlier record's, which a person
    deleted (`find_attempt_job`, `adopt_job`, on_job_event's adoption, `is_stray`). The kit key
    tells when both have one (drawn at the claim, kept by every create of it), whatever the clocks
    say: even a create that was out when that record was deleted and landed after this one was
    written. Else (a job or record from before the keys) a create before the record does."""
    key = kit_key_of(job)
    if key is not None and kit_key is not None:
        return key != kit_key
    return created_before(job, since)


def created_before(job: CustomJob, since: str) -> bool:
    """Whether `job` was created before a record written at `since` (its `created_at`), beyond
    the clocks' skew: then it is no job of that record's (`shared.adapters.vertex.find_attempt_job`,
    on_job_event's adoption, `shared.deciding.strays.is_stray`, submit's replay guard)."""
    written = parse_rfc3339(since)
    if written is None or not job.create_time:
        return False
    return create_seconds(job) < written.timestamp() - CREATE_CLOCK_SKEW_SECONDS
