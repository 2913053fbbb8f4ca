"""Shared fixtures. `stack` starts the embedded stack once per test session (free ports, so two
runs can coexist) and stops it, with every child process, at the end."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

EVENTS_DIR = Path(__file__).parent / "events"

# Settings the functions under test run with: short leases and waits keep the suite fast,
# everything else is production's default.
TEST_FUNCTION_ENV = {
    "SPOTJOBS_CLAIM_LEASE_SECONDS": "5",
    "SPOTJOBS_CREATE_TIMEOUT_SECONDS": "1",
    # The emulator's lists do not lag unless a test asks (a list lag fault, with its own stack and
    # setting: tests/e2e/test_list_lag.py); production's 60 s would make every takeover after a
    # create in doubt wait a minute.
    "SPOTJOBS_LIST_LAG_SECONDS": "2",
    "SPOTJOBS_LOG_LEVEL": "DEBUG",
    # Production-like: an image allowlist, which every test image lies inside.
    "SPOTJOBS_ALLOWED_IMAGE_PREFIXES": "us-docker.pkg.dev/",
    # Enabled explicitly for the fallback tests (a deployment allows no fallback by default).
    "SPOTJOBS_ALLOWED_FALLBACK_STRATEGIES": "STANDARD",
    # Retraining triggers: windows close one second after their end; definitions are re-read at
    # every message, so a test's `triggers apply` takes effect at once.
    "SPOTJOBS_TRIGGER_SETTLE_SECONDS": "1",
    "SPOTJOBS_TRIGGER_CACHE_SECONDS": "0",
    # A SUCCEEDED job whose kit saw its last run preempted waits this long for later kit lines
    # (production: 300 s); the stack delivers them within a second or two.
    "SPOTJOBS_KIT_LINES_SETTLE_SECONDS": "3",
    # The deadline rule's checkpoint interval until a request's trainer has committed twice
    # (production: an hour). The stack's trainers commit every second or so; with an hour, a
    # deadline request with an hour of slack would sit inside its safety net until two commits
    # were seen, and a capacity gap before then (a loaded machine) would switch it.
    "SPOTJOBS_CHECKPOINT_PRIOR_SECONDS": "60",
}

# For stacks whose tests take Vertex down before a request's first delivery: a delivery later than
# the claim lease first asks Vertex for the request's jobs (a replay whose record was lost:
# shared/redeliveries.py), so with Vertex down it claims nothing and the message dead-letters
# without a claim. On a loaded CI machine a first push came more than 5 s after its publish.
OUTAGE_FUNCTION_ENV = {**TEST_FUNCTION_ENV, "SPOTJOBS_CLAIM_LEASE_SECONDS": "30"}


@contextlib.contextmanager
def isolated_stack(**options: object) -> Iterator[Stack]:  # noqa: F821
    """Start an embedded stack and point this process's clients at it, restoring both after.

    Stacks export their emulator hosts into os.environ (client libraries read them there), so a
    second stack (the chaos tests') must not outlive its module: this puts everything back."""
    from devstack.stack import Stack, StackOptions
    from shared import settings, wiring
    from shared.adapters import clients

    defaults: dict[str, object] = {
        "function_env": TEST_FUNCTION_ENV,
        # Failed deliveries come back about once a second here (no retry policy: the emulator
        # stalls with one, devstack/pubsub_wiring.py); twenty outlast a 5 s claim lease.
        "max_delivery_attempts": 20,
        # Vertex sets a failed job's error "about a minute" after it ends (the documented
        # profile's default); half a second keeps that ordering and the suite fast.
        "vertex_args": ("--grace-seconds", "0.5", "--error-delay-seconds", "0.5"),
    }
    saved = dict(os.environ)

    def reset_caches() -> None:
        settings.get_settings.cache_clear()
        for cached in (clients.storage_client, clients.publisher, clients.job_service, wiring.ports_for):
            cached.cache_clear()

    stack = Stack(StackOptions(**{**defaults, **options})).start()
    os.environ.update(stack.env)
    reset_caches()
    try:
        yield stack
    finally:
        stack.stop()
        os.environ.clear()
        os.environ.update(saved)
        reset_caches()


@contextlib.contextmanager
def vertex_signals(stack: Stack, profile: str) -> Iterator[None]:  # noqa: F821
    """Jobs created inside get the Vertex emulator's `profile` ("documented" or "rich"); the
    stack's own profile is back afterwards. For the tests of the optional signals, which opt in
    to "rich" on the shared stack."""
    stack.vertex_control("POST", "/emulator/v1/signals", {"profile": profile})
    try:
        yield
    finally:
        stack.vertex_control("POST", "/emulator/v1/signals", {"profile": stack.options.vertex_signals})


@pytest.fixture(scope="session")
def api_calls_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session stack's functions record the Google API calls they make
    (tests/integration/test_permissions.py compares them with Terraform's grants). Under
    pytest-xdist every worker's session stack records into one folder of the run (appends of a
    line each), so the `run_last` test reads the calls of the whole run, not of its worker's."""
    if XDIST_WORKER is None:
        return tmp_path_factory.mktemp("api-calls")
    shared = tmp_path_factory.getbasetemp().parent / "api-calls"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def stack(api_calls_dir: Path) -> Iterator[Stack]:  # noqa: F821
    with isolated_stack(record_api_calls=api_calls_dir) as running:
        yield running


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `run_last` run after every other test (the permissions test reads what the
    whole session's stack tests made the functions call). Under pytest-xdist they are also the
    last handed out, and wait for the other workers (pytest_runtest_protocol below).

    The others go longest first, so no long chain starts at the end while the other workers idle:
    the framework tests, then the modules with a fixture of their own (a stack or an install, run
    whole on one worker), then the tests on the session's stack, then the rest. A stable sort:
    each module keeps its order. The simulator's seeds, which only compute, are spread among the
    stack tests and modules, which mostly wait: alone, these kept the CPU a quarter idle for minutes."""
    items.sort(key=handout_rank)
    items[:] = spread_among_stack_tests(items, [item for item in items if is_simulation_seed(item.nodeid)])


def spread_among_stack_tests(items: list[pytest.Item], spread: list[pytest.Item]) -> list[pytest.Item]:
    """`items` with those of `spread` moved evenly between the units that wait on a stack: each
    stack test (rank 2), and each module with a fixture of its own (rank 1) after its last test."""
    moved = {id(item) for item in spread}
    ordered = [item for item in items if id(item) not in moved]
    ends_a_unit = [
        handout_rank(item) == 2 or (handout_rank(item) == 1 and (following is None or following.path != item.path))
        for item, following in zip(ordered, [*ordered[1:], None])
    ]
    units = sum(ends_a_unit)
    if not units:
        return items
    result: list[pytest.Item] = []
    seen = placed = 0
    for item, ends in zip(ordered, ends_a_unit):
        result.append(item)
        if ends:
            seen += 1
            due = round(seen * len(spread) / units)
            result.extend(spread[placed:due])
            placed = due
    return result + spread[placed:]


def handout_rank(item: pytest.Item) -> int:
    if item.get_closest_marker("run_last") is not None:
        return 4
    if is_framework_test(item.nodeid):
        return 0
    if has_module_fixture(item.path):
        return 1
    return 2 if item.get_closest_marker("stack") is not None else 3


# The framework tests (tests/frameworks/) train in real processes on the CPU: at most this many
# run at once (as many as a 2-vCPU machine has cores), so they never take every worker and
# starve the stack tests' waits.
FRAMEWORK_LINES = 2


def is_framework_test(nodeid: str) -> bool:
    return nodeid.startswith("tests/frameworks/")


def is_simulation_seed(nodeid: str) -> bool:
    return nodeid.startswith("tests/simulation/test_seeds.py::")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """`-n N` (xdist's --dist load) hands tests out one at a time, in the order
    pytest_collection_modifyitems gives them, except that a module with a module-scoped fixture
    of its own (a stack of its own, a built install) goes to one worker whole, so that fixture is
    built once, and framework tests go to at most FRAMEWORK_LINES workers at once (a worker asking
    for work meanwhile gets the next other test). (xdist's --dist
    loadgroup would group with marks, but its renaming of test ids has no effect under pytest 9.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # In collection order, so the `run_last` tests (sorted last) are the last handed out.
    config.option.loadscopereorder = False

    class GroupingScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if has_module_fixture(config.rootpath / module) else nodeid

        def _framework_lines(self) -> set[object]:
            """The workers holding an unfinished framework test: each runs its tests one at a
            time, so it is one line however many it holds."""
            return {
                node
                for node, assigned in self.assigned_work.items()
                for scope, work in assigned.items()
                if is_framework_test(scope) and not all(work.values())
            }

        def _assign_work_unit(self, node: object) -> None:
            """The first unit of the queue that may start now (moved to the queue's front): a
            framework test goes to a worker that already has a line, or opens one if any is free.
            A worker left with none it may take runs what it holds and stops: an xdist worker runs
            its last test only once it gets another or stops, so holding on would deadlock."""
            lines = self._framework_lines()
            may_train = node in lines or len(lines) < FRAMEWORK_LINES
            scope = next((s for s in self.workqueue if may_train or not is_framework_test(s)), None)
            if scope is None:
                if not node.shutting_down:
                    node.shutdown()
                return
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def mark_test_complete(self, node: object, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            # A framework test's end may free a line for a worker idling without work.
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)

    return GroupingScheduling(config, log)


@functools.cache
def has_module_fixture(path: Path) -> bool:
    # The controller sees test ids only, not fixtures: it reads the module.
    return path.suffix == ".py" and re.search(r"scope\s*=\s*[\"']module[\"']", path.read_text()) is not None


# pytest-xdist's worker name ("gw0", ...) in a worker process, None in a run without workers.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
# How long a `run_last` test waits for the other workers to finish theirs: the slowest module
# of the suite takes a few minutes; a worker that never reports has crashed.
RUN_LAST_WAIT_SECONDS = 1200
RUN_LAST_LATE = pytest.StashKey[str]()


def run_last_folder(config: pytest.Config) -> Path:
    """Where each worker leaves its name once its tests other than `run_last` are done: xdist
    gives every worker the basetemp <run's temp root>/<worker>, so the parent is the run's."""
    folder = Path(config.option.basetemp).parent / "run-last"
    folder.mkdir(exist_ok=True)
    return folder


@pytest.hookimpl(hookwrapper=True)
def pytest_runtestloop(session: pytest.Session) -> Iterator[None]:
    yield
    # The worker's own session only (it has `workerinput`): a test may run pytest inside a worker
    # (tools/mutants.py's stages), and that session has no basetemp of the run.
    if XDIST_WORKER is not None and hasattr(session.config, "workerinput"):
        (run_last_folder(session.config) / XDIST_WORKER).touch()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A `run_last` test in a worker starts once every worker has run all its other tests.

    Tests are handed out in collection order (pytest_xdist_make_scheduler), so by the time a
    worker gets a `run_last` test every other test has been handed out; another worker may still
    be running its share. Outermost
    (tryfirst), so the wait is not counted in pytest-timeout's limit for the test."""
    if XDIST_WORKER is not None and item.get_closest_marker("run_last") is not None:
        folder = run_last_folder(item.config)
        (folder / XDIST_WORKER).touch()
        workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
        deadline = time.monotonic() + RUN_LAST_WAIT_SECONDS
        # Polling a folder: workers have no channel to each other.
        while len(list(folder.iterdir())) < workers:
            if time.monotonic() > deadline:
                done = sorted(path.name for path in folder.iterdir())
                item.stash[RUN_LAST_LATE] = (
                    f"of {workers} workers only {done} finished within {RUN_LAST_WAIT_SECONDS} s"
                )
                break
            time.sleep(0.5)
    yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    if RUN_LAST_LATE in item.stash:
        pytest.fail(f"run_last: {item.stash[RUN_LAST_LATE]}; the test would miss their calls", pytrace=False)


def load_event(relative: str) -> bytes:
    """A canned payload from tests/events/."""
    return (EVENTS_DIR / relative).read_bytes()


# The URL of a fake-gcs-server already running, which `fake_gcs` then reuses instead of starting
# its own: `make mutants` (tools/mutants.py) starts one for the tests of every mutant, each a
# session of its own. Tests stay apart as always: each gets a fresh bucket (`gcs_bucket`).
REUSED_FAKE_GCS_ENV = "SPOTJOBS_TEST_FAKE_GCS_URL"


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A bare fake-gcs-server (no other part of the stack) for storage-only tests; yields its URL."""
    from devstack.emulators import start_fake_gcs

    reused = os.environ.get(REUSED_FAKE_GCS_ENV)
    if reused:
        yield reused
        return
    process, url = start_fake_gcs(tmp_path_factory.mktemp("fake-gcs"))
    try:
        yield url
    finally:
        process.stop()


@pytest.fixture
def gcs_bucket(fake_gcs: str, request: pytest.FixtureRequest) -> Bucket:  # noqa: F821
    """A fresh, empty bucket on the bare fake-gcs-server, named after the test."""
    import re
    import uuid

    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    client = storage.Client(
        project="spotjobs-test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": fake_gcs},
    )
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    return client.create_bucket(f"{name}-{uuid.uuid4().hex[:8]}")
