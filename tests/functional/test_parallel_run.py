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


def test_run_last_module_fixtures_and_recorded_calls_hold_on_two_workers(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, text in SUITE.items():
        (suite / name).write_text(textwrap.dedent(text).lstrip())
    events = tmp_path / "events.txt"
    events.touch()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--basetemp", str(tmp_path / "t")],
        cwd=suite,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO_ROOT), "PARALLEL_RUN_EVENTS": str(events)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "15 passed" in result.stdout, result.stdout
    built = [line for line in events.read_text().splitlines() if line.startswith("built")]
    assert len(built) == 1, built
