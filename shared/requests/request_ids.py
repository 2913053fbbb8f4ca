"""What names a request: the one rule for request ids (`is_valid_request_id`; a Vertex label value
and a GCS path segment), read from a message with a violation naming the field
(`read_request_id`), and the id a bare CustomJob body published without one is given, from its
content and the moment its dedupe window opened (`derived_request_id`; the window is
`shared.ledger.dedupe`'s to place)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from shared.clock import utcnow
from shared.errors import Violation
from shared.jobs import DERIVED_ID_PREFIX

# Label-safe (a Vertex label value) and usable as a GCS path segment: the one rule for request ids
# (the pruner lists request folders with it too).
REQUEST_ID_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


def is_valid_request_id(value: object) -> bool:
    return isinstance(value, str) and REQUEST_ID_PATTERN.fullmatch(value) is not None


def content_digest(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def derived_request_id(body: Mapping[str, Any], opened: datetime | None) -> str:
    """The request id of a bare body published without one whose dedupe window opened at
    `opened`: its content and that second. Never the Pub/Sub message id: a publisher's retry, a
    redrive or a scheduler's double fire is a new message with the same content, and must not
    start a second job (shared.ledger.dedupe says which window a moment belongs to)."""
    return content_request_id(content_digest(body), opened or utcnow())


def content_request_id(digest: str, opened: datetime) -> str:
    return f"{DERIVED_ID_PREFIX}{digest[:16]}-{opened.astimezone(UTC):%Y%m%d%H%M%S}"


def read_request_id(value: object, path: str, violations: list[Violation]) -> str | None:
    if value is None:
        violations.append(Violation(path, "is required"))
        return None
    if not is_valid_request_id(value):
        violations.append(
            Violation(
                path,
                f"is {value!r}; a request id is 1-63 characters of lowercase letters, digits, '-' "
                "and '_', starting with a letter (it becomes a Vertex label value)",
            )
        )
        return None
    return value  # type: ignore[return-value]  # checked by is_valid_request_id
