"""The simulator's stand-ins keep their semantics where they were made fast: lifecycle rules
applied through the name index, listings that hand out stored objects without copying them,
Vertex listings through the per-parent and per-request indexes, the synchronous pool's map, a
listing's range found by bisection, a Vertex job's answer copied from the one built for its state."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from sim.gcs import MemoryStorage
from sim.virtual import EPOCH_OF_SIMULATION, SyncExecutor, VirtualClock
from sim.world import World, lifecycle_rules


def test_lifecycle_deletes_exactly_what_the_rules_judge() -> None:
    clock = VirtualClock(EPOCH_OF_SIMULATION)
    storage = MemoryStorage(clock.now)
    bucket = storage.client().bucket("state")
    names = [
        "pacing/slots/a",
        "pacing/us/burst.json",
        "pacing/us/drainer.json",
        "dedupe/x",
        "deadletters/redriven/m",
        "rejections/r",
        "fleet/o",
        "archive/r1.json",
        "requests/r1.json",
        "zzz",
    ]
    for name in names:  # one written each day, so that ages differ
        blob = bucket.blob(name)
        blob.custom_time = clock.now() if name.startswith("dedupe/") else None
        blob.upload_from_string(b"x")
        clock.advance(86400)
    clock.advance(30 * 86400)
    rules = list(lifecycle_rules())
    table = storage.objects("state")
    judged = {
        name
        for name, obj in table.items()
        if any(r.deletes(name, created=obj.time_created, custom_time=obj.custom_time, now=clock.now()) for r in rules)
    }
    assert judged and judged != set(names)  # the case tells deleted from kept

    gone = storage.apply_lifecycle("state", rules)

    assert set(gone) == judged
    assert set(table) == set(names) - judged


def test_a_listing_keeps_what_it_listed_when_the_object_is_patched_after() -> None:
    storage = MemoryStorage(VirtualClock(EPOCH_OF_SIMULATION).now)
    bucket = storage.client().bucket("state")
    blob = bucket.blob("requests/r1.json")
    blob.metadata = {"status": "RUNNING"}
    blob.upload_from_string(b"{}")
    listing = storage.client().list_blobs(bucket, prefix="requests/")

    blob.metadata = {"status": "SUCCEEDED"}
    blob.patch()

    [listed] = list(listing)
    assert listed.metadata == {"status": "RUNNING"} and listed.metageneration == 1
    now = bucket.get_blob("requests/r1.json")
    assert now is not None and now.metadata == {"status": "SUCCEEDED"} and now.metageneration == 2


def _create(world: World, request_id: str, location: str) -> str:
    from google.cloud.aiplatform_v1 import CustomJob

    job = CustomJob(display_name=request_id, labels={"spotjobs-request-id": request_id, "spotjobs-attempt": "1"})
    parent = f"projects/{world.settings.project}/locations/{location}"
    return world.vertex.create_custom_job(parent=parent, custom_job=job).name


def _listed(world: World, location: str, query: str) -> list[str]:
    parent = f"projects/{world.settings.project}/locations/{location}"
    return [job.name for job in world.vertex.list_custom_jobs({"parent": parent, "filter": query})]


def test_a_listing_finds_by_bisection_what_a_walk_through_the_names_finds() -> None:
    rng = random.Random(43)
    storage = MemoryStorage(VirtualClock(EPOCH_OF_SIMULATION).now)
    bucket = storage.client().bucket("state")
    pieces = ["a", "b", "a/", "ab", "/", "z", chr(0x10FFFF)]  # the last has no next character
    for name in sorted({"".join(rng.choices(pieces, k=rng.randrange(1, 5))) for _ in range(300)}):
        bucket.blob(name).upload_from_string(b"x")
    table = storage.objects("state")

    def walked(low: str, prefix: str, max_results: int | None) -> list[str]:
        found: list[str] = []
        for name in table.names_from(low):
            if (prefix and not name.startswith(prefix)) or (max_results is not None and len(found) > max_results):
                break
            found.append(name)
        return found

    for _ in range(3000):
        prefix = rng.choice(["", "".join(rng.choices(pieces, k=rng.randrange(1, 3)))])
        low = max(prefix, rng.choice(["", "".join(rng.choices(pieces, k=rng.randrange(1, 4)))]))
        max_results = rng.choice([None, -1, 0, 1, 2, 5, 1000])
        listed = [name for name, _ in table.listed(low, prefix, max_results)]
        assert listed == walked(low, prefix, max_results), (low, prefix, max_results)


def test_a_vertex_job_answered_twice_is_two_objects_and_shows_its_changes() -> None:
    world = World(0)
    world.run()
    job = next(iter(world.vertex.jobs.values()))
    answer = world.vertex._answer  # noqa: SLF001
    first, second = answer(job), answer(job)
    assert first == second == job.to_proto() and first is not second
    first.labels["x"] = "y"  # a caller's change stays its own
    assert "x" not in answer(job).labels
    job.state, job.error = "JOB_STATE_FAILED", {"code": 3, "message": "changed"}
    job.labels["added"] = "later"
    assert answer(job) == job.to_proto()
    assert (answer(job).state.name, answer(job).error.message, answer(job).labels["added"]) == (
        "JOB_STATE_FAILED",
        "changed",
        "later",
    )


def test_vertex_listings_find_the_jobs_of_their_parent_and_request() -> None:
    world = World(0)
    world.vertex.fate = lambda job: None  # no fate drawn: these jobs are not the workload's
    r1_here = _create(world, "r1", "us-central1")
    r2_here = _create(world, "r2", "us-central1")
    r1_there = _create(world, "r1", "europe-west4")

    assert _listed(world, "us-central1", 'labels.spotjobs-request-id="r1"') == [r1_here]
    assert _listed(world, "us-central1", "labels.spotjobs-request-id:*") == [r1_here, r2_here]
    assert _listed(world, "europe-west4", 'labels.spotjobs-request-id="r1"') == [r1_there]
    assert _listed(world, "europe-west4", 'labels.spotjobs-request-id="r2"') == []

    by_hand = world.vertex.jobs[r2_here]  # a test's job, put in `jobs` without a create
    moved = f"projects/{world.settings.project}/locations/europe-west4/customJobs/1"
    world.vertex.jobs[moved] = type(by_hand)(**{**by_hand.__dict__, "name": moved})
    assert _listed(world, "europe-west4", 'labels.spotjobs-request-id="r2"') == [moved]


def test_the_synchronous_pools_map_runs_every_call_and_raises_in_order() -> None:
    ran: list[int] = []

    def call(n: int) -> int:
        ran.append(n)
        if n == 2:
            raise ValueError("two")
        return n * 10

    results = SyncExecutor().map(call, [1, 2, 3])

    assert ran == [1, 2, 3]  # every call ran before any result was read, as in a pool
    assert next(results) == 10
    with pytest.raises(ValueError, match="two"):
        next(results)


def test_a_later_patch_of_a_listed_object_leaves_the_clock_alone() -> None:
    clock = VirtualClock(EPOCH_OF_SIMULATION)
    storage = MemoryStorage(clock.now)
    blob = storage.client().bucket("state").blob("a")
    blob.upload_from_string(b"x")
    written = blob.updated
    clock.advance(timedelta(minutes=5).total_seconds())

    blob.patch()

    assert blob.updated == written + timedelta(minutes=5) and blob.time_created == written


def test_flex_start_waits_for_its_capacity_then_runs_and_is_never_preempted() -> None:
    from sim import flex
    from tests.support.sim_world import job

    world = World(0)
    world.vertex.flex_wait = lambda sim_job: 1800.0
    waiting = job(world, "r1", 1, "JOB_STATE_PENDING", strategy="FLEX_START")
    waiting.fate, waiting.preemptions = "stockout", 3  # Spot's fates: none of them is a FLEX_START job's
    flex.begin(world.vertex, waiting)
    assert (waiting.fate, waiting.preemptions, waiting.flex_capacity_after) == ("succeed", 0, 1800.0)

    world.vertex.advance(waiting)
    assert waiting.state == "JOB_STATE_PENDING" and waiting.next_change == world.clock.now() + timedelta(seconds=1800)
    world.clock.advance(1800)
    world.vertex.advance(waiting)
    assert waiting.state == "JOB_STATE_RUNNING"
    world.clock.advance(900)
    world.vertex.advance(waiting)

    assert waiting.state == "JOB_STATE_SUCCEEDED" and waiting.restarts == waiting.vms_reclaimed == 0


def test_flex_start_whose_capacity_never_comes_fails_when_its_wait_runs_out() -> None:
    from sim import flex
    from tests.support.sim_world import job

    world = World(0)
    world.vertex.flex_wait = lambda sim_job: None
    waiting = job(world, "r1", 1, "JOB_STATE_PENDING", strategy="FLEX_START")
    waiting.request["jobSpec"]["scheduling"]["maxWaitDuration"] = "3600s"
    flex.begin(world.vertex, waiting)
    world.vertex.advance(waiting)
    assert waiting.next_change == world.clock.now() + timedelta(seconds=3600)
    world.clock.advance(3600)

    world.vertex.advance(waiting)

    assert waiting.state == "JOB_STATE_FAILED" and waiting.start_time is None
    assert waiting.error == {
        "code": 8,
        "message": "The resources requested by this FLEX_START job were not available within its "
        "maxWaitDuration (3600s).",
    }
    assert flex.wait_expired(waiting)


def test_flex_start_create_refuses_a_job_breaking_a_documented_requirement() -> None:
    from google.api_core import exceptions as api

    from sim import flex
    from tests.support.sim_world import job

    world = World(0)
    cpu = job(world, "r1", 1, strategy="FLEX_START").request  # n1-standard-4: no GPU
    with pytest.raises(api.InvalidArgument, match="requires L4, A100, H100, H200 or B200 GPUs"):
        flex.refuse_create(world.vertex, cpu, "us-central1")
    assert [(r.operation, r.request_id, r.code) for r in world.vertex.refused] == [("create", "r1", 400)]
    pool = cpu["jobSpec"]["workerPoolSpecs"][0]
    pool["machineSpec"] = {
        "machineType": "a2-highgpu-1g",
        "acceleratorType": "NVIDIA_TESLA_A100",
        "acceleratorCount": 1,
    }
    flex.refuse_create(world.vertex, cpu, "us-central1")  # meets them all
    cpu["jobSpec"]["scheduling"]["timeout"] = f"{7 * 86400 + 1}s"
    with pytest.raises(api.InvalidArgument, match="timeout of 7 days or less"):
        flex.refuse_create(world.vertex, cpu, "us-central1")


def test_a_request_whose_h100_has_no_spot_runs_on_its_flex_start_alternative() -> None:
    """The workload gives some capacity requests an A100 alternative on FLEX_START (sim/flex.py):
    seed 5's r1-envelope waits for H100 Spot, is moved, and its next attempt runs there."""
    world = World(5)
    assert world.run() == []
    runs = sorted(
        (
            job.attempt,
            job.request["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"],
            job.request["jobSpec"].get("scheduling", {}).get("strategy"),
            job.state,
        )
        for job in world.vertex.jobs.values()
        if job.request_id == "r1-envelope"
    )
    assert runs == [
        (1, "a3-highgpu-8g", "SPOT", "JOB_STATE_CANCELLED"),
        (2, "a2-ultragpu-8g", "FLEX_START", "JOB_STATE_SUCCEEDED"),
    ]


def test_the_queued_hold_is_a_named_switchable_assumption() -> None:
    """`queued_hold` (sim/vertex.py): Google documents no length for QUEUED. `brief` holds no job;
    `long` holds each job one of `QUEUED_HOLDS`, the same for a job whatever order jobs move in;
    a seed draws its mode unless a world is given one."""
    from sim.vertex import QUEUED_HOLDS, draw_queued_hold
    from tests.support.sim_world import job

    world = World(0, queued_hold="long")
    jobs = [job(world, f"r{n}", 1, "JOB_STATE_QUEUED") for n in range(20)]
    holds = [world.vertex.queued_hold(j) for j in jobs]
    assert set(holds) <= set(QUEUED_HOLDS) and len(set(holds)) > 1
    assert [draw_queued_hold(0, "long")(j) for j in reversed(jobs)] == holds[::-1]
    assert {draw_queued_hold(0, "brief")(j) for j in jobs} == {0.0}
    assert World(0, queued_hold="brief").vertex.queued_hold(jobs[0]) == 0.0
    with pytest.raises(ValueError, match="queued_hold"):
        draw_queued_hold(0, "forever")


def test_a_trainer_commits_fractions_of_its_requests_declared_total_and_finishes_at_it() -> None:
    """A request that declares `total_steps` (a deadline's) takes several commits, each a tenth to
    three tenths of its total: a run cut short by a cancel stops below it; a run Vertex ends
    cleanly trains on to the total, committing on the way, and writes `run_finished` there, as
    the kit does."""
    from spotjobs_kit.lines import parse_kit_line

    from tests.support.sim_world import trained

    world = World(0)
    world.trainer.total_steps_of = {f"r{n}": 100 for n in range(12)}.get
    printed: list[str] = []
    world.trainer.kit_lines = True
    world.trainer.emit = lambda _job, text, _severity: printed.append(text)
    for n in range(12):
        running = trained(world, f"r{n}")
        world.trainer.start(running)
        running.state = "JOB_STATE_CANCELLING"
        for _ in range(n % 3 * 4):  # cancels cut it short again and again: never at the total
            assert world.trainer.train(running, ends_in_a_cut=True) is False
        folder = world.trainer.job_folder(running)
        assert all(save.step < 100 for save in world.trainer.saves.get(folder, {}).values())
        running.state = "JOB_STATE_RUNNING"
        assert world.trainer.train(running, ends_in_a_cut=False) is True
        steps = sorted(save.step for save in world.trainer.saves[folder].values())
        assert steps[-1] == 100 and len(steps) >= 4, steps
        assert all(0 < later - earlier <= 30 for earlier, later in zip([0, *steps[:-1]], steps, strict=True)), steps
    lines = [kit for kit in map(parse_kit_line, printed) if kit is not None]
    assert {kit.step for kit in lines if kit.event == "run_finished"} == {100}
    assert max(kit.step for kit in lines if kit.event == "checkpoint_committed") == 100


def test_a_run_that_commits_its_declared_total_ends_its_job_mostly_before_the_cut() -> None:
    """Past the total the training is done: a run that commits it just before a preemption or a
    stock-out mostly exits 0 first (the world ends its job SUCCEEDED, the cuts still to come
    dropped); the rest are cut between the commit and the exit (all the work committed, the job
    not ended: seed 4568's window), and the next run, resumed at the total, is done at once."""
    from tests.support.sim_world import trained

    world = World(0)
    world.trainer.total_steps_of = {f"r{n}": 100 for n in range(20)}.get
    ended = []
    for n in range(20):
        running = trained(world, f"r{n}")
        world.trainer.save(running, 95, torn=False)
        running.fate = "stockout"  # cut at every change until Vertex gives up
        world.vertex.runs(running, "start")
        while running.state == "JOB_STATE_RUNNING":
            world.vertex.advance(running)
        assert world.trainer.newest_whole(world.trainer.job_folder(running)).step == 100
        ended.append((running.state, running.restarts > 0))
    assert set(ended) == {("JOB_STATE_SUCCEEDED", False), ("JOB_STATE_SUCCEEDED", True)}, ended


def test_a_trainer_without_a_declared_total_strides_as_before() -> None:
    """A request that declares no `total_steps` keeps its strides of 100, 200 or 500 steps and
    never finishes by itself: Vertex's fate ends its job."""
    from tests.support.sim_world import trained

    world = World(0)
    running = trained(world, "r1")
    world.trainer.start(running)
    for _ in range(10):
        assert not world.trainer.train(running, ends_in_a_cut=True)
    world.trainer.train(running, ends_in_a_cut=False)
    steps = sorted(save.step for save in world.trainer.saves[world.trainer.job_folder(running)].values())
    assert {later - earlier for earlier, later in zip([0, *steps[:-1]], steps, strict=True)} <= {100, 200, 500}
    assert len(steps) >= 11 and steps[-1] > 1000


def test_the_declared_totals_are_each_requests_own_publishers() -> None:
    import json

    from sim.trainer import declared_total_steps
    from sim.workload import Arrival

    def arrival(body: dict[str, Any], own: frozenset[str] | None = None) -> Arrival:
        return Arrival(0, EPOCH_OF_SIMULATION, json.dumps(body).encode(), {}, "test", own=own)

    arrivals = [
        arrival({"request_id": "r1", "total_steps": 100}),
        arrival({"request_id": "r1", "total_steps": 7}, own=frozenset()),  # a hostile publisher's, under r1's id
        arrival({"request_id": "r2", "total_steps": 1000}, own=frozenset({"r2"})),
        arrival({"request_id": "r3"}),
        arrival({"request_id": "r4", "total_steps": True}),
        Arrival(0, EPOCH_OF_SIMULATION, b"not json", {}, "test"),
    ]
    assert declared_total_steps(arrivals) == {"r1": 100, "r2": 1000}


@pytest.mark.parametrize(("assumption", "written"), [("preempted", ["preempted"]), ("silent", [])])
def test_a_cancel_stops_a_running_trainer_as_the_cancel_sigterm_assumption_says(
    assumption: str, written: list[str]
) -> None:
    """Google documents no signal at a cancel; the emulator sends SIGTERM, and the kit's handler
    writes `preempted` (`cancel_sigterm`, `preempted` by default): the run the cancel ends says so, or
    says nothing where the assumption is `silent`. A job cancelled before it ran writes nothing."""
    from spotjobs_kit.lines import parse_kit_line

    from tests.support.sim_world import trained

    world = World(0, cancel_sigterm=assumption)
    printed: list[str] = []
    world.trainer.kit_lines = True
    world.trainer.emit = lambda _job, text, _severity: printed.append(text)
    running = trained(world, "r0")
    world.vertex.runs(running, "start")
    world.vertex.cancel_by_hand(running)
    while running.state != "JOB_STATE_CANCELLED":
        world.vertex.advance(running)
    never_ran = trained(world, "r1")
    world.vertex.cancel_by_hand(never_ran)
    while never_ran.state != "JOB_STATE_CANCELLED":
        world.vertex.advance(never_ran)
    ends = [kit for kit in map(parse_kit_line, printed) if kit is not None and kit.event != "checkpoint_committed"]
    assert [(kit.request_id, kit.event) for kit in ends] == [("r0", "run_started")] + [("r0", e) for e in written]


def _pool_time(workers: int, calls: int, *, latency: float, nested: bool = False, submitted: bool = False) -> timedelta:
    """The virtual time a task takes to map (or `submitted`: submit one by one) `calls` round trips
    of `latency` over a pool of `workers` (each call inside a pool of its own of one round trip,
    when `nested`), as one of the functions' pools does (`shared.found_jobs`' is the world's
    `SyncExecutor`, installed)."""
    from greenlet import greenlet

    import shared.found_jobs
    from sim import virtual
    from sim.world import Task

    world = World(0)
    world.latencies = (latency,)
    world._loop = None  # noqa: SLF001 - no phase runs: every wait goes back to this test

    def read(n: int) -> int:
        return world.io("gcs", "read", lambda: n)

    def call(n: int) -> int:
        if nested:
            with shared.found_jobs.ThreadPoolExecutor(4) as inner:
                return sum(inner.map(read, [n]))
        return read(n)

    results: list[int] = []

    def body() -> None:
        with shared.found_jobs.ThreadPoolExecutor(workers) as pool:
            if submitted:
                futures = [pool.submit(call, n) for n in range(calls)]
            else:
                results.extend(pool.map(call, range(calls)))
        if submitted:
            results.extend(future.result() for future in futures)

    virtual.install(world)
    try:
        task = Task("reconcile", body, faulty=False)
        task.runner = greenlet(task.body)
        world.tasks.append(task)
        started = world.clock.now()
        while not task.runner.dead:  # the scheduler's part: the clock moves to each wake
            if task.wake_at is not None:
                world.clock.advance_to(task.wake_at)
            world._resume(task)  # noqa: SLF001
    finally:
        virtual.uninstall()
    assert results == [n for n in range(calls)]  # every call ran, its result in order
    return world.clock.now() - started


def test_a_pools_workers_overlap_their_round_trips_as_threads_do() -> None:
    """Production's pools are threads of one instance (ThreadPoolExecutor in shared/reconcile.py,
    shared/found_jobs.py, shared/ledger/retention.py): eight calls of 2 s on eight workers take 2 s,
    not 16 (seed 10348: a reconcile pass's serial round trips outgrew its call window)."""
    assert _pool_time(8, 8, latency=2.0) == timedelta(seconds=2)
    assert _pool_time(8, 16, latency=2.0) == timedelta(seconds=4)  # two rounds of eight
    assert _pool_time(8, 3, latency=2.0) == timedelta(seconds=2)
    assert _pool_time(1, 8, latency=2.0) == timedelta(seconds=16)  # one worker: one after another
    assert _pool_time(8, 8, latency=2.0, nested=True) == timedelta(seconds=2)


def test_a_pools_submitted_calls_overlap_their_round_trips_as_threads_do() -> None:
    """A pool's `submit` (shared/pruning/execute.py's `run_tasks`) runs each call on the worker free
    first, as `map` does: eight calls of 2 s on eight workers take 2 s, and the pool's `with` block
    ends when its last worker is done. Until 2026-12-07 a submit ran on the task's own time: 16 s."""
    assert _pool_time(8, 8, latency=2.0, submitted=True) == timedelta(seconds=2)
    assert _pool_time(8, 16, latency=2.0, submitted=True) == timedelta(seconds=4)
    assert _pool_time(8, 3, latency=2.0, submitted=True) == timedelta(seconds=2)
    assert _pool_time(1, 8, latency=2.0, submitted=True) == timedelta(seconds=16)
    assert _pool_time(8, 8, latency=2.0, nested=True, submitted=True) == timedelta(seconds=2)


def test_every_module_of_the_functions_with_a_module_level_thread_pool_runs_on_the_worlds_pool() -> None:
    # A pool the world does not replace runs real threads: their order, and so a seed's replay,
    # is the OS's (a module split off shared/reconcile.py once slipped past it).
    import re
    from pathlib import Path

    from sim.virtual import THREAD_USERS

    imports_the_pool = re.compile(r"^from concurrent\.futures import .*\bThreadPoolExecutor\b", re.MULTILINE)

    root = Path(__file__).resolve().parents[2]
    pooled = {
        ".".join(path.relative_to(root).with_suffix("").parts)
        for folder in ("shared", "functions")
        for path in (root / folder).rglob("*.py")
        if imports_the_pool.search(path.read_text())
    }
    assert pooled and pooled == set(THREAD_USERS)


def test_a_vertex_listing_answers_in_pages_each_a_call_of_its_own() -> None:
    """`list_page_size` (sim/vertex.py): customJobs.list answers a pager, as the client's
    `ListCustomJobsPager`: the call answers the first page, and each next one is a call of its own,
    sent when the pager reaches it, so a fault or quota may land on it; a page holds at most the
    seed's page size, whatever `page_size` asks (AIP-158: fewer than asked)."""
    from google.api_core import exceptions as api

    world = World(0, list_page_size=2)
    world.vertex.fate = lambda job: None
    names = [_create(world, f"r{n}", "us-central1") for n in range(5)]
    calls: list[str] = []
    served = world.vertex.io

    def counted(service: str, operation: str, perform: Any, **kwargs: Any) -> Any:
        calls.append(operation)
        if operation == "list" and calls.count("list") == 3:
            raise api.ServiceUnavailable("the third page's 503")
        return served(service, operation, perform, **kwargs)

    world.vertex.io = counted
    parent = f"projects/{world.settings.project}/locations/us-central1"
    pager = world.vertex.list_custom_jobs(
        {"parent": parent, "filter": "labels.spotjobs-request-id:*", "page_size": 100}
    )
    assert calls == ["list"] and [job.name for job in pager.custom_jobs] == names[:2] and pager.next_page_token

    listed = []
    with pytest.raises(api.ServiceUnavailable):
        listed.extend(job.name for job in pager)
    assert listed == names[:4] and calls == ["list"] * 3  # the second page came; the third failed

    world.vertex.io = served
    pages = list(world.vertex.list_custom_jobs({"parent": parent, "filter": ""}).pages)
    assert [len(page.custom_jobs) for page in pages] == [2, 2, 1] and not pages[-1].next_page_token
    assert [job.name for job in World(0, list_page_size=50).vertex.list_custom_jobs({"parent": parent})] == []


def test_a_job_created_or_ended_between_pages_is_listed_as_its_page_finds_it() -> None:
    """A page's filter is judged when the page is asked, from a cursor in creation order: a job
    that was listed stays listed, a job created meanwhile comes on a later page, none is skipped."""
    world = World(0, list_page_size=2)
    world.vertex.fate = lambda job: None
    names = [_create(world, f"r{n}", "us-central1") for n in range(3)]
    parent = f"projects/{world.settings.project}/locations/us-central1"
    pager = world.vertex.list_custom_jobs({"parent": parent, "filter": 'state!="JOB_STATE_CANCELLED"'})
    world.vertex.set_state(world.vertex.jobs[names[0]], "JOB_STATE_CANCELLED")  # on the first page already
    world.vertex.set_state(world.vertex.jobs[names[2]], "JOB_STATE_CANCELLED")  # its page not asked yet
    later = _create(world, "r3", "us-central1")

    assert [job.name for job in pager] == [names[0], names[1], later]


def test_the_list_page_size_is_a_named_switchable_assumption() -> None:
    from sim.vertex import PAGE_SIZES, draw_list_page_size

    drawn = [draw_list_page_size(seed) for seed in range(60)]
    assert set(drawn) <= set(PAGE_SIZES) and min(drawn) == 1 and len(set(drawn)) > 2
    # A pass lists a location's few unfinished jobs: pages of one or two in many seeds make later pages common.
    assert sum(size <= 2 for size in drawn) >= len(drawn) // 3
    assert drawn == [World(seed).vertex.page_size for seed in range(60)]
    assert World(3, list_page_size=7).vertex.page_size == 7
    with pytest.raises(ValueError, match="list_page_size"):
        draw_list_page_size(0, 0)
