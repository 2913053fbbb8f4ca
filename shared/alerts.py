"""Ops alerts: one JSON schema for everything published to the ops-alerts topic, and the catalogue
of their kinds (`AlertKind`: each kind's severity and one-line meaning; the alert table of
docs/operations.md is checked against it by tests/unit/test_alerts.py).

    {"kind": an AlertKind value,
     "severity": "INFO" | "WARNING" | "ERROR",
     "request_id": str | null, "attempt": int | null, "job": str | null,
     "message": str,            # one human sentence
     "details": {...},          # kind-specific, JSON
     "time": RFC 3339 UTC}

Message attributes repeat `kind`, `severity` and `request_id` so subscribers can filter.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from shared.clock import now_iso

ALERT_SCHEMA_VERSION = 1


class AlertKind(enum.StrEnum):
    """Every kind of ops alert, with its severity and what it means (one line each)."""

    severity: str
    meaning: str

    def __new__(cls, value: str, severity: str, meaning: str) -> AlertKind:
        member = str.__new__(cls, value)
        member._value_ = value
        member.severity = severity
        member.meaning = meaning
        return member

    INVALID_REQUEST = (
        "invalid_request",
        "ERROR",
        "a request was rejected (malformed, or refused by the deployment's policy): nothing was created",
    )
    SUBMIT_FAILED = (
        "submit_failed",
        "ERROR",
        "Vertex AI refused the create for good (a verdict on the job), or the deployment's policy refused the job built for an attempt: the request failed",
    )
    PREEMPTION_STORM = (
        "preemption_storm",
        "WARNING",
        "an attempt was preempted `SPOTJOBS_PREEMPTION_STORM_THRESHOLD` times or more",
    )
    ATTEMPTS_EXHAUSTED = (
        "attempts_exhausted",
        "ERROR",
        "the last attempt (`max_attempts`) ended by preemption or stockout: the request gave up",
    )
    JOB_FAILED = (
        "job_failed",
        "ERROR",
        "the job failed for another reason, expired, or was deleted at Vertex (not found): the request failed, nothing re-queued",
    )
    TIMEOUT_WITHOUT_PROGRESS = (
        "timeout_without_progress",
        "ERROR",
        "an attempt ran into its job's `scheduling.timeout` without committing a checkpoint: not continued, the request failed (docs/requests.md)",
    )
    INCOMPLETE_SUCCESS = (
        "incomplete_success",
        "WARNING",
        "Vertex said SUCCEEDED but the kit saw the last run preempted and unfinished: re-queued (docs/signals.md)",
    )
    JOB_STUCK = (
        "job_stuck",
        "WARNING",
        "a job waited (queued then pending in a row: one wait, from its create or its last run's end), stayed "
        "cancelling, updating or paused (from that state's start), or had not ended after a deadline switch's "
        "cancel, longer than `SPOTJOBS_STUCK_AFTER_SECONDS`",
    )
    PRUNE_REPORT = (
        "prune_report",
        "INFO",
        "what a prune pass deleted (WARNING when a delete failed, ERROR when one failed for good); at least"
        " once: what a pass deleted and could not report comes in a later pass's report (`unreported_earlier`, 50 requests a report: the rest in the passes after)",
    )
    TRIGGER_FAILED = (
        "trigger_failed",
        "ERROR",
        "a trigger's window whose request cannot render, fails validation or cannot be published (once per window)",
    )
    TRIGGER_CORRUPT = (
        "trigger_corrupt",
        "ERROR",
        "a trigger's state document cannot be read (hand-edited, another version's layout): none of its windows is"
        " decided until it is repaired; once per version of the document",
    )
    DEADLINE_AT_RISK = (
        "deadline_at_risk",
        "WARNING",
        "a request's slack to its deadline fell below one changeover (docs/deadlines.md); once per request",
    )
    DEADLINE_MISSED = "deadline_missed", "ERROR", "a request's deadline passed before it finished; once per request"
    BUDGET_REACHED = (
        "budget_reached",
        "WARNING",
        "a request's spend reached its `max_cost_usd`: its job is cancelled and nothing re-queued (up to one reconcile"
        " interval late, docs/requests.md; `details.stopped` false when it had ended or a cancel asked before was"
        " under way); once per request",
    )
    BUDGET_UNPRICED = (
        "budget_unpriced",
        "ERROR",
        "a request with a `max_cost_usd` runs on a machine type or region the deployed price table does not price (a"
        " table redeployed without its row): its spend is unknown, so its job is cancelled and nothing re-queued"
        " (`details.stopped` false when it had ended or a cancel was under way); once per request",
    )
    STRAY_JOB = (
        "stray_job",
        "WARNING",
        "a job with a request's labels that the ledger does not record was cancelled (none for a request a"
        " person cancelled, by `spotjobs cancel` or its job's cancel at Vertex: that cancel asked its late"
        " jobs to stop; one its budget stopped is alerted, since `budget_reached` names only the job its"
        " attempt records)",
    )
    STRAY_SWEEP_REFUSED = (
        "stray_sweep_refused",
        "ERROR",
        "Vertex AI refused the stray sweep's listing of a location for good (a permission, a location it does not "
        "know): a job there that the ledger does not record runs uncancelled; once per location and error kind. Or "
        "it refused a stray's cancel for good (a permission): that job runs uncancelled; once per job",
    )
    STRAY_SWEEP_CUT_SHORT = (
        "stray_sweep_cut_short",
        "WARNING",
        "reconcile's stray sweep (or its restart of the quota lines) was cut short three passes in a row by the pass's "
        "CRUD budget, its call window or a stalled location: strays it could not list, check or cancel run "
        "uncancelled; once per run of such passes",
    )
    LOCATION_UNANSWERING = (
        "location_unanswering",
        "WARNING",
        "a location's Vertex AI API answered none of reconcile's calls three passes in a row (each ran out its "
        "timeout or met a 503): its requests can be neither read nor cancelled, and wait; once per run of such passes",
    )
    CLAIM_STALLED = (
        "claim_stalled",
        "ERROR",
        "an attempt has no job after `SPOTJOBS_MAX_CLAIM_REPUBLISHES` re-publishes (Vertex busy, or submit never "
        "asked); it keeps being retried",
    )
    QUOTA_LIMITED = (
        "quota_limited",
        "WARNING",
        "a burst waits for Vertex AI's submission quota (how many, the expected drain time): created in turn, "
        "never failed for it; once per burst",
    )
    LOOKUP_FAILED = (
        "lookup_failed",
        "ERROR",
        "the job of a stale claim (looked up by reconcile, or by submit_job taking the claim over), or of a recorded attempt,"
        " cannot be looked up (a permission, a region); it is looked up again, the request kept",
    )
    REQUEST_ID_CONFLICT = (
        "request_id_conflict",
        "WARNING",
        "the same request id was published with another body: the first is kept, nothing created for the second",
    )
    LEDGER_MISSING = (
        "ledger_missing",
        "ERROR",
        "a replayed request has jobs but no ledger document: nothing was created (once per message)",
    )
    NOTIFY_REFUSED = (
        "notify_refused",
        "WARNING",
        "a request's notification topic refused for good (not found, permission denied, or no longer allowed by the "
        "policy): its pending notifications were dropped and no more are sent; once per request",
    )
    LEDGER_CORRUPT = (
        "ledger_corrupt",
        "ERROR",
        "a request's ledger document cannot be read: nothing is decided on it until it is repaired",
    )


@dataclass(frozen=True)
class Alert:
    kind: str
    severity: str
    message: str
    request_id: str | None = None
    attempt: int | None = None
    job: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    time: str = field(default_factory=now_iso)
    schema_version: int = ALERT_SCHEMA_VERSION

    @classmethod
    def of(cls, kind: AlertKind, message: str, *, severity: str | None = None, **fields: Any) -> Alert:
        """An alert of `kind` at the catalogue's severity (a kind whose meaning names others may
        pass one of them)."""
        return cls(kind=kind.value, severity=severity or kind.severity, message=message, **fields)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def attributes(self) -> dict[str, str]:
        """Message attributes, for subscribers' filters."""
        attributes = {"kind": self.kind, "severity": self.severity}
        if self.request_id:
            attributes["request_id"] = self.request_id
        return attributes
