"""Where the dashboard reads from and how it cancels: the read paths of `spotjobs status` (the
ledger, found with spotjobs/cli/find.py, the active index for active requests), `spotjobs logs`
(Cloud Logging, or the local Vertex emulator), `spotjobs fleet` (the observations in the state
bucket), `spotjobs dead-letters` (its pull subscription, every message given back at once) and
`spotjobs cancel` (`spotjobs.cancel`).

`Deployment` holds them, so tests give the app a ledger over a fake bucket and a fake log source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shared.ledger.store import LedgerStore
    from shared.settings import Settings
    from spotjobs import CancelOutcome
    from spotjobs.deadletters import DeadLetter
    from spotjobs.trainer_logs import Source

DEAD_LETTER_SUBSCRIPTION = "dead-letter-reader"  # as `spotjobs dead-letters` (spotjobs/cli/ops.py)
# Cancel(request_id, reason, by) -> what `spotjobs.cancel` did.
Canceller = Callable[[str, str | None, str], "CancelOutcome"]


@dataclass(frozen=True)
class Deployment:
    ledger: LedgerStore
    logs: Source | None  # None: the pages say the log tail is not available
    cancel: Canceller
    operator: str  # who the cancel is recorded as: the account of the credentials, as `spotjobs cancel`
    state_bucket: str
    bucket: Any  # the state bucket itself: the fleet's observations (shared/fleet/store.py)
    settings: Settings | None = None  # the deadline view's priors (`spotjobs status`'s); None: the defaults
    # The dead letters now, each given back at once (`spotjobs dead-letters`); None: not reachable.
    dead_letters: Callable[[], list[DeadLetter]] | None = None


def deployment_of(settings: Settings, project: str | None = None) -> Deployment:
    """The deployment the CLI reaches: the settings' state bucket through Application Default
    Credentials (or the emulators the embedded stack's environment names)."""
    from google.cloud import storage

    import spotjobs
    from shared.ledger.store import LedgerStore
    from spotjobs.trainer_logs import CloudLogging, EmulatorLogs

    project = project or settings.project
    bucket = storage.Client(project=project).bucket(settings.state_bucket)
    ledger = LedgerStore(bucket)
    local = settings.vertex_endpoint.startswith("http://")
    logs: Any = EmulatorLogs(settings.vertex_endpoint) if local else CloudLogging(project)

    def cancel(request_id: str, reason: str | None, by: str) -> CancelOutcome:
        return spotjobs.cancel(request_id, reason=reason, by=by, settings=settings, ledger=ledger)

    def dead_letters() -> list[DeadLetter]:
        from google.cloud import pubsub_v1

        from spotjobs import deadletters

        subscriber = pubsub_v1.SubscriberClient()
        path = f"projects/{project}/subscriptions/{DEAD_LETTER_SUBSCRIPTION}"
        try:
            letters = deadletters.pull_all(subscriber, path)
            deadletters.release(subscriber, path, letters)
            return letters
        finally:
            subscriber.close()

    return Deployment(
        ledger, logs, cancel, spotjobs.caller_identity(), settings.state_bucket, bucket, settings, dead_letters
    )
