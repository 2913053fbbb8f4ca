"""`make test` runs the suite on pytest-xdist workers (tests/conftest.py): a `run_last` test still
runs after every other test of the run, whichever worker ran them; the API calls recorded by every
worker's session stack land in one folder it reads; and a module with a module-scoped fixture of
its own runs on one worker, so that fixture is built once. Checked on a small suite of its own run
with two workers, whose tests leave a line per event in a shared file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SUITE = {
    "pytest.ini": """
        [pytest]
        markers =
            run_last: runs after every other test of the session
    """,
    # The hooks and the fixture under test, as the real suite has them.
    "conftest.py": """
        from tests.conftest import (  # noqa: F401
            api_calls_dir,
            pytest_collection_modifyitems,
            pytest_runtest_protocol,
            pytest_runtest_setup,
            pytest_runtestloop,
            pytest_xdist_make_scheduler,
        )
    """,
    "common.py": """
        import os
        from pathlib import Path

        EVENTS = Path(os.environ["PARALLEL_RUN_EVENTS"])

        def event(*words):
            with EVENTS.open("a") as out:
                out.write(" ".join(words) + "\\n")

        def events():
            return EVENTS.read_text().splitlines()

        def worker():
            return os.environ["PYTEST_XDIST_WORKER"]
    """,
    # Handed out first: xdist's plain --dist load would split it between the workers.
    "test_a_module_fixture.py": """
        import pytest

        from common import event, worker

        @pytest.fixture(scope="module")
        def built():
            event("built", worker())

        @pytest.mark.parametrize("n", range(6))
        def test_uses_it(n, built, api_calls_dir):
            (api_calls_dir / worker()).touch()
            event("done", "module", str(n))
    """,
    # One worker is still inside the slow test when the other, idle, gets the run_last tests.
    # Each test records its worker in the calls dir its worker's session stack would use.
    "test_b_plain.py": """
        import time

        import pytest

        from common import event, worker

        def test_slow(api_calls_dir):
            time.sleep(3)
            (api_calls_dir / worker()).touch()
            event("done", "slow")

        @pytest.mark.parametrize("n", range(6))
        def test_quick(n, api_calls_dir):
            (api_calls_dir / worker()).touch()
            event("done", "quick", str(n))
    """,
    "test_c_last.py": """
        import pytest

        from common import events

        pytestmark = pytest.mark.run_last

        @pytest.mark.parametrize("n", range(2))
        def test_sees_every_other_test_done_and_every_worker_calls(n, api_calls_dir):
            done = [line for line in events() if line.startswith("done")]
            assert len(done) == 13, done
            assert sorted(p.name for p in api_calls_dir.iterdir()) == ["gw0", "gw1"]
    """,
}


def run_suite(
    tmp_path: Path, files: dict[str, str], workers: int
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run a suite of `files` on `workers` workers; returns the result and the lines its tests left."""
    suite = tmp_path / "suite"
    for name, text in files.items():
        (suite / name).parent.mkdir(parents=True, exist_ok=True)
        (suite / name).write_text(textwrap.dedent(text).lstrip())
    events = tmp_path / "events.txt"
    events.touch()
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("-n", str(workers), "--basetemp", str(tmp_path / "t")),
        ],
        cwd=suite,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "PARALLEL_RUN_EVENTS": str(events)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, events.read_text().splitlines()


def test_run_last_module_fixtures_and_recorded_calls_hold_on_two_workers(tmp_path: Path) -> None:
    result, events = run_suite(tmp_path, SUITE, workers=2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "15 passed" in result.stdout, result.stdout
    built = [line for line in events if line.startswith("built")]
    assert len(built) == 1, built


# Collected in the order plain, frameworks, own fixture, stack; each test leaves its name.
LONGEST_FIRST = {
    "pytest.ini": """
        [pytest]
        markers =
            run_last: runs after every other test of the session
            stack: needs the embedded stack
    """,
    "conftest.py": SUITE["conftest.py"],
    "common.py": SUITE["common.py"],
    "test_a_plain.py": """
        from common import event

        def test_plain():
            event("plain")
    """,
    "tests/frameworks/test_training.py": """
        import time

        import pytest

        from common import event

        @pytest.mark.parametrize("n", range(4))
        def test_trains(n):
            event("framework", "start")
            time.sleep(1)
            event("framework", "end")
    """,
    "test_b_own_fixture.py": """
        import pytest

        from common import event

        @pytest.fixture(scope="module")
        def built():
            event("built")

        def test_uses_it(built):
            event("own fixture")
    """,
    "test_c_stack.py": """
        import pytest

        from common import event

        @pytest.mark.stack
        def test_on_the_stack():
            event("stack")
    """,
    "test_d_last.py": """
        import pytest

        from common import event

        @pytest.mark.run_last
        def test_last():
            event("last")
    """,
}


def test_the_longest_tests_are_handed_out_first(tmp_path: Path) -> None:
    # One worker runs them in the order they are handed out.
    result, events = run_suite(tmp_path, LONGEST_FIRST, workers=1)
    assert result.returncode == 0, result.stdout + result.stderr
    assert events == [
        *["framework start", "framework end"] * 4,
        *["built", "own fixture", "stack", "plain", "last"],
    ]


def test_no_more_framework_tests_run_at_once_than_there_are_lines(tmp_path: Path) -> None:
    from tests.conftest import FRAMEWORK_LINES

    result, events = run_suite(tmp_path, LONGEST_FIRST, workers=FRAMEWORK_LINES + 1)
    assert result.returncode == 0, result.stdout + result.stderr
    assert events.count("framework end") == 4 and most_training_at_once(events) <= FRAMEWORK_LINES, events


def test_framework_tests_alone_on_more_workers_than_lines_all_run(tmp_path: Path) -> None:
    # A worker runs its last test only once it gets another or stops: workers that may not train
    # must stop, and those that do must get the next framework test (this run used to hang).
    from tests.conftest import FRAMEWORK_LINES

    alone = {name: text for name, text in LONGEST_FIRST.items() if not name.startswith("test_")}
    result, events = run_suite(tmp_path, alone, workers=FRAMEWORK_LINES + 2)
    assert result.returncode == 0, result.stdout + result.stderr
    assert events.count("framework end") == 4 and most_training_at_once(events) <= FRAMEWORK_LINES, events


def most_training_at_once(events: list[str]) -> int:
    running, most = 0, 0
    for line in events:
        running += {"framework start": 1, "framework end": -1}.get(line, 0)
        most = max(most, running)
    return most
