"""The CLI under a closed pipe and Ctrl-C: it exits quietly with the status a shell expects (141,
130), never a traceback. Real processes and real pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from devstack.processes import REPO_ROOT

SPOTJOBS = [sys.executable, "-m", "spotjobs.cli"]


def test_a_reader_that_went_away_ends_the_command_with_141_and_no_traceback() -> None:
    # The read end is closed before the command writes anything: every write gets EPIPE.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run(
            [*SPOTJOBS, "validate", "--show-policy"],
            cwd=REPO_ROOT,
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    assert result.returncode == 141, result.stderr
    assert result.stderr == ""


def test_piped_into_head_it_prints_the_first_line_and_no_traceback() -> None:
    result = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{' '.join(SPOTJOBS)} validate --show-policy | head -1"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.stdout == "{\n"
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr
    # head may exit before or after the last write: both end without a traceback.
    assert result.returncode in (0, 141)


def test_ctrl_c_ends_a_waiting_command_with_130_and_no_traceback() -> None:
    process = subprocess.Popen(
        [*SPOTJOBS, "validate", "-"],  # waits for stdin, which stays open
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal: a suite started in the background (`make test &`) ignores SIGINT, and
        # an ignored signal is inherited, so the command would never hear Ctrl-C.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_until_reading_a_pipe(process.pid)  # a SIGINT earlier would hit the interpreter's startup
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr


def wait_until_reading_a_pipe(pid: int, timeout: float = 60.0) -> None:
    """Until the process sleeps in a pipe read (Linux: its wait channel names the pipe)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/wchan") as wchan:
            if "pipe" in wchan.read():
                return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never blocked reading its stdin")
