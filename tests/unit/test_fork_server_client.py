"""The fork server's client answers as `subprocess.Popen` does: a signal to a child that ended,
and was reaped by the server, before the test sent it is no error (a multinode test's frozen rank
was gone by the time it was killed: `ProcessLookupError` failed a CI run)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys

from tests.support.fork_server import ForkedProcess


def test_a_signal_to_a_child_already_reaped_is_no_error() -> None:
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()  # reaped: its pid names no process now
    server_side, client_side = socket.socketpair()
    with server_side:
        server_side.sendall(json.dumps({"pid": ended.pid}).encode() + b"\n")
        child = ForkedProcess(client_side, None)
        child.send_signal(signal.SIGKILL)
        server_side.sendall(json.dumps({"returncode": 0}).encode() + b"\n")
        assert child.wait(timeout=5) == 0
