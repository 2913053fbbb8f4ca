"""Progress read from an attempt's checkpoint folder: what a timeout without a counted
`checkpoint_committed` asks before it fails its request (shared.deciding.continuations).

The kit's lines reach on_job_event through Cloud Logging and Pub/Sub: at least once, in any
order, and as late as a backlog holds them, so `kit_lines_settle_seconds` after a job's end is
no proof that its commits were all heard (seed 251: a request failed without progress 357 s
after its job's end, past the 300 s settle, and its commit was counted 13 s later). The folder
the next attempt resumes from is the ground truth the kit itself reads, so a timeout about to
fail looks at it first:

- the kit ran in the attempt: at every start it writes a run object
  (`_spotjobs_runs/attempt-<n>-run-<k>.json`, spotjobs_kit.run) naming the step it resumed from;
  the attempt's first run of its own job (the lowest `k` whose `job_id` is the attempt's job) says
  where the attempt began;
- a complete checkpoint (the kit's layout rules, `layout.discover`) of a later step is progress,
  the kit's own meaning of `checkpoint_committed`.

Without a run object of the attempt (a trainer without the kit), nothing found here is progress:
progress stays the kit's word, told through its lines or its run objects.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from spotjobs_kit.layout import CHECKPOINTS_FOLDER, Checkpoint, ListingStore, discover, newest_complete
from spotjobs_kit.run import RUNS_FOLDER

from shared.ledger.records import Attempt, RequestRecord
from shared.log import Logger
from shared.wiring import Ports

# Asked of a request and its attempt: the complete checkpoint past where the attempt began, or
# None (no progress seen, or the kit never ran in the attempt).
FolderProgress = Callable[[RequestRecord, Attempt], Checkpoint | None]

_RUN_OBJECT = re.compile(r"attempt-(\d+)-run-(\d+)\.json$")
NOTHING_RESUMED = -1  # a first run that resumed from no checkpoint: any complete one is progress


def resumed_step(store: ListingStore, attempt: int, job_id: str) -> int | None:
    """The step attempt `attempt`'s job resumed from at its first run, by the kit's run objects
    (NOTHING_RESUMED from none); None when the kit left no readable run object of that job."""
    runs = []  # names relative to the checkpoints folder, as the store lists them
    for listed in store.list_folder(RUNS_FOLDER).files:
        match = _RUN_OBJECT.search(listed.name)
        if match and int(match.group(1)) == attempt:
            runs.append((int(match.group(2)), listed.name))
    for _, name in sorted(runs):
        body = _json_object(store.read_text(name))
        if body is None or body.get("attempt") != attempt or str(body.get("job_id")) != job_id:
            continue  # another job's start under the same attempt number, or not the kit's object
        step = body.get("resumed_step")
        if step is None:
            return NOTHING_RESUMED
        if isinstance(step, int) and not isinstance(step, bool):
            return step
    return None


def progress_in_folder(store: ListingStore, attempt: int, job_id: str, markers: Sequence[str]) -> Checkpoint | None:
    """The newest complete checkpoint of the folder when it is newer than where the attempt's job
    began (the kit ran in it), else None."""
    began = resumed_step(store, attempt, job_id)
    if began is None:
        return None
    newest = newest_complete(discover(store, "", markers).checkpoints)
    return newest if newest is not None and newest.step > began else None


def folder_progress(ports: Ports, log: Logger) -> FolderProgress:
    """`progress_in_folder` over the request's checkpoint folder in Cloud Storage (the folder its
    jobs get as AIP_CHECKPOINT_DIR); nothing is read until a decision asks. A folder this function
    may not read (a deployment whose grants predate the read: terraform/iam.tf) tells nothing, with
    a WARNING, so the timeout is decided on the kit's lines alone rather than never."""

    def look(record: RequestRecord, attempt: Attempt) -> Checkpoint | None:
        if ports.storage is None or not attempt.job:
            return None
        from google.api_core.exceptions import Forbidden
        from spotjobs_kit.storage import GcsStore

        store = GcsStore(record.output_dir.rstrip("/") + "/" + CHECKPOINTS_FOLDER, client=ports.storage())
        job_id = attempt.job.rsplit("/", 1)[-1]
        try:
            return progress_in_folder(store, attempt.n, job_id, ports.settings.commit_markers)
        except Forbidden as refused:
            log.warning(
                f"may not read the checkpoint folder of {record.request_id}; its timeout is decided on the kit's "
                f"lines alone: {refused}",
                event="checkpoint_folder_refused",
                request_id=record.request_id,
                attempt=attempt.n,
                folder=store.uri,
            )
            return None

    return look


def _json_object(text: str | None) -> dict[str, object] | None:
    try:
        body = json.loads(text) if text else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
