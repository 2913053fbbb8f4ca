"""The kit's structured lines on stdout, and the one parser for them.

Each line is one JSON object, written whole and flushed:

    {"severity":"INFO",
     "message":"spotjobs-kit run_started request_id=\"r1\" attempt=2 run=1 resumed_step=400 ...",
     "spotjobs_kit":{"v":1,"event":"run_started","request_id":"r1","attempt":2,"run":1,
                     "resumed_step":400,...}}

Cloud Logging stores a JSON line from a container as `jsonPayload` (`message` and `severity`
recognised, the `spotjobs_kit` object kept as is, numbers as doubles), and anything else as
`textPayload` (the raw text). `parse_kit_line` accepts both: a dict (the `jsonPayload`, or just
its `spotjobs_kit` object is looked up in it), or a string holding the JSON line anywhere in it
(a trailing newline or a prefix such as another process's unterminated output), or, failing
that, the `message` text alone (its `key=value` pairs carry every field, values in JSON).

Events: `run_started` (attempt, run = restart index, resumed_step, checkpoint, total_steps when
known), `checkpoint_torn` (step, checkpoint: an incomplete checkpoint newer than the resume point,
skipped), `preempted` (step, seconds_since_checkpoint), `checkpoint_committed` (step, seconds,
checkpoint, bytes), `checkpoint_kept` (step, checkpoint, reason: a save of a step already committed,
which the kit does not redo), `progress` (step, total_steps, steps_per_second: at most one a minute,
and one at each commit), `run_finished` (step), `run_failed` (step, error: the training code
raised). Every line names `request_id`, `attempt` and `run`, so a consumer can tell the runs of one
job apart and drop a line delivered twice.

Signed lines: with the attempt's key (`SPOTJOBS_KIT_KEY`, which spotjobs puts in that attempt's
containers only) a line carries `sig`, the HMAC-SHA256 of `signed_bytes(record)`: every field a
parsed line has, as the parser types them, so the JSON line, its `jsonPayload` (numbers as
doubles) and its message text all verify alike. Anyone may write a log line naming any job; only
the attempt's own containers can sign one (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

KEY = "spotjobs_kit"
KEY_ENV = "SPOTJOBS_KIT_KEY"  # the attempt's signing key, in its containers' environment
SIGNATURE = "sig"
TAG = "spotjobs-kit"
VERSION = 1
# A kit line is a few hundred characters (its longest field, run_failed's error, is cut at 300):
# a longer text is no kit line, so what looking for one costs stays bounded whatever a job logs.
MAX_LINE_CHARS = 16_384
RUN_STARTED = "run_started"
PREEMPTED = "preempted"
CHECKPOINT_COMMITTED = "checkpoint_committed"
RUN_FINISHED = "run_finished"
RUN_FAILED = "run_failed"  # the training code raised: an ending that is no preemption
CHECKPOINT_TORN = "checkpoint_torn"
CHECKPOINT_KEPT = "checkpoint_kept"
PROGRESS = "progress"
EVENTS = (
    RUN_STARTED,
    PREEMPTED,
    CHECKPOINT_COMMITTED,
    RUN_FINISHED,
    RUN_FAILED,
    CHECKPOINT_TORN,
    CHECKPOINT_KEPT,
    PROGRESS,
)

_INT_FIELDS = ("v", "attempt", "run", "step", "resumed_step", "bytes", "total_steps")
_FLOAT_FIELDS = ("seconds", "seconds_since_checkpoint", "steps_per_second")
_STR_FIELDS = ("request_id", "job_id", "checkpoint", "time", "task", "error", "reason")
_SIGNED_FIELDS = _INT_FIELDS + _FLOAT_FIELDS + _STR_FIELDS
_MESSAGE = re.compile(r"\b" + re.escape(TAG) + r" ([a-z_]+)((?: [a-z_]+=(?:\"(?:[^\"\\]|\\.)*\"|[^\s\"]+))*)")
_PAIR = re.compile(r" ([a-z_]+)=(\"(?:[^\"\\]|\\.)*\"|[^\s\"]+)")


def format_line(event: str, fields: Mapping[str, Any], *, severity: str = "INFO", key: str | None = None) -> str:
    """The JSON text of one line (no newline), signed with `key` when there is one. `fields`
    values must be JSON scalars."""
    record = {"v": VERSION, "event": event, **fields}
    if key:
        parsed = _record(record)
        if parsed is not None:
            fields = {**fields, SIGNATURE: signature(parsed, key)}
            record[SIGNATURE] = fields[SIGNATURE]
    pairs = " ".join(f"{k}={json.dumps(v)}" for k, v in fields.items())
    message = f"{TAG} {event} {pairs}".rstrip()
    return json.dumps({"severity": severity, "message": message, KEY: record}, separators=(",", ":"))


def write_line(text: str, stream: TextIO | None = None) -> None:
    """Write one whole line and flush it. Safe in a signal handler: if the signal interrupted a
    write to the same stream (a reentrant call), the line goes straight to its file descriptor."""
    stream = sys.stdout if stream is None else stream
    data = text + "\n"
    try:
        stream.write(data)
        stream.flush()
    except RuntimeError:
        raw = data.encode()
        fd = stream.fileno()
        while raw:
            raw = raw[os.write(fd, raw) :]


@dataclass(frozen=True)
class KitRecord:
    """One parsed kit line. Numbers are ints/floats again whatever the transport made of them."""

    event: str
    v: int = VERSION
    request_id: str | None = None
    attempt: int | None = None
    run: int | None = None  # the restart index within one job (0: its first run)
    job_id: str | None = None
    step: int | None = None
    resumed_step: int | None = None
    checkpoint: str | None = None
    seconds: float | None = None
    seconds_since_checkpoint: float | None = None
    bytes: int | None = None
    time: str | None = None  # when the line was written, RFC 3339 UTC
    task: str | None = None
    error: str | None = None  # run_failed: what the training code raised
    total_steps: int | None = None  # run_started, progress: the steps the run plans, when known
    steps_per_second: float | None = None  # progress: since the previous progress line
    reason: str | None = None  # checkpoint_kept: why the save was not redone
    sig: str | None = None  # HMAC-SHA256 of `signed_bytes`, hex: see the module docstring
    fields: Mapping[str, Any] = field(default_factory=dict, compare=False)  # everything, as sent

    def dedupe_key(self) -> tuple[Any, ...]:
        """Equal for the same line delivered twice; different for distinct runs and events."""
        return (self.request_id, self.attempt, self.job_id, self.run, self.event, self.step, self.time)


def signed_bytes(record: KitRecord) -> bytes:
    """The canonical encoding a signature covers: every typed field but the signature itself."""
    values = [record.event] + [getattr(record, name) for name in _SIGNED_FIELDS]
    return json.dumps(values, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def signature(record: KitRecord, key: str) -> str:
    return hmac.new(key.encode("utf-8"), signed_bytes(record), hashlib.sha256).hexdigest()


def is_signed_with(record: KitRecord, key: str | None) -> bool:
    """The line carries a signature made with `key` (False without a key or a signature)."""
    if not key or not record.sig:
        return False
    return hmac.compare_digest(record.sig, signature(record, key))


def parse_kit_line(payload: Any) -> KitRecord | None:
    """A kit line from a log entry's payload (`jsonPayload` dict or `textPayload` str), or None."""
    if isinstance(payload, bytes):
        payload = payload.decode("utf-8", errors="replace")
    if isinstance(payload, Mapping):
        nested = payload.get(KEY)
        if isinstance(nested, Mapping):
            return _record(nested)
        message = payload.get("message")
        return _from_message(message) if isinstance(message, str) and len(message) <= MAX_LINE_CHARS else None
    if not isinstance(payload, str) or len(payload) > MAX_LINE_CHARS or (KEY not in payload and TAG not in payload):
        return None
    found = _from_json_text(payload)
    return found if found is not None else _from_message(payload)


def _from_json_text(text: str) -> KitRecord | None:
    decoder = json.JSONDecoder()
    end = text.find(f'"{KEY}"')
    start = text.find("{")
    while 0 <= start < end:
        try:
            value, _ = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than Python recurses
            pass
        else:
            if isinstance(value, dict) and isinstance(value.get(KEY), Mapping):
                return _record(value[KEY])
        start = text.find("{", start + 1)
    return None


def _from_message(text: str) -> KitRecord | None:
    match = _MESSAGE.search(text)
    if match is None:
        return None
    values: dict[str, Any] = {"event": match.group(1)}
    for key, raw in _PAIR.findall(match.group(2)):
        try:
            values[key] = json.loads(raw)
        except ValueError:
            values[key] = raw
    return _record(values)


def _record(data: Mapping[str, Any]) -> KitRecord | None:
    event = data.get("event")
    if event not in EVENTS:
        return None  # e.g. pip's "Requirement already satisfied: spotjobs-kit in ..."
    values: dict[str, Any] = {}
    for name in _INT_FIELDS:
        values[name] = _as_int(data.get(name))
    for name in _FLOAT_FIELDS:
        values[name] = _as_float(data.get(name))
    for name in _STR_FIELDS:
        raw = data.get(name)
        values[name] = str(raw) if isinstance(raw, (str, int)) and not isinstance(raw, bool) else None
    if values["v"] is None:
        values["v"] = VERSION
    sig = data.get(SIGNATURE)
    return KitRecord(event=event, fields=dict(data), sig=sig if isinstance(sig, str) else None, **values)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():  # jsonPayload numbers are doubles
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value) if isinstance(value, str) else None
    except ValueError:
        return None
