"""The plan for one request: discover its checkpoints, list the few the rules need to see inside,
and judge each. All I/O goes through the `CheckpointStore` it is given."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from spotjobs_kit.layout import Unmanaged, discover, with_contents

from shared.ledger.records import RequestRecord
from shared.pruning.checkpoints import CheckpointStore
from shared.pruning.folders import CheckpointLayout
from shared.pruning.retention import PrunePolicy, PruneVerdict, contents_needed, judge_checkpoints
from shared.pruning.snapshot import discovery_store


@dataclass(frozen=True)
class RequestPlan:
    request_id: str
    folder: str
    status: str | None
    lifecycle: str
    keep_last: int
    verdicts: tuple[PruneVerdict, ...]
    unmanaged: tuple[Unmanaged, ...]
    marker_hit: str | None = None

    @property
    def deletions(self) -> list[PruneVerdict]:
        return [v for v in self.verdicts if v.delete]


def plan_request(
    store: CheckpointStore,
    request_id: str,
    record: RequestRecord | None,
    *,
    layout: CheckpointLayout,
    policy: PrunePolicy,
    now: datetime,
    marker_hint: str | None = None,
) -> RequestPlan:
    """Discover one request's checkpoints and judge each one."""
    folder = layout.folder_for(request_id)
    lifecycle = policy.lifecycle_of(record, now)
    keep_last = policy.keep_last_for(record)
    found = discover(discovery_store(store, folder), folder, policy.commit_markers, try_first=marker_hint)
    checkpoints = list(found.checkpoints)
    for c in contents_needed(checkpoints, lifecycle):
        listed = with_contents(c, folder, store.list_all(folder + c.name), policy.commit_markers)
        checkpoints[checkpoints.index(c)] = listed
    verdicts = judge_checkpoints(checkpoints, lifecycle=lifecycle, keep_last=keep_last, policy=policy, now=now)
    return RequestPlan(
        request_id,
        folder,
        record.status if record else None,
        lifecycle,
        keep_last,
        tuple(verdicts),
        found.unmanaged,
        found.marker_hit,
    )
