"""A request's trainer output: every attempt's job, every restart, in order (`spotjobs logs`).

The job of each attempt comes from the ledger record. Two sources hold what a job printed:

- Cloud Logging (`CloudLogging`): `entries.list` over REST with the google-auth session the project
  already uses (https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list), one query
  for every job of the request, `resource.type="ml_job" AND resource.labels.job_id=("A" OR "B")`
  (https://cloud.google.com/logging/docs/view/logging-query-language), bounded below by a time
  (the request's creation, `--since`, or where `--follow` got to), oldest first, 1,000 entries a
  page (the most a page holds) so a long log costs few calls of the project's read quota (60
  entries.list calls a minute when written, https://cloud.google.com/logging/quotas; the advice:
  https://cloud.google.com/logging/docs/reference/api-overview); `--follow` every 5 s spends 12.
  A page may come back empty with a next page token: the search is not done, the loop goes on. A
  429 (the quota), a 5xx or a dropped connection waits and asks again, doubling the wait
  (`shared.swap.backoff_seconds`).
- the Vertex emulator (`EmulatorLogs`, when SPOTJOBS_VERTEX_ENDPOINT is an http:// emulator, as
  `spotjobs local up` sets it): its job details keep each job's last 1,000 worker lines with the
  worker start they came from (devstack/vertex/emulator.py). It keeps no service lines.

A line is marked with its attempt, the replica that wrote it (`workerpool<P>-<i>`: the log
entry's `task_name`, or the emulator's `replica`) and, where the kit's lines tell (every kit line
names its `run`, the restart index), its run: a line belongs to the run of the kit line before it
in the same job, and is unmarked before the job's first kit line or, locally, when a new worker
start of the primary begins. Only the primary replica prints kit lines (docs/kit.md), so the run
is the primary's: another replica's line carries the run the primary was in, and that replica
restarting alone (a reclaimed VM of a multi-replica job) starts no run.

Whose word a line is: the training account may write any log entry in the project, under any job
id (docs/security.md), so a kit line counts as the request's own (its event shown, its run a
boundary) only if it is signed with the key the ledger keeps for the attempt whose job it is logged
under, and names that request and attempt: the check on_job_event makes (shared/observe.py). Any
other kit line is shown as unsigned, with no event and no run of its own. A plain line carries no
signature: in the cloud it is what was logged under the job's id, by the job or by another writer
(nothing in a log entry tells them apart); locally the emulator keeps only the job's own output.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

from spotjobs_kit.lines import KitRecord, is_signed_with, parse_kit_line

from shared.clock import iso, parse_rfc3339, utcnow
from shared.errors import TransientError, is_retryable
from shared.swap import backoff_seconds

if TYPE_CHECKING:
    from shared.ledger.records import Attempt, RequestRecord

ENTRIES_LIST_URL = "https://logging.googleapis.com/v2/entries:list"
PAGE_SIZE = 1000  # entries.list's largest page
READ_SCOPE = "https://www.googleapis.com/auth/logging.read"
# A throttled or failing read waits 2 s, 4 s, ... at most 60 s, and gives up after 8 tries.
RETRY_BASE_SECONDS = 2.0
RETRY_CAP_SECONDS = 60.0
MAX_TRIES = 8
RETRIED_STATUSES = frozenset({429, 500, 502, 503, 504})
SERVICE_TASK = "service"
# The primary replica's name (worker pool 0, replica 0): the `task_name` of its log entries, as
# gcloud's `command_lib/ai/log_util.py` reads them (docs/signals.md).
PRIMARY_REPLICA = "workerpool0-0"


class LogsUnavailable(TransientError):
    """The log source kept refusing (its quota, or an outage): try again later."""


@dataclass(frozen=True)
class LogLine:
    attempt: int
    job_id: str
    key: str  # unique per line (Cloud Logging's insertId): what `--follow` has shown
    time: str | None  # RFC 3339
    severity: str
    text: str
    service: bool = False  # a Vertex service line ("Job is running."), not the trainer's
    claimed_kit: KitRecord | None = None  # the kit line its text parses as: anyone's claim until verified
    signed: bool = False  # `claimed_kit` is signed by its attempt (`verified`)
    worker_start: int | None = None  # the emulator's worker start (1, 2, ...) of its replica; unknown in the cloud
    run: int | None = None  # set by `RunMarker`
    replica: str | None = None  # `workerpool<P>-<i>` that wrote it; None for a service line or unknown

    @property
    def kit(self) -> KitRecord | None:
        """The kit line, only if its attempt signed it: the request's own word."""
        return self.claimed_kit if self.signed else None

    @property
    def unsigned(self) -> bool:
        """It reads as a kit line its attempt did not sign (forged, another job's, or an older kit)."""
        return self.claimed_kit is not None and not self.signed

    @property
    def event(self) -> str | None:
        return self.kit.event if self.kit else None

    def to_json(self) -> dict[str, Any]:
        return {
            "attempt": self.attempt,
            "job_id": self.job_id,
            "run": self.run,
            "replica": self.replica,
            "time": self.time,
            "severity": self.severity,
            "source": "vertex" if self.service else "trainer",
            "event": self.event,
            "signed": self.signed,
            "unsigned_event": self.claimed_kit.event if self.unsigned and self.claimed_kit else None,
            "text": self.text,
        }


def verified(line: LogLine, record: RequestRecord) -> LogLine:
    """`line`, its kit line trusted only if it names the request and the attempt whose job it is
    logged under and that attempt's key signed it (the key only its containers hold)."""
    claim = line.claimed_kit
    attempt = next((a for a in record.attempts if a.job_id == line.job_id), None)
    signed = (
        claim is not None
        and attempt is not None
        and claim.request_id == record.request_id
        and claim.attempt == attempt.n
        and is_signed_with(claim, attempt.kit_key)
    )
    return replace(line, signed=signed)


class RunMarker:
    """Marks lines, in order, with the run the kit's lines say they belong to (see the module)."""

    def __init__(self) -> None:
        self._runs: dict[str, int | None] = {}  # job -> the primary's run
        self._starts: dict[tuple[str, str | None], int | None] = {}  # (job, replica) -> its worker start

    def mark(self, line: LogLine) -> LogLine:
        if line.service:
            return line
        run = self._runs.get(line.job_id)
        start = self._starts.setdefault((line.job_id, line.replica), line.worker_start)
        if line.worker_start != start and line.replica in (None, PRIMARY_REPLICA):
            run = None  # a new start of the primary: its run is unknown until its kit line says
        self._starts[(line.job_id, line.replica)] = line.worker_start
        if line.kit is not None and line.kit.run is not None:
            run = line.kit.run
        self._runs[line.job_id] = run
        return replace(line, run=run)


def ordered(lines: Iterable[LogLine]) -> list[LogLine]:
    """Oldest first: attempt by attempt (a source gives each job's lines in time order)."""
    return sorted(lines, key=lambda line: line.attempt)


def parse_since(text: str) -> str:
    """`--since`: an RFC 3339 time, or a duration ago (`90s`, `30m`, `2h`, `1d`)."""
    match = re.fullmatch(r"(\d+)([smhd])", text.strip())
    if match:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[match.group(2)]
        return iso(utcnow() - timedelta(**{unit: int(match.group(1))}), timespec="microseconds")
    moment = parse_rfc3339(text)
    if moment is None:
        raise ValueError(f"--since {text!r}: give an RFC 3339 time or a duration such as 30m, 2h, 1d")
    return iso(moment, timespec="microseconds")


def _message_of(payload: Any) -> str:
    if isinstance(payload, dict):
        message = payload.get("message")
        return message if isinstance(message, str) else json.dumps(payload, sort_keys=True)
    return str(payload)


class CloudLogging:
    """The jobs' entries in Cloud Logging (see the module)."""

    def __init__(self, project: str, session: Any = None, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self._project = project
        self._session = session
        self._sleep = sleep

    def read(self, attempts: Sequence[Attempt], since: str | None) -> list[LogLine]:
        by_job = {a.job_id: a.n for a in attempts if a.job_id}
        if not by_job:
            return []
        jobs = " OR ".join(f'"{job_id}"' for job_id in by_job)
        query = f'resource.type="ml_job" AND resource.labels.job_id=({jobs})'
        if since:
            query += f' AND timestamp>="{since}"'
        return [self._line(entry, by_job) for entry in self._entries(query)]

    def _entries(self, query: str) -> Iterator[dict[str, Any]]:
        body: dict[str, Any] = {
            "resourceNames": [f"projects/{self._project}"],
            "filter": query,
            "orderBy": "timestamp asc",
            "pageSize": PAGE_SIZE,
        }
        while True:
            page = self._list(body)
            yield from page.get("entries", [])
            token = page.get("nextPageToken")
            if not token:
                return
            body = {**body, "pageToken": token}

    def _list(self, body: dict[str, Any]) -> dict[str, Any]:
        failure = ""
        for tried in range(MAX_TRIES):
            if tried:
                self._sleep(backoff_seconds(RETRY_BASE_SECONDS, tried - 1, RETRY_CAP_SECONDS))
            try:
                response = self._http().post(ENTRIES_LIST_URL, json=body, timeout=60)
            except Exception as error:  # the network: retried when the project's one predicate says so
                if not is_retryable(error):
                    raise
                failure = repr(error)
                continue
            if response.status_code == 200:
                return response.json()
            failure = f"{response.status_code} {response.text[:300]}"
            if response.status_code not in RETRIED_STATUSES:
                raise LogsUnavailable(f"Cloud Logging refused entries.list: {failure}")
        raise LogsUnavailable(f"entries.list failed {MAX_TRIES} times, the last with {failure}; try again later")

    def _http(self) -> Any:
        if self._session is None:
            import google.auth
            from google.auth.transport.requests import AuthorizedSession

            credentials, _ = google.auth.default(scopes=[READ_SCOPE])
            self._session = AuthorizedSession(credentials)
        return self._session

    @staticmethod
    def _line(entry: dict[str, Any], by_job: dict[str, int]) -> LogLine:
        labels = (entry.get("resource") or {}).get("labels") or {}
        job_id = str(labels.get("job_id"))
        task = labels.get("task_name")
        payload = entry.get("jsonPayload") if "jsonPayload" in entry else entry.get("textPayload", "")
        return LogLine(
            attempt=by_job.get(job_id, 0),
            job_id=job_id,
            key=str(entry.get("insertId") or json.dumps(entry, sort_keys=True)),
            time=entry.get("timestamp"),
            severity=str(entry.get("severity") or "DEFAULT"),
            text=_message_of(payload),
            service=labels.get("task_name") == SERVICE_TASK,
            claimed_kit=parse_kit_line(payload),
            replica=None if task in (None, "", SERVICE_TASK) else str(task),
        )


class EmulatorLogs:
    """The jobs' worker lines the local Vertex emulator keeps (see the module)."""

    def __init__(self, endpoint: str, get_json: Callable[[str], Any] | None = None) -> None:
        self._endpoint = endpoint.rstrip("/")
        self._get_json = get_json or _get_json

    def read(self, attempts: Sequence[Attempt], since: str | None) -> list[LogLine]:
        floor = parse_rfc3339(since) if since else None
        lines: list[LogLine] = []
        for attempt in attempts:
            if not attempt.job or not attempt.job_id:
                continue
            same_time: dict[str, int] = {}
            for item in self._get_json(f"{self._endpoint}/emulator/v1/{attempt.job}").get("output", []):
                moment = str(item.get("time") or "")
                written = parse_rfc3339(moment)
                if floor is not None and (written is None or written < floor):
                    continue
                ordinal = same_time[moment] = same_time.get(moment, -1) + 1
                raw = str(item.get("line", ""))
                payload = _json_line(raw)
                lines.append(
                    LogLine(
                        attempt=attempt.n,
                        job_id=attempt.job_id,
                        key=f"{attempt.job_id}/{moment}/{ordinal}",
                        time=moment or None,
                        severity="ERROR" if item.get("stream") == "stderr" else "INFO",
                        text=_message_of(payload) if payload is not None else raw,
                        claimed_kit=parse_kit_line(raw),
                        worker_start=item.get("run"),
                        replica=item.get("replica"),
                    )
                )
        return lines


def _json_line(raw: str) -> dict[str, Any] | None:
    """A line that is one JSON object with a `message`, as Cloud Logging would store it."""
    if not raw.startswith("{"):
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) and isinstance(parsed.get("message"), str) else None


def _get_json(url: str) -> Any:
    """The emulator's job details; a job it no longer knows (after a reset) printed nothing."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return {}
        raise LogsUnavailable(f"the Vertex emulator answered {error.code} for {url}") from error
    except urllib.error.URLError as error:
        raise LogsUnavailable(f"the Vertex emulator at {url} cannot be reached: {error.reason}") from error


# Where `--follow` asks again from: this long before the newest line shown, so an entry Cloud
# Logging stored late (its timestamp older than lines already read; entries.tail buffers for the
# same reason, https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/tail) is still
# found; what was shown is recognised by its key and not shown twice.
FOLLOW_LOOKBACK = timedelta(seconds=60)


class Source(Protocol):
    """What a log source offers (`CloudLogging`, `EmulatorLogs`): each job's lines in time order."""

    def read(self, attempts: Sequence[Attempt], since: str | None) -> list[LogLine]: ...


def request_lines(
    read_record: Callable[[], Any],
    source: Source,
    *,
    attempt: int | None = None,
    since: str | None = None,
    follow: bool = False,
    interval: float = 5.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[LogLine]:
    """The request's lines, oldest first, each marked; with `follow`, then the new ones every
    `interval` seconds until the request has ended. The jobs ended before the record says so, but
    Cloud Logging may store their last lines a little later: one more read, an interval after the
    first that found the request ended, shows those too."""
    marker = RunMarker()
    shown: set[str] = set()
    floor = since
    ended_before = False  # the previous read already found the request ended
    while True:
        record = read_record()
        attempts = [a for a in record.attempts if attempt is None or a.n == attempt]
        fresh = [line for line in ordered(source.read(attempts, floor or record.created_at)) if line.key not in shown]
        for line in fresh:
            shown.add(line.key)
            yield marker.mark(verified(line, record))
        if not follow or ended_before:
            return
        ended_before = record.is_terminal
        newest = max((parse_rfc3339(line.time) for line in fresh if line.time), default=None)
        if newest is not None:
            floor = max(since or "", iso(newest - FOLLOW_LOOKBACK, timespec="microseconds"))
        sleep(interval)
