"""Child processes of the embedded stack: each in its own process group, tied to the launcher's
life, with its output in a log file; waiting until a child serves; stopping many at once.

Every child runs in a new session (its own process group), so stopping it also stops what it
started (gcloud's java, gunicorn's workers), and asks the kernel for SIGTERM when the launcher
dies, so even a SIGKILLed `spotjobs local up` leaves nothing running.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

# Children run from the repository root (and get it on PYTHONPATH), so `python -m devstack...`
# and functions/main.py resolve the same in every child.
REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check: Callable[[], bool], *, timeout: float, what: str, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise TimeoutError(f"{what} did not become ready within {timeout:.0f} s")


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status < 500
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    # Something answered, but not in HTTP/1 (the Pub/Sub emulator's Netty did so once, starting
    # on a loaded machine): not ready yet, ask again.
    except (OSError, http.client.HTTPException):
        return False


# In the child, before it execs the real command: ask the kernel for SIGTERM when the launcher dies,
# even by SIGKILL (Linux prctl PR_SET_PDEATHSIG), so a killed `spotjobs local up` leaves nothing
# running. A trampoline, not `preexec_fn`: with `preexec_fn` subprocess must fork() and run every
# at-fork handler, and gRPC's (the Pub/Sub client's, in the launcher) can block that fork forever
# (seen: a stack test's launcher stuck in _fork_exec on a futex); without it CPython uses vfork.
_EXIT_WITH_PARENT = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


@dataclass
class ManagedProcess:
    """A child in its own process group, with its output in a log file."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_path: Path
    cwd: Path = REPO_ROOT
    popen: subprocess.Popen[bytes] | None = None
    stdout_pipe: bool = False

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child for its lifetime
        self.popen = subprocess.Popen(
            [sys.executable, "-c", _EXIT_WITH_PARENT, *self.argv],
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.stdout_pipe else log,
            stderr=log,
            start_new_session=True,
        )
        log.close()

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def terminate(self) -> None:
        """Ask the whole process group to stop (SIGTERM)."""
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGTERM)

    def finish(self, deadline: float) -> None:
        """Wait for the leader until `deadline`, then SIGKILL whatever is left of the group
        (it may hold children of the leader: gcloud's java, gunicorn's workers)."""
        if self.popen is None:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=max(deadline - time.monotonic(), 0.01))
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        if self.popen.stdout:
            self.popen.stdout.close()

    def stop(self, timeout: float = 10.0) -> None:
        self.terminate()
        self.finish(time.monotonic() + timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group at once, as a crashed instance would die."""
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def read_ready_line(self, timeout: float) -> dict[str, Any]:
        """The JSON line a child prints on stdout once it is serving."""
        assert self.popen and self.popen.stdout
        stdout: IO[bytes] = self.popen.stdout
        deadline = time.monotonic() + timeout
        os.set_blocking(stdout.fileno(), False)
        buffer = b""
        while time.monotonic() < deadline:
            chunk = stdout.read()
            if chunk:
                buffer += chunk
                if b"\n" in buffer:
                    return json.loads(buffer.split(b"\n", 1)[0])
            elif not self.alive():
                break
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} printed no ready line; see {self.log_path}")


def stop_all(processes: Iterable[ManagedProcess], grace_seconds: float = 10.0) -> None:
    """Signal every process at once, then wait: stopping takes one grace period, not one per process."""
    processes = list(processes)
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + grace_seconds
    for process in processes:
        process.finish(deadline)
