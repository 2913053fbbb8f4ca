"""Framework scripts started from a fork server (tests/frameworks/children/fork_server.py) that
has imported PyTorch, Transformers, Accelerate and Lightning once: a `python SCRIPT` without two to
three seconds of imports. One server per test process, started at its first use."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import IO, Any

from tests.support.frameworks import CHILDREN, framework_python

# The scripts whose frameworks the server has imported. (JAX and Keras start as usual: JAX's
# runtime does not survive a fork.)
FORKABLE = frozenset({"torch_loop.py", "hf_trainer.py", "hf_accelerate.py", "lightning_fit.py"})
# Read when a framework is imported, so the server's are every child's: the values every
# framework test runs with.
IMPORT_TIME_ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


class ForkedProcess:
    """What a test uses of a `subprocess.Popen`: pid, stdout, send_signal, wait, returncode."""

    def __init__(self, connection: socket.socket, stdout: IO[str] | None) -> None:
        self._connection = connection
        self._answers = connection.makefile("r")  # a line {"pid"}, then one {"returncode"}
        self.pid = int(json.loads(self._answers.readline())["pid"])
        self.stdout = stdout
        self.returncode: int | None = None

    def send_signal(self, signal: int) -> None:
        # As `Popen.send_signal`: a child that ended and was reaped (by the server) since is no error.
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._connection.settimeout(timeout)
            try:
                answer = self._answers.readline()
            except TimeoutError:
                raise subprocess.TimeoutExpired(f"forked pid {self.pid}", timeout) from None
            self.returncode = int(json.loads(answer)["returncode"])
            self._answers.close()
            self._connection.close()
        return self.returncode


class ForkServer:
    def __init__(self) -> None:
        self._folder = tempfile.mkdtemp(prefix="fork-")
        self._socket = str(Path(self._folder) / "s")
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": self._folder, **IMPORT_TIME_ENV}
        self._process = subprocess.Popen(
            [framework_python(), str(CHILDREN / "fork_server.py"), self._socket],
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._process.stdout is not None
        ready = self._process.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"the fork server did not start (exit {self._process.poll()})")
        atexit.register(self.stop)

    @property
    def socket_path(self) -> str:
        """Where it listens: what tests/frameworks/children/fork_client.py connects to."""
        return self._socket

    def start(self, script: Path, env: dict[str, str], cwd: Path, stdout: Any, stderr: IO[Any]) -> ForkedProcess:
        """`subprocess.Popen([python, script], env=env, cwd=cwd, stdout=stdout, stderr=stderr)`,
        forked: `stdout` is subprocess.PIPE (read as text) or a file, `stderr` a file."""
        differing = {k: (env.get(k), v) for k, v in IMPORT_TIME_ENV.items() if env.get(k) != v}
        assert not differing, f"the fork server imported its frameworks with other values: {differing}"
        read_end = None
        if stdout == subprocess.PIPE:
            read_end, write_end = os.pipe()
        else:
            write_end = os.dup(stdout.fileno())
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self._socket)
        request = {"argv": [str(script)], "env": env, "cwd": str(cwd)}
        try:
            socket.send_fds(connection, [json.dumps(request).encode()], [write_end, stderr.fileno()])
        finally:
            os.close(write_end)  # the child holds it now: its end is the pipe's end
        return ForkedProcess(connection, os.fdopen(read_end, "r") if read_end is not None else None)

    def stop(self) -> None:
        self._process.terminate()
        self._process.wait(timeout=30)
        shutil.rmtree(self._folder, ignore_errors=True)


@functools.cache
def fork_server() -> ForkServer:
    return ForkServer()
