"""Another instance's step, run at one object of a bucket between this instance's calls: the races
between a look and a compare-and-swap, made to happen on `sim.gcs.MemoryStorage` (or any bucket).

`Interleaved(bucket, name, get=step)` runs `step` once, just before this instance's next
`get_blob(name)`; likewise `read` (a download), `write` (an upload), `delete` (a delete, by the
blob or by the bucket). Each step runs once, at its first chance, so the retry that follows a lost
race meets the world as the other instance left it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

Step = Callable[[], object]


class Clock:
    """A settable UTC clock for the storage and for the code under test."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Interleaved:
    """`bucket`, with one step of another instance run before this one's next call on `name`."""

    def __init__(self, bucket: Any, name: str, **steps: Step) -> None:
        unknown = set(steps) - {"get", "read", "write", "delete"}
        if unknown:
            raise TypeError(f"no such interleaving point: {sorted(unknown)}")
        self._bucket, self._name, self._steps = bucket, name, dict(steps)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._bucket, attribute)

    def step(self, point: str) -> None:
        step = self._steps.pop(point, None)
        if step is not None:
            step()

    def get_blob(self, name: str, **kwargs: Any) -> Any:
        if name == self._name:
            self.step("get")
        blob = self._bucket.get_blob(name, **kwargs)
        return _InterleavedBlob(blob, self) if blob is not None and name == self._name else blob

    def blob(self, name: str, **kwargs: Any) -> Any:
        blob = self._bucket.blob(name, **kwargs)
        return _InterleavedBlob(blob, self) if name == self._name else blob

    def delete_blob(self, name: str, **kwargs: Any) -> None:
        if name == self._name:
            self.step("delete")
        self._bucket.delete_blob(name, **kwargs)


class _InterleavedBlob:
    def __init__(self, blob: Any, owner: Interleaved) -> None:
        object.__setattr__(self, "_blob", blob)
        object.__setattr__(self, "_owner", owner)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._blob, attribute)

    def __setattr__(self, attribute: str, value: Any) -> None:
        setattr(self._blob, attribute, value)

    def download_as_bytes(self, **kwargs: Any) -> bytes:
        self._owner.step("read")
        return self._blob.download_as_bytes(**kwargs)

    def upload_from_string(self, *args: Any, **kwargs: Any) -> None:
        self._owner.step("write")
        self._blob.upload_from_string(*args, **kwargs)

    def delete(self, **kwargs: Any) -> None:
        self._owner.step("delete")
        self._blob.delete(**kwargs)
