"""The fleet observations in the state bucket: one empty object per observation, its name the whole
fact, so a burst writes no shared document (each name is created once: a repeated delivery finds
it there) and a decision reads a class's window in one listing (a page per thousand).

    fleet/<class key>/<location>/<kind>~<epoch seconds>~<seconds>~<count>~<attempt key>~<index>

A lifecycle rule deletes them `RETENTION_DAYS` after their creation (terraform/storage.tf); the
reader keeps only the last `ESTIMATE_WINDOW_SECONDS`, so what is read is bounded by what a class's fleet
does in a window (docs/placement.md, "Observations")."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from shared.fleet.observations import FleetFact, Kind, MachineClass, epoch

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

FLEET_PREFIX = "fleet/"
ESTIMATE_WINDOW_SECONDS = 7 * 24 * 3600.0  # what the estimate weighs: a week of the fleet's history
RETENTION_DAYS = 8  # the lifecycle rule's age: a day past the window
PAGE = 1000


def object_name(machine_class: MachineClass, observation: FleetFact) -> str:
    o = observation
    at = epoch(o.at) if o.at is not None else 0
    fact = f"{o.kind.value}~{at}~{round(o.seconds)}~{o.count}~{o.attempt_key}~{o.index}"
    return f"{FLEET_PREFIX}{machine_class.key}/{o.location}/{fact}"


def parse_name(name: str) -> tuple[MachineClass, FleetFact] | None:
    """The observation a name holds; None for a name not of this format."""
    try:
        _, class_key, location, fact = name.split("/", 3)
        kind, at, seconds, count, key, index = fact.split("~")
        observation = FleetFact(
            Kind(kind),
            location,
            datetime.fromtimestamp(int(at), UTC),
            float(seconds),
            int(count),
            key,
            int(index),
        )
        return MachineClass.from_key(class_key), observation
    except ValueError:
        return None


def write_facts(bucket: Bucket, machine_class: MachineClass, observations: Iterable[FleetFact]) -> int:
    """Create each observation's object once; how many were new."""
    from google.api_core.exceptions import PreconditionFailed

    written = 0
    for observation in observations:
        try:
            bucket.blob(object_name(machine_class, observation)).upload_from_string(
                b"", content_type="application/octet-stream", if_generation_match=0
            )
        except PreconditionFailed:
            continue  # recorded by an earlier delivery
        written += 1
    return written


def read(
    bucket: Bucket, machine_class: MachineClass, now: datetime, window_seconds: float = ESTIMATE_WINDOW_SECONDS
) -> list[FleetFact]:
    """The class's observations of the window, every location, in one listing."""
    since = now - timedelta(seconds=window_seconds)
    blobs = bucket.client.list_blobs(
        bucket, prefix=f"{FLEET_PREFIX}{machine_class.key}/", page_size=PAGE, fields="items(name),nextPageToken"
    )
    found = (parse_name(blob.name) for blob in blobs)
    return [o for parsed in found if parsed is not None for o in [parsed[1]] if o.at is not None and o.at >= since]


def classes(bucket: Bucket) -> list[MachineClass]:
    """Every class with observations (one delimiter listing)."""
    iterator = bucket.client.list_blobs(bucket, prefix=FLEET_PREFIX, delimiter="/", fields="prefixes,nextPageToken")
    prefixes = {prefix for page in iterator.pages for prefix in page.prefixes}
    return sorted(MachineClass.from_key(p[len(FLEET_PREFIX) : -1]) for p in prefixes)
