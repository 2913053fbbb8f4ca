"""Vertex AI's request quotas, enforced per project and region over a sliding minute.

Google's "Vertex AI quotas and limits" page (https://cloud.google.com/vertex-ai/docs/quotas,
"Request quotas") limits each project, in each supported region, to 60 "job or long-running
operation (LRO) submission requests" and 600 "resource management (CRUD) requests" per minute.
Here creating (or deleting) a custom job is a submission; get, list and cancel are CRUD calls.
Past a limit the API answers HTTP 429 RESOURCE_EXHAUSTED (the google.rpc code for "some
resource has been exhausted, perhaps a per-user quota", https://cloud.google.com/apis/design/errors)
with a message naming the quota metric and limit, in the shape Google's APIs use ("Quota
exceeded for quota metric '...' and limit '...' of service '...' for consumer '...'", e.g.
https://github.com/GoogleCloudPlatform/python-docs-samples/issues/3482) and an ErrorInfo detail
with reason RATE_LIMIT_EXCEEDED and the metric and limit in its metadata
(google/api/error_reason.proto in https://github.com/googleapis/googleapis).

A refused call consumes nothing. A limit of 0 turns that quota off. The metric names follow the
quotas page's request types; Google does not publish the exact metric ids, so these are named,
not copied.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from devstack.vertex.errors import ApiError

WINDOW_SECONDS = 60.0
SERVICE = "aiplatform.googleapis.com"
# The quotas page's defaults.
DEFAULT_SUBMISSIONS_PER_MINUTE = 60
DEFAULT_CRUD_PER_MINUTE = 600


@dataclass(frozen=True)
class Quota:
    key: str  # "submissions" | "crud"
    metric: str
    limit_name: str


SUBMISSIONS = Quota(
    "submissions",
    f"{SERVICE}/job_submission_requests",
    "Job or LRO submission requests per minute per region",
)
CRUD = Quota(
    "crud",
    f"{SERVICE}/resource_management_requests",
    "Resource management (CRUD) requests per minute per region",
)
# Which quota each emulated method counts against.
QUOTA_OF_METHOD = {"create": SUBMISSIONS, "get": CRUD, "list": CRUD, "cancel": CRUD}


class SlidingWindow:
    """At most `limit` admitted calls per key in any `window` seconds (0: unlimited)."""

    def __init__(
        self, limit: int, *, window: float = WINDOW_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if limit < 0:
            raise ValueError("a quota cannot be negative")
        self.limit = limit
        self._window = window
        self._clock = clock
        self._admitted: dict[Any, collections.deque[float]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()

    def try_acquire(self, key: Any) -> bool:
        """Admit one call for `key` now if the window has room; a refused call is not counted."""
        if self.limit == 0:
            return True
        now = self._clock()
        with self._lock:
            admitted = self._admitted[key]
            while admitted and admitted[0] <= now - self._window:
                admitted.popleft()
            if len(admitted) >= self.limit:
                return False
            admitted.append(now)
            return True

    def used(self, key: Any) -> int:
        now = self._clock()
        with self._lock:
            return sum(1 for moment in self._admitted.get(key, ()) if moment > now - self._window)

    def clear(self) -> None:
        with self._lock:
            self._admitted.clear()


class QuotaEnforcer:
    """The two request quotas, keyed by (project, region), with counts of what each refused."""

    def __init__(
        self,
        *,
        submissions_per_minute: int = DEFAULT_SUBMISSIONS_PER_MINUTE,
        crud_per_minute: int = DEFAULT_CRUD_PER_MINUTE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._windows = {
            SUBMISSIONS.key: SlidingWindow(submissions_per_minute, clock=clock),
            CRUD.key: SlidingWindow(crud_per_minute, clock=clock),
        }
        self._lock = threading.Lock()
        self._refused: collections.Counter[str] = collections.Counter()

    def check(self, method: str, project: str, location: str, consumer: str) -> None:
        """Count one call of `method`, or raise the 429 Vertex would send."""
        quota = QUOTA_OF_METHOD[method]
        if self._windows[quota.key].try_acquire((project, location)):
            return
        with self._lock:
            self._refused[quota.key] += 1
        raise quota_exceeded(quota, consumer)

    def limits(self) -> dict[str, int]:
        return {key: window.limit for key, window in self._windows.items()}

    def stats(self) -> dict[str, Any]:
        with self._lock:
            refused = dict(self._refused)
        return {
            "per_minute": self.limits(),
            "refused": {key: refused.get(key, 0) for key in self._windows},
        }

    def reset(self) -> None:
        for window in self._windows.values():
            window.clear()
        with self._lock:
            self._refused.clear()


def quota_exceeded(quota: Quota, consumer: str) -> ApiError:
    return ApiError(
        429,
        f"Quota exceeded for quota metric '{quota.metric}' and limit '{quota.limit_name}' of service "
        f"'{SERVICE}' for consumer '{consumer}'.",
        details=[
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "RATE_LIMIT_EXCEEDED",
                "domain": "googleapis.com",
                "metadata": {
                    "consumer": consumer,
                    "service": SERVICE,
                    "quota_metric": quota.metric,
                    "quota_limit": quota.limit_name,
                },
            }
        ],
    )
