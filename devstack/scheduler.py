"""Cloud Scheduler's part in the stack: publish `{"task": <task>}` every so many seconds.

Maintenance tasks go to the maintenance topic; the `triggers` tick goes to on_trigger's own topic.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping


class Scheduler:
    def __init__(self, schedule: Mapping[str, float], publish: Callable[..., str], stopping: threading.Event) -> None:
        self._schedule = dict(schedule)
        self._publish = publish  # (topic key, data, **attributes)
        self._stopping = stopping
        self._thread: threading.Thread | None = None

    def start(self) -> Scheduler:
        self._thread = threading.Thread(target=self._run, name="stack-scheduler", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: float) -> None:
        """Wait for the thread to end, once `stopping` is set."""
        if self._thread is not None:
            self._thread.join(timeout=timeout)

    def _run(self) -> None:
        next_run = {task: time.monotonic() + every for task, every in self._schedule.items()}
        while not self._stopping.wait(0.5):
            for task, due in next_run.items():
                if time.monotonic() >= due:
                    next_run[task] = due + self._schedule[task]
                    topic = "triggers" if task == "triggers" else "maintenance"  # on_trigger's own
                    with contextlib.suppress(Exception):  # a missed tick is the next one's job
                        self._publish(topic, json.dumps({"task": task}).encode(), task=task)
