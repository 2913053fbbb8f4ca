"""Structured JSON logs: one object per line, in the shape Cloud Logging parses.

`severity` and `message` become the entry's severity and summary; every other key lands in
`jsonPayload`, so `event=preemption` lines can be counted by a log-based metric. Lines go to
stderr, which Cloud Run functions ingest like stdout, so a CLI's stdout stays clean for data.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

SEVERITIES = ("DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")
_RANK = {name: rank for rank, name in enumerate(SEVERITIES)}
_write_lock = threading.Lock()


class Logger:
    """A logger with sticky context keys (request id, event id, ...) added to every line."""

    def __init__(
        self,
        context: Mapping[str, Any] | None = None,
        *,
        stream: TextIO | None = None,
        min_severity: str | None = None,
    ) -> None:
        self._context = dict(context or {})
        self._stream = stream
        self._min_severity = min_severity

    def bind(self, **context: Any) -> Logger:
        merged = {**self._context, **{k: v for k, v in context.items() if v is not None}}
        return Logger(merged, stream=self._stream, min_severity=self._min_severity)

    def log(self, severity: str, message: str, **fields: Any) -> None:
        if _RANK[severity] < _RANK[self._min_severity or _configured_level()]:
            return
        entry = {
            "severity": severity,
            "message": message,
            "time": datetime.fromtimestamp(time.time(), UTC).isoformat(),
            **self._context,
            **fields,
        }
        line = json.dumps(entry, default=str, separators=(",", ":"))
        stream = self._stream or sys.stderr
        with _write_lock:
            stream.write(line + "\n")
            stream.flush()

    def debug(self, message: str, **fields: Any) -> None:
        self.log("DEBUG", message, **fields)

    def info(self, message: str, **fields: Any) -> None:
        self.log("INFO", message, **fields)

    def warning(self, message: str, **fields: Any) -> None:
        self.log("WARNING", message, **fields)

    def error(self, message: str, **fields: Any) -> None:
        self.log("ERROR", message, **fields)


def _configured_level() -> str:
    from shared.settings import get_settings

    level = get_settings().log_level.upper()
    return level if level in _RANK else "INFO"


logger = Logger()
