"""Submit's look before claiming a first attempt whose request has no record: a replay of a lost
record creates nothing (`replayed_without_a_record`), and a deleted record's job still live
(`DeletedRecordsJobLive`, seed 10182) is cancelled at once while the message waits, redelivered,
until it has ended.

Split from shared/submit.py; not in shared/redeliveries.py, since the cancel is
shared/found_jobs.py's, which imports redeliveries.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from shared.delivery import Message
from shared.found_jobs import cancel_deleted_records_jobs
from shared.job_locations import sweep_locations
from shared.log import Logger
from shared.redeliveries import DeletedRecordsJobLive, replayed_without_a_record
from shared.wiring import Ports


def look_before_claiming(message: Message, envelope: dict[str, Any], log: Logger, ports: Ports) -> bool:
    """True when the message replays a request whose record was lost (nothing to claim). Looks in
    every location the stray sweep lists; raises `DeletedRecordsJobLive` (redelivered) while a
    deleted record's job lives."""
    try:
        return replayed_without_a_record(message, envelope, log, ports, where=partial(sweep_locations, ports))
    except DeletedRecordsJobLive as waiting:
        # A fresh message of the id looks only while the id's marker is there: renewed, it
        # outlives the deleted claim's by a grace from this wait (seed 3609).
        ports.ledger.mark_active(waiting.request_id)
        cancel_deleted_records_jobs(ports, waiting, log)
        raise  # redelivered: claimed once they have ended
