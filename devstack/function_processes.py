"""The functions of `functions/main.py`, each under functions-framework in its own process, and their
supervision as Cloud Run's: a process that dies is started again, with backoff, and the stack's log
gets one line per restart (`function_restarted`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from devstack.processes import REPO_ROOT, ManagedProcess, free_port, http_ok, wait_until

FUNCTIONS_SOURCE = REPO_ROOT / "functions" / "main.py"

# Supervision: the first restart waits this long, each next one twice as long, up to the maximum;
# a process that stayed up for RESTART_RESET_SECONDS starts again from the first delay.
RESTART_BACKOFF_SECONDS = 0.5
RESTART_MAX_BACKOFF_SECONDS = 15.0
RESTART_RESET_SECONDS = 60.0


@dataclass
class _Supervised:
    started_at: float = 0.0
    backoff: float = RESTART_BACKOFF_SECONDS
    restart_at: float | None = None  # set when the death is noticed
    restarts: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    paused: bool = False  # a deliberate stop/restart is in progress


class FunctionProcesses:
    """Starts, restarts, kills and supervises the stack's functions.

    `processes` is the stack's own table of children (it stops them all, in order); `urls` maps
    each function started to the address it serves on, the same port across restarts.
    """

    def __init__(
        self,
        processes: dict[str, ManagedProcess],
        child_env: Callable[[Mapping[str, str] | None], dict[str, str]],
        logs_dir: Path,
        log_event: Callable[..., None],
        stopping: threading.Event,
        *,
        record_api_calls: Path | None = None,
    ) -> None:
        self.processes = processes
        self.urls: dict[str, str] = {}
        self._ports: dict[str, int] = {}
        self._child_env = child_env
        self._logs_dir = logs_dir
        self._log_event = log_event
        self._stopping = stopping
        self._record_api_calls = record_api_calls
        self._supervised: dict[str, _Supervised] = {}
        self._supervisor: threading.Thread | None = None

    def start_all(self, names: Iterable[str]) -> None:
        names = list(names)
        for name in names:
            self.start(name)
        for name in names:
            url = self.urls[name]
            wait_until(lambda u=url: http_ok(u), timeout=60, what=f"function {name}")

    def start(self, name: str) -> None:
        """Start (or restart, on the same port) one function under functions-framework."""
        port = self._ports.get(name) or free_port()
        self._ports[name] = port
        extra = {"THREADS": "8"}
        if self._record_api_calls is not None:
            self._record_api_calls.mkdir(parents=True, exist_ok=True)
            extra["SPOTJOBS_RECORD_API_CALLS"] = str(self._record_api_calls / f"{name}.jsonl")
        executable = Path(sys.executable).with_name("functions-framework")
        process = ManagedProcess(
            f"function-{name}",
            [
                str(executable) if executable.exists() else "functions-framework",
                "--source",
                str(FUNCTIONS_SOURCE),
                "--target",
                name,
                "--signature-type",
                "http",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            self._child_env(extra),
            self._logs_dir / f"{name}.log",
        )
        process.start()
        self.processes[process.name] = process
        self.urls[name] = f"http://127.0.0.1:{port}"
        self._supervised.setdefault(name, _Supervised()).started_at = time.monotonic()

    def restart(self, name: str) -> None:
        state = self._supervised.setdefault(name, _Supervised())
        with state.lock:
            state.paused = True
            try:
                self.processes[f"function-{name}"].stop()
                self.start(name)
                state.restart_at = None
            finally:
                state.paused = False
        wait_until(lambda: http_ok(self.urls[name]), timeout=60, what=f"function {name}")

    def kill(self, name: str) -> None:
        """Kill a function's process group at once, as a crashed instance would die (the
        supervisor, when on, starts it again as Cloud Run would start a new instance)."""
        self.processes[f"function-{name}"].kill()

    def pid(self, name: str) -> int | None:
        """The pid of the process serving `name` now (it changes when the function restarts)."""
        process = self.processes.get(f"function-{name}")
        return process.pid if process is not None and process.alive() else None

    # Supervision.

    def start_supervisor(self) -> None:
        self._supervisor = threading.Thread(target=self._supervise, name="stack-supervisor", daemon=True)
        self._supervisor.start()

    def join_supervisor(self, timeout: float) -> None:
        """Wait for the supervisor to end, once `stopping` is set."""
        if self._supervisor is not None:
            self._supervisor.join(timeout=timeout)

    def _supervise(self) -> None:
        while not self._stopping.wait(0.2):
            for name in list(self._supervised):
                try:
                    self._supervise_one(name)
                except Exception as exc:  # noqa: BLE001 - log it and try again on the next round
                    self._log_event("function_restart_failed", function=name, error=f"{type(exc).__name__}: {exc}")

    def _supervise_one(self, name: str) -> None:
        state = self._supervised[name]
        with state.lock:
            process = self.processes.get(f"function-{name}")
            if state.paused or process is None or process.alive() or self._stopping.is_set():
                return
            now = time.monotonic()
            if state.restart_at is None:  # just noticed: wait out the backoff before starting it
                if now - state.started_at >= RESTART_RESET_SECONDS:
                    state.backoff = RESTART_BACKOFF_SECONDS
                state.restart_at = now + state.backoff
                return
            if now < state.restart_at:
                return
            exit_code = process.popen.returncode if process.popen is not None else None
            waited = state.backoff
            self.start(name)
            state.restarts += 1
            state.restart_at = None
            state.backoff = min(state.backoff * 2, RESTART_MAX_BACKOFF_SECONDS)
            self._log_event(
                "function_restarted",
                function=name,
                exit_code=exit_code,
                restarts=state.restarts,
                backoff_seconds=waited,
                pid=self.processes[f"function-{name}"].pid,
            )
