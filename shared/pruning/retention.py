"""What to keep of one request's checkpoints, and why (pure).

The rules (settings, `keep_last` overridable per request within [1, keep_last_ceiling]):
- keep the newest `keep_last` complete checkpoints; so the newest complete one always survives
  while a request is active, finished within its retention, or has no ledger record (a folder
  published by hand, or from before the ledger, counts as active);
- delete an incomplete checkpoint only when it is older than the newest complete one (a newer one
  may still be being written) and nothing in it was written for `incomplete_grace_seconds`;
- a request finished (terminal status) longer than `finished_retention_seconds` ago keeps only
  its final complete checkpoint, or none when `keep_final_checkpoint` is false; with
  `keep_final_checkpoint` and no complete checkpoint at all, it keeps its newest checkpoint,
  complete or not (unknown completeness is never "nothing to keep": the newest is likely the
  only copy of the work, written by a framework whose evidence the layout rules cannot read),
  and the newest stem of a checkpoint saved as several plain files stays beside the final
  complete one (whether its last file was written, the listing cannot tell);
- children with no step number, and files without a checkpoint extension (metrics, logs, JSON),
  are never deleted (the layout rules, spotjobs_kit.layout, never offer them),
  and nothing outside the request's `checkpoints/` folder is ever deleted (shared.pruning.folders).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from spotjobs_kit.layout import Checkpoint, Evidence, Kind, sorted_checkpoints

from shared.clock import parse_iso
from shared.ledger.records import RequestRecord
from shared.ledger.states import TERMINAL_STATUSES

if TYPE_CHECKING:
    from shared.settings import Settings


class Lifecycle:
    ACTIVE = "active"
    FINISHED = "finished"  # terminal, within the retention period: the normal policy applies
    RETENTION_EXPIRED = "retention_expired"  # terminal for longer: only the final checkpoint stays
    UNTRACKED = "untracked"  # no ledger record: treated as active


@dataclass(frozen=True)
class PrunePolicy:
    keep_last: int
    keep_last_ceiling: int
    incomplete_grace_seconds: float
    finished_retention_seconds: float
    keep_final_checkpoint: bool
    commit_markers: tuple[str, ...]

    @classmethod
    def from_settings(cls, settings: Settings) -> PrunePolicy:
        return cls(
            keep_last=settings.keep_last,
            keep_last_ceiling=settings.keep_last_ceiling,
            incomplete_grace_seconds=settings.incomplete_grace_seconds,
            finished_retention_seconds=settings.finished_retention_seconds,
            keep_final_checkpoint=settings.keep_final_checkpoint,
            commit_markers=settings.commit_markers,
        )

    def keep_last_for(self, record: RequestRecord | None) -> int:
        """The request's `checkpoints.keep_last` override, bounded to [1, ceiling]."""
        wanted: Any = self.keep_last
        if record is not None:
            overrides = record.request.get("checkpoints")
            if isinstance(overrides, dict) and overrides.get("keep_last") is not None:
                wanted = overrides["keep_last"]
        if isinstance(wanted, bool) or not isinstance(wanted, int):
            wanted = self.keep_last
        return max(1, min(wanted, max(1, self.keep_last_ceiling)))

    def lifecycle_of(self, record: RequestRecord | None, now: datetime) -> str:
        if record is None:
            return Lifecycle.UNTRACKED
        if record.status not in TERMINAL_STATUSES:
            return Lifecycle.ACTIVE
        if record.finished_at is None:
            return Lifecycle.FINISHED  # no end time to measure the retention from: be generous
        age = (now - parse_iso(record.finished_at)).total_seconds()
        if age > self.finished_retention_seconds:
            return Lifecycle.RETENTION_EXPIRED
        return Lifecycle.FINISHED


NEWEST_KEPT_WITHOUT_COMPLETE = (
    "request past its retention with no checkpoint known complete: its newest checkpoint is kept, "
    "complete or not, as the final one"
)

NEWEST_STEM_KEPT = (
    "request past its retention: the newest checkpoint saved as several files is kept beside the "
    "final complete one (whether its last file was written cannot be told)"
)


@dataclass(frozen=True)
class PruneVerdict:
    """Whether one checkpoint goes, and the reason the plan shows for it."""

    checkpoint: Checkpoint
    delete: bool
    reason: str


def _older(candidate: Checkpoint, than: Checkpoint) -> bool:
    if candidate.step != than.step:
        return candidate.step < than.step
    if candidate.updated is None or than.updated is None:
        return False  # same step, unknown age: not provably older
    return candidate.updated < than.updated


def contents_needed(checkpoints: Sequence[Checkpoint], lifecycle: str) -> list[Checkpoint]:
    """Incomplete prefix checkpoints whose last write decides their fate, so must be listed."""
    complete = [c for c in checkpoints if c.complete]
    newest = max(complete, key=Checkpoint.sort_key, default=None)
    return [
        c
        for c in checkpoints
        if c.kind == Kind.PREFIX
        and not c.complete
        and c.contents is None
        and (lifecycle == Lifecycle.RETENTION_EXPIRED or (newest is not None and c.step <= newest.step))
    ]


def judge_checkpoints(
    checkpoints: Sequence[Checkpoint],
    *,
    lifecycle: str,
    keep_last: int,
    policy: PrunePolicy,
    now: datetime,
) -> list[PruneVerdict]:
    """Keep or delete each checkpoint of one request, with the reason, oldest first."""
    ordered = sorted_checkpoints(checkpoints)
    complete = [c for c in ordered if c.complete]
    newest = complete[-1] if complete else None
    expired = lifecycle == Lifecycle.RETENTION_EXPIRED
    if expired:
        kept_complete = complete[-1:] if policy.keep_final_checkpoint else []
    else:
        kept_complete = complete[-max(1, keep_last) :]
    kept_ids = {id(c) for c in kept_complete}
    # Past its retention with nothing known complete: the newest checkpoint stays, whatever it is;
    # so does the newest stem of a multi-file layout, whose last file the listing cannot vouch for.
    last_resort = None
    if expired and policy.keep_final_checkpoint and ordered:
        if newest is None or ordered[-1].evidence == Evidence.FILES_NEWEST:
            last_resort = ordered[-1]

    verdicts = []
    for c in ordered:
        if c.complete:
            kept = id(c) in kept_ids
            verdicts.append(_judge_complete(c, c is newest, kept, expired, keep_last))
        elif c is last_resort:
            reason = NEWEST_KEPT_WITHOUT_COMPLETE if newest is None else NEWEST_STEM_KEPT
            verdicts.append(PruneVerdict(c, False, reason))
        else:
            verdicts.append(_judge_incomplete(c, newest, expired, policy, now))
    return verdicts


def _judge_complete(c: Checkpoint, is_newest: bool, kept: bool, expired: bool, keep_last: int) -> PruneVerdict:
    if expired:
        if kept:
            return PruneVerdict(c, False, "final checkpoint of a request past its retention")
        if is_newest:
            return PruneVerdict(c, True, "request past its retention; final checkpoint not kept")
        return PruneVerdict(c, True, "request past its retention; only the final checkpoint is kept")
    if kept:
        return PruneVerdict(c, False, f"among the {keep_last} newest complete checkpoints")
    return PruneVerdict(c, True, f"complete, but {keep_last} newer complete checkpoints are kept")


def _judge_incomplete(
    c: Checkpoint, newest: Checkpoint | None, expired: bool, policy: PrunePolicy, now: datetime
) -> PruneVerdict:
    if not expired:
        if newest is None:
            return PruneVerdict(c, False, "incomplete, no complete checkpoint yet: may be in progress")
        if not _older(c, newest):
            return PruneVerdict(c, False, "incomplete, newer than the newest complete: in progress?")
    updated = c.updated
    if updated is None:
        return PruneVerdict(c, False, "incomplete, last write unknown")
    idle = (now - updated).total_seconds()
    if idle < policy.incomplete_grace_seconds:
        return PruneVerdict(c, False, "incomplete, written within the grace period")
    if expired:
        return PruneVerdict(c, True, "incomplete, request past its retention")
    return PruneVerdict(c, True, "incomplete, older than the newest complete, idle past grace period")
