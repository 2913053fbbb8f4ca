"""Vertex AI's JobService in memory, on the virtual clock: what spotjobs calls on
`aiplatform_v1.JobServiceClient` (create, get, list, cancel) with Vertex's documented behaviour.

- a create is accepted as JOB_STATE_QUEUED and runs asynchronously: the world moves each job on
  (PENDING, RUNNING, restarts after preemption, SUCCEEDED / FAILED) from the fate drawn for it;
- a cancel is asynchronous too: CANCELLING at once, CANCELLED a while later
  (https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/cancel);
- a preempted Spot job is restarted, and after six restarts it FAILS with a STOCKOUT error, as
  the code's own classifier expects (docs/signals.md);
- 429s per quota kind: submissions (60 creates a minute per region, a rate), CRUD (get, list,
  cancel: 600 a minute) and a resource quota (GPUs: not a rate) as the world decides; 5xx; a
  create whose response is lost after the job was created;
- every state change is a service log line the log sink routes to job-events (`emit`);
- the permanent faults of `sim.faults`: a 403 on a call kind in a location (`refusals`), a 400 on
  every create of a request (`bad_requests`), a job deleted in the console (NotFound on every
  later get and cancel, gone from lists; kept in `jobs` as ground truth, `deleted`), a job
  cancelled in the console, and waits before RUNNING that differ per location (`changeovers`);
- FLEX_START as the emulator's default modes have it: a wait for capacity up to `maxWaitDuration`,
  then a run never preempted (`sim.flex`);
- an assumption, `queued_hold` (Google documents no length for QUEUED: "The job has been just
  created or resumed and processing has not yet begun", job_state.proto): `brief`, one step, as
  the emulator's `queued_seconds`; `long`, in `QUEUED_HOLD_SHARE` of seeds, holds each job QUEUED
  one of `QUEUED_HOLDS` from its create before PENDING, so a wait may be QUEUED then PENDING at
  length (`draw_queued_hold`);
- an assumption, `restart_state` (Google documents no state for a preempted Spot job waiting for a
  machine again: the Spot page says only that "Compute Engine tries to restart the job up to six
  times", job_state.proto has no restarting state, and its QUEUED is "just created or resumed"):
  `running` keeps it RUNNING, as the emulator's documented signal profile; `pending` shows it
  PENDING until it runs again, as the emulator's rich profile (devstack/vertex/signals.py
  `pending_on_restart`); `queued` shows it QUEUED, then PENDING (the proto's "resumed"). In the
  last two its trainer stops at the preemption and starts when it is RUNNING again. In all three
  the restart waits out a Spot outage in its location (`running`: one that holds at the
  preemption), as the emulator's runner does; drawn per seed (`draw_restart_state`).
- an assumption, `list_page_size` (ListCustomJobsRequest's `page_size` is "The standard list page
  size": Google documents no default and no maximum, and AIP-158 lets a page hold fewer than asked):
  the most jobs a page holds, for a request that leaves `page_size` unset and one that asks more,
  one of `PAGE_SIZES`, drawn per seed (`draw_list_page_size`). A list answers a `ListPager`, as the
  client's `ListCustomJobsPager`: its first page answered by the call, each next one asked when the
  pager reaches it, a call of its own (faults, latency, the CRUD quota, the 403s), its filter
  judged when it is asked (the token is a cursor in creation order: no job is skipped);
- one regional endpoint per client (`sim.regions`): `vertex(location)`, what `Ports.job_service`
  hands the code, refuses a job or parent of another location with a 400, as production's
  `{location}-aiplatform.googleapis.com` does; each such call is kept (`misaddressed`).
Every create is kept (`created`) with its request JSON, for the policy invariant, and every
permanent refusal (`refused`), for the alert catalogue.
"""

from __future__ import annotations

import collections
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as api

from shared.adapters.vertex import to_job_json
from shared.jobs import ENV_KIT_KEY, FLEX_START, LABEL_ATTEMPT, LABEL_REQUEST_ID
from sim import flex
from sim.continuations import DEADLINE_EXCEEDED_ERROR, TIMEOUT_FATES
from sim.replicas import TRANSIENT_EXIT_RESTARTS, Replicas, peer_exit, peer_exit_error, reclaim, restarts_reached

if TYPE_CHECKING:
    from sim.regions import RegionalClient

SUBMISSIONS_PER_MINUTE = 60
CRUD_PER_MINUTE = 600
STOCKOUT_ERROR = {"code": 8, "message": "Job failed with STOCKOUT: the Spot VM was preempted 7 times."}
USER_ERROR = {"code": 3, "message": "The replica workerpool0-0 exited with a non-zero status of 1."}
MAX_RESTARTS = 6
QUEUED_HOLD_MODES = ("brief", "long")
QUEUED_HOLD_SHARE = 0.3  # of seeds in the `long` mode
QUEUED_HOLDS = (0.0, 600.0, 2 * 3600.0, 5 * 3600.0, 7 * 3600.0)  # seconds; 6 h is `stuck_after_seconds`
# The `list_page_size` assumption: the most jobs a page of customJobs.list holds, for a request
# that leaves `page_size` unset and one that asks more (ListCustomJobsRequest's page_size is "The
# standard list page size": Google documents no default and no maximum; AIP-158 lets a page hold
# fewer than asked). Drawn per seed, small in many so that listings page often: a pass lists the
# few unfinished jobs of a location, so a page of one or two is what makes a later page (and a
# fault on one) common; a later page costs a call, a small share of a seed's.
PAGE_SIZES = (1, 2, 5, 10, 20, 50, 1000)
PAGE_SIZE_WEIGHTS = (0.25, 0.15, 0.1, 0.1, 0.05, 0.1, 0.25)
RESTART_STATES = ("running", "pending", "queued")
RESTART_STATE_WEIGHTS = (0.6, 0.25, 0.15)  # of seeds; `running` is the emulator's default
LIVE_STATES = ("JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLING")
TERMINAL_STATES = ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


@dataclass
class SimJob:
    name: str
    location: str
    request: dict[str, Any]  # the create's CustomJob as REST JSON
    labels: dict[str, str]
    state: str
    create_time: datetime
    update_time: datetime
    fate: str = "succeed"  # succeed | fail | stockout | hang | timeout | timeout_stuck
    preemptions: int = 0  # still to come
    restarts: int = 0  # counted towards the six, in the seed's `spot_restart_count` mode (sim.replicas)
    vms_reclaimed: int = 0  # every replica's VM Spot reclaimed: what the product may count
    reclaimed_at: list[datetime] = field(default_factory=list)  # when each preemption reclaimed VMs
    replica_restarts: dict[str, int] = field(default_factory=dict)  # replica -> its reclaims
    transient_exits: int = 0  # survivors' exits of 134 after a peer's reclaim (sim.replicas.peer_exit)
    start_time: datetime | None = None
    end_time: datetime | None = None
    error: dict[str, Any] | None = None
    next_change: datetime | None = None
    deleted: bool = False  # deleted in the console: Vertex answers NotFound for it
    delete_when_ended: bool = False  # deleted in the console while live: cancelled, then deleted
    slow_end_seconds: float | None = None  # its CANCELLING lasts this long (`sim.faults.republish_after_deletion`)
    # FLEX_START: seconds from the start of its wait (PENDING) to its capacity, None: it never comes.
    flex_capacity_after: float | None = 0.0
    flex_wait_began: datetime | None = None
    queued_until: datetime | None = None  # the end of its hold in QUEUED (`SimVertex.queued_hold`)
    # Each wait shown after a preemption (`restart_state` pending or queued): (began, ended or None).
    restart_waits: list[tuple[datetime, datetime | None]] = field(default_factory=list)
    # Every state it was in and when it began, its create's first (`sim.stuck` judges `job_stuck` by them).
    states: list[tuple[datetime, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.states:
            self.states.append((self.create_time, self.state))

    @property
    def request_id(self) -> str:
        return self.labels.get(LABEL_REQUEST_ID, "")

    @property
    def attempt(self) -> int:
        return int(self.labels.get(LABEL_ATTEMPT, "0") or 0)

    @property
    def spot(self) -> bool:
        """Scheduled on Spot VMs: an unset strategy is STANDARD ("STRATEGY_UNSPECIFIED: Strategy
        will default to STANDARD", Scheduling in custom_job.proto), as the emulator reads it."""
        return ((self.request.get("jobSpec") or {}).get("scheduling") or {}).get("strategy") == "SPOT"

    @property
    def flex_start(self) -> bool:
        return ((self.request.get("jobSpec") or {}).get("scheduling") or {}).get("strategy") == FLEX_START

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def kit_key(self) -> str | None:
        """The kit key its create carried in its containers' environment (a job's for good)."""
        for pool in (self.request.get("jobSpec") or {}).get("workerPoolSpecs") or []:
            for variable in (pool.get("containerSpec") or {}).get("env") or []:
                if variable.get("name") == ENV_KIT_KEY:
                    return str(variable.get("value"))
        return None

    def shown(self) -> tuple[Any, ...]:
        """Everything `to_proto` reads: equal between two calls, they build equal protobufs."""
        error = None if not self.error else repr(self.error)
        when = (self.create_time, self.update_time, self.start_time, self.end_time)
        return (self.name, self.request.get("displayName", ""), self.state, tuple(self.labels.items()), when, error)

    def to_proto(self) -> Any:
        from google.cloud.aiplatform_v1 import CustomJob

        job = CustomJob(
            name=self.name,
            display_name=self.request.get("displayName", ""),
            state=self.state,
            labels=dict(self.labels),
            create_time=self.create_time,
            update_time=self.update_time,
        )
        if self.start_time:
            job.start_time = self.start_time
        if self.end_time:
            job.end_time = self.end_time
        if self.error:
            job.error = self.error
        key = self.kit_key  # Vertex shows the job's spec, environment and all: the code tells a claim's job by it
        if key:
            job.job_spec = {"worker_pool_specs": [{"container_spec": {"env": [{"name": ENV_KIT_KEY, "value": key}]}}]}
        return job


@dataclass
class Create:
    """One create that reached Vertex (accepted or not), for the policy invariant."""

    at: datetime
    location: str
    job: dict[str, Any]
    accepted: bool
    gpu_quota_refused: bool = False  # turned away because the GPU quota was full (`deadlines_met`)


@dataclass(frozen=True)
class PassCall:
    """A call reconcile sent (a get, list or cancel; a create, which a pass never sends), as Vertex
    saw it sent: what `sim.reconcile_budget.reconcile_within_crud_budget` judges against the pass's
    budget."""

    at: datetime
    sender: object  # the pass (the world's task) that sent it
    operation: str
    location: str
    query: str = ""  # a list's filter: the pass's listing of a location is told apart by it
    listing: int = 0  # a list's pager, the same for each of its pages (0: not a list)
    job: str = ""  # a cancel's job: the sweep's first cancel of a stray is spent as a listing is


@dataclass(slots=True)
class ListPage:
    """One `ListCustomJobsResponse`: what the code reads of a page."""

    custom_jobs: list[Any]
    next_page_token: str


class ListPager:
    """`ListCustomJobsPager` as the client hands it out: the first page answered by the call; `pages`
    (and iterating the pager) asks each next page when the one before it, naming a
    `next_page_token`, is used up, each through `fetch` as a call of its own; any other attribute is
    the latest page's, as the real pager's `__getattr__` has it."""

    def __init__(self, fetch: Callable[[str], ListPage], first: ListPage) -> None:
        self._fetch = fetch
        self._response = first

    def __getattr__(self, name: str) -> Any:
        return getattr(self._response, name)

    @property
    def pages(self) -> Iterator[ListPage]:
        yield self._response
        while self._response.next_page_token:
            self._response = self._fetch(self._response.next_page_token)
            yield self._response

    def __iter__(self) -> Iterator[Any]:
        for page in self.pages:
            yield from page.custom_jobs


@dataclass(frozen=True)
class Refused:
    """A call Vertex refused for good (403, or a 400 on a create), for the alert catalogue."""

    at: datetime
    operation: str
    location: str
    request_id: str
    code: int
    caller: str  # the function (or "operator") whose call it was
    # A listing by the request's labels alone, naming no attempt: submit's replay guard
    # (`replayed_without_a_record`), not a claim's look-up (seed 3729).
    request_wide: bool = False


class SimVertex:
    """One project's JobService, every region. An instance is the `Ports.job_service` factory: called
    with a location, it hands out that region's client (`sim.regions.RegionalClient`)."""

    def __init__(self, clock: Callable[[], datetime], io: Callable[..., Any], rng: Any, project: str) -> None:
        self.clock = clock
        self.io = io
        self.rng = rng
        self.project = project
        self.jobs: dict[str, SimJob] = {}
        # The jobs of each parent (`projects/<p>/locations/<l>`) and of each request, in creation
        # order: what a listing scans (a reconcile pass lists the jobs of each request it visits).
        self._jobs_of_parent: dict[str, list[SimJob]] = collections.defaultdict(list)
        self._jobs_of_request: dict[str, list[SimJob]] = collections.defaultdict(list)
        self._indexed = 0
        # Per job name: what it showed when last answered, and the protobuf built for it (`_answer`).
        self._answers: dict[str, tuple[tuple[Any, ...], Any]] = {}
        self.state_changes = 0  # states set so far: with `_indexed`, a checker knows if the jobs moved
        self.created: list[Create] = []
        self.replicas = Replicas()  # the seed's multi-replica draws (the world sets them)
        self.emit: Callable[[SimJob, str, str], None] = lambda job, text, severity: None
        self.gpu_quota_full = False  # creates of GPU machines get the resource-quota 429
        self.fate: Callable[[SimJob], None] = lambda job: None
        # How long a job stays QUEUED from its create, in seconds (the `queued_hold` assumption).
        self.queued_hold: Callable[[SimJob], float] = lambda job: 0.0
        # Per request, the seconds its jobs were held QUEUED so far (one after another), and the most
        # of any request: the world's liveness bound gives them on top (`World._phase_quiet`).
        self.held_queued: dict[str, float] = collections.defaultdict(float)
        self.longest_held_queued = 0.0
        self.restart_state = RESTART_STATES[0]  # the state of a restart's wait (an assumption)
        # When a FLEX_START job's capacity comes, in seconds after its wait begins (None: never).
        self.flex_wait: Callable[[SimJob], float | None] = lambda job: 0.0
        # When Spot has capacity again in a location (None: it has now).
        self.spot_capacity_back: Callable[[str], datetime | None] = lambda location: None
        # The trainer in the job's containers (sim.trainer): "start" (a run begins), "train" (it
        # trained until a clean end), "cut" (until a preemption, failure or cancel), "stop".
        self.runs: Callable[[SimJob, str], None] = lambda job, what: None
        # An out-of-band actor's turn as a create of the request leaves for Vertex (`sim.faults`).
        self.before_create: Callable[[str], None] = lambda request_id: None
        self._ids = 5_000_000_000_000_000_001
        # Permanent faults (sim.faults): set by the world from what the seed drew.
        self.refusals: list[Any] = []  # sim.faults.Refusal
        self.bad_requests: frozenset[str] = frozenset()
        self.changeovers: dict[str, Any] = {}  # location -> sim.faults.Changeover
        self.changeover_rng: Any = None
        self.caller: Callable[[], str] = lambda: "test"
        self.refused: list[Refused] = []
        # Told of each refusal (its index in `refused`) as it is met: the world notes the delivery
        # that met it (`World.refusals_cut_short`).
        self.met_refusal: Callable[[int], None] = lambda index: None
        # The cancels the code sent that Vertex took (when, job name, the caller): the stray sweep's,
        # a move's and a deadline switch's among them.
        self.cancels: list[tuple[datetime, str, str]] = []
        # Told of each lookup of a request's jobs by its labels (location, request id): what
        # `sim.invariants.note_lookup` judges at the moment it is made.
        self.looked_up: Callable[[str, str], None] = lambda location, request_id: None
        # When reconcile's list or get calls were answered, per location, of passes that did not die
        # (`noted_ask`): the deadline rule counts on a job being asked by a pass that decides, at
        # least every `longest_unasked_seconds` (`sim.promises.deadlines_met`).
        self.asked: dict[str, list[datetime]] = collections.defaultdict(list)
        # Told of each of reconcile's answered asks (location, when); the world keeps them with the
        # pass until it ends (`World._note_ask`). Alone (a test), an ask counts at once.
        self.noted_ask: Callable[[str, datetime], None] = lambda location, at: self.asked[location].append(at)
        self._calls: dict[tuple[str, str], collections.deque[datetime]] = collections.defaultdict(collections.deque)
        self._regional: dict[str, RegionalClient] = {}
        # Calls sent through another location's endpoint: (when, caller, operation, resource, endpoint).
        self.misaddressed: list[tuple[datetime, str, str, str, str]] = []
        # The timeout each call was sent with, counted by (caller, operation, timeout): what
        # `sim.hangs.vertex_calls_bounded` judges (the client itself sets none).
        self.call_timeouts: collections.Counter[tuple[str, str, float | None]] = collections.Counter()
        # Reconcile's calls as sent, each with the pass that sent it (`sender`, set by the world).
        self.sender: Callable[[], object | None] = lambda: None
        self.pass_calls: list[PassCall] = []
        # The ones of them that got no reply (ran out their timeout, or met a 503), by index in
        # `pass_calls`: what `sim.promises.locations_unanswering` judges.
        self.unanswered_calls: set[int] = set()
        # The most jobs a list's page holds (the `list_page_size` assumption; the world draws it).
        self.page_size = PAGE_SIZES[-1]
        self._listings = 0  # list calls so far: each pager's number, shared by its pages

    def __call__(self, location: str) -> RegionalClient:
        from sim.regions import RegionalClient

        client = self._regional.get(location)
        if client is None:
            client = self._regional[location] = RegionalClient(self, location)
        return client

    def _served(self, endpoint: str | None, operation: str, field: str, resource: str) -> None:
        """Vertex's 400 for a resource of another location sent to `endpoint`'s endpoint (None: the
        instance itself, which a test or the world drives, serves every location)."""
        if endpoint is None or _location(resource) == endpoint:
            return
        from sim.regions import wrong_endpoint

        self.misaddressed.append((self.clock(), self.caller(), operation, resource, endpoint))
        raise wrong_endpoint(field, endpoint)

    def _call(
        self,
        operation: str,
        perform: Callable[[], Any],
        timeout: float | None,
        location: str = "",
        query: str = "",
        listing: int = 0,
        job: str = "",
    ) -> Any:
        """One call through the world's `io`, which a hang keeps waiting for `timeout` seconds.
        `location`: the call's, kept with its pass when reconcile sends it (`pass_calls`), with a
        list's filter and pager (`listing`), or a cancel's job."""
        self.call_timeouts[(self.caller(), operation, timeout)] += 1
        if not location or self.caller() != "reconcile":
            return self.io("vertex", operation, perform, timeout=timeout, location=location)
        from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable

        self.pass_calls.append(PassCall(self.clock(), self.sender(), operation, location, query, listing, job))
        sent = len(self.pass_calls) - 1
        try:
            return self.io("vertex", operation, perform, timeout=timeout, location=location)
        except (DeadlineExceeded, ServiceUnavailable):
            self.unanswered_calls.add(sent)
            raise

    # The quotas.

    def _admit(self, kind: str, location: str, limit: int) -> None:
        now = self.clock()
        window = self._calls[(kind, location)]
        while window and window[0] <= now - timedelta(seconds=60):
            window.popleft()
        if len(window) >= limit:
            from google.rpc.error_details_pb2 import ErrorInfo

            metric = "job_submission_requests" if kind == "submissions" else "resource_management_requests"
            limit_name = (
                "Job or LRO submission requests per minute per region"
                if kind == "submissions"
                else "Resource management (CRUD) requests per minute per region"
            )
            raise api.TooManyRequests(
                f"Quota exceeded for quota metric 'aiplatform.googleapis.com/{metric}' and limit "
                f"'{limit_name}' of service 'aiplatform.googleapis.com' for consumer 'projects/{self.project}'.",
                error_info=ErrorInfo(reason="RATE_LIMIT_EXCEEDED", domain="googleapis.com"),
            )
        window.append(now)

    def _refuse(self, operation: str, location: str, request_id: str, *, request_wide: bool = False) -> None:
        """A 403 when a permission is missing for this call kind in this location; a 400 on a
        create of a request whose job Vertex finds invalid."""
        now = self.clock()
        if any(r.applies(operation, location, now) for r in self.refusals):
            self.refused.append(Refused(now, operation, location, request_id, 403, self.caller(), request_wide))
            self.met_refusal(len(self.refused) - 1)
            raise api.PermissionDenied(
                f"Permission 'aiplatform.customJobs.{operation}' denied on resource "
                f"'//aiplatform.googleapis.com/projects/{self.project}/locations/{location}' (or it may not exist)."
            )
        if operation == "create" and request_id in self.bad_requests:
            self.refused.append(Refused(now, operation, location, request_id, 400, self.caller()))
            raise api.InvalidArgument(
                "List of found errors:\t1.Field: job_spec.worker_pool_specs[0].machine_spec; "
                "Message: Machine type is not supported for this accelerator configuration.\t"
            )

    def _note_asked(self, location: str) -> None:
        if self.caller() == "reconcile":
            self.noted_ask(location, self.clock())

    def _known_job(self, name: str) -> SimJob:
        job = self.jobs.get(name)
        if job is None or job.deleted:
            raise api.NotFound(f"{name} does not exist")
        return job

    # The JobService methods spotjobs calls.

    def create_custom_job(
        self,
        *,
        parent: str,
        custom_job: Any,
        retry: Any = None,
        timeout: float | None = None,
        endpoint: str | None = None,
    ) -> Any:
        location = parent.split("/locations/")[1]
        request = to_job_json(custom_job)
        self.before_create(str((request.get("labels") or {}).get(LABEL_REQUEST_ID, "")))

        def perform() -> Any:
            self._served(endpoint, "create", "parent", parent)
            accepted = quota_refused = False
            try:
                self._admit("submissions", location, SUBMISSIONS_PER_MINUTE)
                self._refuse("create", location, str((request.get("labels") or {}).get(LABEL_REQUEST_ID, "")))
                flex.refuse_create(self, request, location)
                if self.gpu_quota_full and _uses_gpus(request):
                    quota_refused = True
                    raise api.TooManyRequests(
                        "The following quota metrics exceed quota limits: "
                        "aiplatform.googleapis.com/custom_model_training_nvidia_a100_gpus"
                    )
                now = self.clock()
                name = f"{parent}/customJobs/{self._ids}"
                self._ids += 1
                job = SimJob(name, location, request, dict(request.get("labels") or {}), "JOB_STATE_QUEUED", now, now)
                self.jobs[name] = job
                self._jobs_of_parent[parent].append(job)
                self._jobs_of_request[job.request_id].append(job)
                self._indexed += 1
                self.fate(job)
                if job.flex_start:
                    flex.begin(self, job)
                elif not job.spot:
                    _on_demand(job)
                accepted = True
                return self._answer(job)
            finally:
                self.created.append(Create(self.clock(), location, request, accepted, quota_refused))

        return self._call("create", perform, timeout, location)

    def get_custom_job(
        self, name: str = "", *, request: Any = None, timeout: float | None = None, endpoint: str | None = None
    ) -> Any:
        name = name or (request or {}).get("name", "")
        location = _location(name)

        def perform() -> Any:
            self._served(endpoint, "get", "name", name)
            self._admit("crud", location, CRUD_PER_MINUTE)
            known = self.jobs.get(name)
            self._refuse("get", location, known.request_id if known else "")
            self._note_asked(location)
            return self._answer(self._known_job(name))

        return self._call("get", perform, timeout, location)

    def _answer(self, job: SimJob) -> Any:
        """`job.to_proto()`, a CustomJob of its own for each answer: built once per version of
        what it shows (a build converts every field through proto-plus) and copied for each
        answer (one protobuf call)."""
        from google.cloud.aiplatform_v1 import CustomJob

        shown = job.shown()
        built = self._answers.get(job.name)
        if built is None or built[0] != shown:
            built = self._answers[job.name] = (shown, CustomJob.pb(job.to_proto()))
        answer = type(built[1])()
        answer.CopyFrom(built[1])
        return CustomJob.wrap(answer)

    def list_custom_jobs(
        self, request: dict[str, Any] | None = None, *, timeout: float | None = None, endpoint: str | None = None
    ) -> ListPager:
        """A `ListCustomJobsPager`: the first page answered by this call, each next one a call of its
        own when the pager reaches it (`page_size` pages, as `list_page_size` says)."""
        request = request or {}
        parent = request["parent"]
        location = parent.split("/locations/")[1]
        query = request.get("filter", "")
        wanted = dict(re.findall(r'labels\.([\w-]+)="([^"]*)"', query))
        present = re.findall(r"labels\.([\w-]+):\*", query)
        excluded = set(re.findall(r'state!="(\w+)"', query))
        size = min(int(request.get("page_size") or self.page_size), self.page_size)
        request_wide = LABEL_REQUEST_ID in wanted and LABEL_ATTEMPT not in wanted
        self._listings += 1
        listing = self._listings

        def page(token: str) -> ListPage:
            def perform() -> ListPage:
                self._served(endpoint, "list", "parent", parent)
                if LABEL_REQUEST_ID in wanted and not token:
                    self.looked_up(location, wanted[LABEL_REQUEST_ID])
                self._admit("crud", location, CRUD_PER_MINUTE)
                self._refuse("list", location, wanted.get(LABEL_REQUEST_ID, ""), request_wide=request_wide)
                candidates: list[SimJob] | tuple[()] = list(self.jobs.values())  # a job put in `jobs` by hand (a test)
                if self._indexed == len(self.jobs):
                    rid = wanted.get(LABEL_REQUEST_ID)
                    candidates = (
                        self._jobs_of_parent.get(parent, ()) if rid is None else self._jobs_of_request.get(rid, ())
                    )
                # The token is a cursor in creation order: each page filters what it reaches when it
                # is asked, so a job created meanwhile comes on a later page and none is skipped.
                at = int(token or 0)
                found = []
                while at < len(candidates) and len(found) < size:
                    job = candidates[at]
                    at += 1
                    if (
                        job.name.startswith(parent + "/")
                        and all(job.labels.get(k) == v for k, v in wanted.items())
                        and all(k in job.labels for k in present)
                        and job.state not in excluded
                        and not job.deleted
                    ):
                        found.append(self._answer(job))
                following = str(at) if at < len(candidates) else ""
                if not following:  # the listing is whole: what a pass decides on is asked now
                    self._note_asked(location)
                return ListPage(found, following)

            return self._call("list", perform, timeout, location, query, listing)

        return ListPager(page, page(str(request.get("page_token") or "")))

    def cancel_custom_job(
        self, name: str = "", *, request: Any = None, timeout: float | None = None, endpoint: str | None = None
    ) -> None:
        name = name or (request or {}).get("name", "")

        def perform() -> None:
            self._served(endpoint, "cancel", "name", name)
            self._admit("crud", _location(name), CRUD_PER_MINUTE)
            known = self.jobs.get(name)
            self._refuse("cancel", _location(name), known.request_id if known else "")
            job = self._known_job(name)
            if job.state in TERMINAL_STATES:
                raise api.FailedPrecondition(f"{name} has ended")
            self._cancel(job)
            self.cancels.append((self.clock(), name, self.caller()))

        self._call("cancel", perform, timeout, _location(name), job=name)

    def _cancel(self, job: SimJob) -> None:
        if job.state != "JOB_STATE_CANCELLING":
            self.set_state(job, "JOB_STATE_CANCELLING")
            drawn = self.rng.choice((5, 30, 120, 400))  # drawn all the same: the seed's other draws stay
            job.next_change = self.clock() + timedelta(seconds=job.slow_end_seconds or drawn)

    # What people do in the console (sim.faults), not calls of the code.

    def add_by_hand(self, job: SimJob) -> None:
        """A job created in the console: listed like any other, no fate drawn for it."""
        self.jobs[job.name] = job
        self._jobs_of_parent[job.name.rsplit("/customJobs/", 1)[0]].append(job)
        self._jobs_of_request[job.request_id].append(job)
        self._indexed += 1

    def cancel_by_hand(self, job: SimJob) -> None:
        if job.live:
            self._cancel(job)

    def delete(self, job: SimJob) -> None:
        """Delete `job`: at once if it ended; a live one is cancelled and deleted once it ended."""
        if job.live:
            job.delete_when_ended = True
            self._cancel(job)
        else:
            job.deleted = True

    def changeover(self, location: str, which: str) -> float:
        """The extra wait of `location` before RUNNING ("pending") or after a preemption
        ("restart"), with its rare slow outliers; 0 where the seed drew no regional changeovers."""
        drawn = self.changeovers.get(location)
        if drawn is None or self.changeover_rng is None:
            return 0.0
        if self.changeover_rng.random() < drawn.outlier_rate:
            return float(drawn.outlier)
        return float(self.changeover_rng.choice(drawn.pending if which == "pending" else drawn.restart))

    # Vertex running its jobs.

    def set_state(self, job: SimJob, state: str, error: dict[str, Any] | None = None) -> None:
        now = self.clock()
        job.state = state
        self.state_changes += 1
        job.update_time = max(now, job.update_time + timedelta(microseconds=1))
        job.states.append((job.update_time, state))
        if state == "JOB_STATE_RUNNING" and job.start_time is None:
            job.start_time = job.update_time
        if state in TERMINAL_STATES:
            job.end_time = job.update_time
            job.next_change = None
        if error:
            job.error = error
        text, severity = SERVICE_LINES[state]
        self.emit(job, text, severity)

    def advance(self, job: SimJob) -> None:
        """Move `job` one step along its fate (called when its `next_change` is due)."""
        step = self.rng.choice((20, 60, 300, 900))
        job.next_change = self.clock() + timedelta(seconds=step)
        if job.state == "JOB_STATE_CANCELLING":
            self.runs(job, "cut")
            self.runs(job, "stop")
            self.set_state(job, "JOB_STATE_CANCELLED")
            job.deleted = job.delete_when_ended
        elif job.state == "JOB_STATE_QUEUED" and self._held_queued(job):
            return
        elif job.state == "JOB_STATE_QUEUED":
            self.set_state(job, "JOB_STATE_PENDING")
            if job.start_time is None:  # a restart's wait was drawn at its preemption
                job.next_change += timedelta(seconds=self.changeover(job.location, "pending"))
        elif job.state == "JOB_STATE_PENDING" and job.flex_start:
            flex.advance_wait(self, job)
        elif job.state == "JOB_STATE_PENDING":
            if job.fate == "hang":
                job.next_change = None  # waits for capacity until someone cancels it
                return
            back = self.spot_capacity_back(job.location) if job.spot else None
            if back is not None:
                job.next_change = back  # no Spot capacity in its location: waits PENDING until then
                return
            self.set_state(job, "JOB_STATE_RUNNING")
            if job.restart_waits and job.restart_waits[-1][1] is None:
                job.restart_waits[-1] = (job.restart_waits[-1][0], job.update_time)
            self.runs(job, "start")
        elif job.state == "JOB_STATE_RUNNING" and job.fate in TIMEOUT_FATES:
            # Its scheduling.timeout: stopped as a cancel stops it, FAILED with DEADLINE_EXCEEDED.
            self.runs(job, "cut" if job.fate == "timeout" else "stall")
            self.runs(job, "stop")
            self.set_state(job, "JOB_STATE_FAILED", DEADLINE_EXCEEDED_ERROR)
        elif job.state == "JOB_STATE_RUNNING":
            clean_end = not (job.preemptions > 0 or job.fate in ("stockout", "fail"))
            self.runs(job, "train" if clean_end else "cut")
            if job.preemptions > 0 or job.fate == "stockout":
                job.preemptions = max(0, job.preemptions - 1)
                reclaimed = reclaim(job, self.replicas)
                job.reclaimed_at.append(self.clock())
                reached = restarts_reached(job, reclaimed, self.replicas.spot_restart_count)
                if reached > MAX_RESTARTS:
                    self.runs(job, "stop")
                    self.set_state(job, "JOB_STATE_FAILED", STOCKOUT_ERROR)
                    return
                for replica in reclaimed:  # one line per reclaimed VM, as the emulator's rich mode writes
                    self.emit(
                        job,
                        f"The Spot VM of replica {replica} was preempted. Restarting the job "
                        f"(restart {reached} of {MAX_RESTARTS}).",
                        "WARNING",
                    )
                survivor = peer_exit(job, reclaimed, self.replicas)
                if survivor is not None and job.transient_exits > TRANSIENT_EXIT_RESTARTS:
                    self.runs(job, "stop")
                    self.set_state(job, "JOB_STATE_FAILED", peer_exit_error(survivor))
                    return
                job.next_change += timedelta(seconds=self.changeover(job.location, "restart"))
                if self.restart_state == "running":  # it waits for a machine again RUNNING
                    # On a Spot VM again: through an outage there, once it ends (as at PENDING).
                    back = self.spot_capacity_back(job.location)
                    job.next_change = max(job.next_change, back or job.next_change)
                    self.runs(job, "start")
                    return
                self.runs(job, "stop")  # no container runs until it is RUNNING again
                self.set_state(job, "JOB_STATE_PENDING" if self.restart_state == "pending" else "JOB_STATE_QUEUED")
                job.restart_waits.append((job.update_time, None))
                return
            self.runs(job, "stop")
            if job.fate == "fail":
                self.set_state(job, "JOB_STATE_FAILED", USER_ERROR)
            else:
                self.set_state(job, "JOB_STATE_SUCCEEDED")

    def _held_queued(self, job: SimJob) -> bool:
        """Whether `job` stays QUEUED for now: until its hold from its create has passed."""
        if job.queued_until is None:
            hold = self.queued_hold(job)
            job.queued_until = job.create_time + timedelta(seconds=hold)
            self.held_queued[job.request_id] += hold
            self.longest_held_queued = max(self.longest_held_queued, self.held_queued[job.request_id])
        if self.clock() >= job.queued_until:
            return False
        job.next_change = job.queued_until
        return True

    def live_jobs(self, request_id: str) -> list[SimJob]:
        return [job for job in self.jobs.values() if job.request_id == request_id and job.live]


def draw_restart_state(seed: int, mode: str | None = None) -> str:
    """The seed's `restart_state` (`mode` switches it), from a generator of its own."""
    if mode is None:
        mode = random.Random(f"{seed}:restart_state").choices(RESTART_STATES, RESTART_STATE_WEIGHTS)[0]
    if mode not in RESTART_STATES:
        raise ValueError(f"restart_state is one of {RESTART_STATES}, not {mode!r}")
    return mode


def draw_list_page_size(seed: int, size: int | None = None) -> int:
    """The seed's `list_page_size` (`size` switches it), from a generator of its own."""
    if size is None:
        size = random.Random(f"{seed}:list_page_size").choices(PAGE_SIZES, PAGE_SIZE_WEIGHTS)[0]
    if size < 1:
        raise ValueError(f"list_page_size is a positive number of jobs, not {size!r}")
    return size


def draw_queued_hold(seed: int, mode: str | None = None) -> Callable[[SimJob], float]:
    """The seed's `queued_hold` (`mode` switches it: "brief" or "long"), each job's hold drawn from
    a generator of its own (a seed's other draws stay where they were, whatever order jobs move in)."""
    if mode is None:
        mode = "long" if random.Random(f"{seed}:queued_hold").random() < QUEUED_HOLD_SHARE else "brief"
    if mode not in QUEUED_HOLD_MODES:
        raise ValueError(f"queued_hold is one of {QUEUED_HOLD_MODES}, not {mode!r}")
    if mode == "brief":
        return lambda job: 0.0
    return lambda job: random.Random(f"{seed}:queued_hold:{job.name}").choice(QUEUED_HOLDS)


SERVICE_LINES = {
    "JOB_STATE_QUEUED": ("Waiting for job to be provisioned.", "INFO"),
    "JOB_STATE_PENDING": ("Job is preparing.", "INFO"),
    "JOB_STATE_RUNNING": ("Job is running.", "INFO"),
    "JOB_STATE_SUCCEEDED": ("Job completed successfully.", "INFO"),
    "JOB_STATE_FAILED": ("Job failed.", "ERROR"),
    "JOB_STATE_CANCELLING": ("Job is being cancelled.", "INFO"),
    "JOB_STATE_CANCELLED": ("Job was cancelled.", "INFO"),
}


def _on_demand(job: SimJob) -> None:
    """A new STANDARD job: preemption and STOCKOUT are Spot's ("When Spot VMs are preempted, the
    [...] job fails with a STOCKOUT error", https://cloud.google.com/vertex-ai/docs/training/use-spot-vms),
    so the attempt's drawn preemptions and stockout never apply to an on-demand VM; a wait for
    capacity (`hang`), a failure and a timeout still may."""
    job.preemptions = 0
    if job.fate == "stockout":
        job.fate = "succeed"


def _location(name: str) -> str:
    return name.split("/locations/")[1].split("/")[0] if "/locations/" in name else ""


def _uses_gpus(request: dict[str, Any]) -> bool:
    pools = (request.get("jobSpec") or {}).get("workerPoolSpecs") or []
    return any((pool.get("machineSpec") or {}).get("acceleratorCount") for pool in pools)
