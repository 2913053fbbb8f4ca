"""A reconcile pass's clock that a hung call moves on, and a FakeVertex whose calls to stalled
locations never answer: each waits out the timeout it names on that clock, then raises
DeadlineExceeded, as the JobService client does. No tests here."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from shared.clock import utcnow
from tests.support.vertex import FakeVertex


class PassClock:
    """The pass's clock: a hung call moves it on by the timeout it waited out."""

    def __init__(self) -> None:
        self._now = utcnow()
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def wait(self, seconds: float) -> None:
        with self._lock:
            self._now += timedelta(seconds=seconds)


class StalledVertex(FakeVertex):
    """FakeVertex whose calls to the `stalled` locations never answer."""

    def __init__(self, clock: PassClock, stalled: set[str]) -> None:
        super().__init__()
        self.clock = clock
        self.stalled = stalled
        self.hung_calls = 0

    def _hang_if_stalled(self, resource: str, timeout: float | None) -> None:
        from google.api_core.exceptions import DeadlineExceeded

        if resource.split("/locations/")[1].split("/")[0] in self.stalled:
            assert timeout is not None, "a call without a timeout would wait for good"
            self.hung_calls += 1
            self.clock.wait(timeout)
            raise DeadlineExceeded(f"no reply within {timeout:g} s")

    def get_custom_job(self, name: str, **kwargs: Any) -> Any:
        self._hang_if_stalled(name, kwargs.get("timeout"))
        return super().get_custom_job(name)

    def list_custom_jobs(self, request: dict[str, Any], **kwargs: Any) -> Any:
        self._hang_if_stalled(request["parent"], kwargs.get("timeout"))
        return super().list_custom_jobs(request)

    def cancel_custom_job(self, name: str, **kwargs: Any) -> None:
        self._hang_if_stalled(name, kwargs.get("timeout"))
        super().cancel_custom_job(name)
