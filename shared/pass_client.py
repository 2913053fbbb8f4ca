"""A reconcile pass's JobServiceClient (`PassClient`): every call it sends is judged by the pass's
call window and spent from its CRUD budget (`shared.reconcile_vertex`, which hands one out per
location), and a get or an unfinished-jobs list is answered from the pass's listing where it can.
Also what a read through it tells (`ReadTimes`, `Listing`) and how a list call's pages are walked
(`pages`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from shared.adapters.vertex import unfinished_jobs_filter

if TYPE_CHECKING:
    from datetime import datetime

    from google.cloud.aiplatform_v1 import CustomJob

    from shared.wiring import Ports


@dataclass(frozen=True)
class ReadTimes:
    """When a read's call went out and when its answer was back. Vertex took the answer between
    the two: the job held the state it shows until `sent` at least (what a wait is vouched for,
    what the deadline and stuck rules judge at), and was in it by `answered` (what a change the
    read counts, a preemption, is stamped at)."""

    sent: datetime
    answered: datetime


@dataclass(frozen=True)
class Listing:
    """A location's unfinished jobs by name, and when it was taken (its first page asked, its last
    answered)."""

    times: ReadTimes
    jobs: dict[str, CustomJob]


class CountingPass(Protocol):
    """What a `PassClient` asks of its pass (`shared.reconcile_vertex.VertexPass`)."""

    ports: Ports

    def listing(self, location: str, client: Any) -> Listing | None: ...

    def listing_made(self, location: str, client: Any) -> tuple[Listing | None, Exception | None]: ...

    def note_answered(self) -> None: ...

    def next_page(self, location: str) -> None: ...

    def call(self, location: str, kind: str) -> AbstractContextManager[None]: ...


class PassClient:
    """A JobServiceClient whose CRUD calls are counted against the pass's budget, and whose gets
    and unfinished-jobs lists are answered from the pass's listing where it can. It has no other
    call: anything else (a create) raises AttributeError unsent."""

    def __init__(self, vertex_pass: CountingPass, location: str, client: Any) -> None:
        self._pass = vertex_pass
        self._location = location
        self._client = client
        self.last_read: ReadTimes | None = None  # its last get's or list's, once answered

    def get_custom_job(self, *, name: str, **kwargs: Any) -> Any:
        listed = self._pass.listing(self._location, self._client)
        if listed is not None and name in listed.jobs:
            self._pass.note_answered()
            self.last_read = listed.times
            return listed.jobs[name]
        with self._pass.call(self._location, "get"):
            sent = self._pass.ports.clock()
            job = self._client.get_custom_job(name=name, **kwargs)
            self.last_read = ReadTimes(sent, self._pass.ports.clock())
            return job

    def list_custom_jobs(self, request: dict[str, Any], **kwargs: Any) -> list[Any]:
        settings = self._pass.ports.settings
        if request.get("filter") == unfinished_jobs_filter(settings.deployment_label):
            listed, failure = self._pass.listing_made(self._location, self._client)
            if listed is not None:
                self.last_read = listed.times
                return list(listed.jobs.values())
            if failure is not None:  # failed or refused just now: no second list to the same answer
                raise failure
        jobs: list[Any] = []
        with self._pass.call(self._location, "list"):
            sent = self._pass.ports.clock()
            pager = self._client.list_custom_jobs(request=request, **kwargs)
            for page in pages(pager, before_next=lambda: self._pass.next_page(self._location)):
                jobs.extend(page)
            self.last_read = ReadTimes(sent, self._pass.ports.clock())
        return jobs

    def cancel_custom_job(self, **kwargs: Any) -> Any:
        with self._pass.call(self._location, "cancel"):
            return self._client.cancel_custom_job(**kwargs)

    def __getattr__(self, name: str) -> Any:
        # Fail closed: a call not wrapped above would leave unbudgeted and outside the window.
        raise AttributeError(
            f"a reconcile pass sends only gets, lists and cancels, each under its CRUD budget and call window: "
            f"not {name} (shared/pass_client.py)"
        )


def pages(pager: Any, *, before_next: Callable[[], None]) -> Any:
    """The pages of a list call, each a list of jobs (one page for a fake without `pages`). The
    call sent the first page's request; the pager sends each next one lazily, when the page before
    it, naming a `next_page_token`, is used up: `before_next` runs first (the budget's spend), and
    whatever it raises stops the listing before that request is sent."""
    paged = getattr(pager, "pages", None)
    if paged is None:
        yield list(pager)
        return
    for page in paged:
        yield list(page.custom_jobs)
        if getattr(page, "next_page_token", ""):
            before_next()
