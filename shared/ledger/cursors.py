"""Where the next bounded maintenance run (reconcile, prune, retention) starts, and what it keeps
between runs (`maintenance/<name>-cursor.json`, `maintenance/<name>.json`). Last writer wins:
overlapping runs only repeat or skip ahead a range, and the rotation comes back to every item.

`MaintenanceCursors` is a part of `shared.ledger.store.LedgerStore`, in its bucket.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from google.cloud.storage import Bucket

MAINTENANCE_PREFIX = "maintenance/"


class MaintenanceCursors:
    """The maintenance state of `_bucket` (`LedgerStore` sets it)."""

    _bucket: Bucket

    def maintenance_state(self, name: str) -> dict[str, Any]:
        """`maintenance/<name>.json` as a dict ({} when absent or unreadable)."""
        from google.api_core.exceptions import NotFound

        try:
            state = json.loads(self._bucket.blob(f"{MAINTENANCE_PREFIX}{name}.json").download_as_bytes())
        except (NotFound, ValueError, RecursionError):
            return {}
        return state if isinstance(state, dict) else {}

    def save_maintenance_state(self, name: str, state: dict[str, Any]) -> None:
        # Last writer wins, as for cursors: overlapping runs only repeat or skip ahead a range.
        self._bucket.blob(f"{MAINTENANCE_PREFIX}{name}.json").upload_from_string(
            json.dumps(state), content_type="application/json"
        )

    def cursor(self, name: str) -> str:
        """The position the next bounded `name` run starts at; "" = the beginning (also when the
        cursor cannot be read)."""
        from google.api_core.exceptions import NotFound

        try:
            state = json.loads(self._bucket.blob(cursor_path(name)).download_as_bytes())
        except (NotFound, ValueError, RecursionError):
            return ""  # absent, or written by hand: start over, as a new rotation would
        position = state.get("position", "") if isinstance(state, dict) else ""
        return position if isinstance(position, str) else ""

    def save_cursor(self, name: str, position: str) -> None:
        # Last writer wins: overlapping runs that race here only make the next run repeat a
        # range or start a little further on; the rotation comes back to every item anyway.
        self._bucket.blob(cursor_path(name)).upload_from_string(
            json.dumps({"position": position}), content_type="application/json"
        )


def cursor_path(name: str) -> str:
    return f"{MAINTENANCE_PREFIX}{name}-cursor.json"
