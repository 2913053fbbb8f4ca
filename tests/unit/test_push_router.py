"""The stack's push router (devstack/push_filter.py) when the pusher hangs up before the function
answers (its push deadline passed, or the stack is stopping): the answer is dropped with a line in
the stack's log, since Pub/Sub redelivers, and the router goes on serving. It used to print a
BrokenPipe traceback into the run's output instead."""

from __future__ import annotations

import http.client
import socket
import struct
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from devstack.push_filter import PushFilterRouter

BODY = b'{"message": {"attributes": {}, "messageId": "1"}}'


class SlowFunction(BaseHTTPRequestHandler):
    """A function that answers 200 once the test lets it."""

    received = threading.Event()
    release = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.received.set()
        self.release.wait(10)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
        pass


class Lines:
    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.hung_up = threading.Event()

    def __call__(self, **fields: Any) -> None:
        self.lines.append(fields)
        if fields.get("event") == "pusher_hung_up":
            self.hung_up.set()


@pytest.fixture
def routed() -> Iterator[tuple[str, int, Lines]]:
    SlowFunction.received.clear()
    SlowFunction.release.clear()
    function = ThreadingHTTPServer(("127.0.0.1", 0), SlowFunction)
    function.daemon_threads = True
    threading.Thread(target=function.serve_forever, daemon=True).start()
    lines = Lines()
    router = PushFilterRouter(log=lines).start()
    router.add("fn", f"http://127.0.0.1:{function.server_address[1]}", "")
    yield "127.0.0.1", router._server.server_address[1], lines
    SlowFunction.release.set()
    router.stop()
    function.shutdown()
    function.server_close()


def test_a_pusher_that_hangs_up_gets_no_traceback_and_the_router_serves_on(routed, capfd) -> None:
    host, port, lines = routed
    with socket.create_connection((host, port), timeout=10) as pusher:
        head = f"POST /fn/ HTTP/1.1\r\nHost: x\r\nContent-Length: {len(BODY)}\r\n\r\n".encode()
        pusher.sendall(head + BODY)
        assert SlowFunction.received.wait(10)  # forwarded: the function has it
        pusher.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # closing resets
    SlowFunction.release.set()  # the function answers to a pusher that is gone
    assert lines.hung_up.wait(10), lines.lines
    [line] = [line for line in lines.lines if line["event"] == "pusher_hung_up"]
    assert line["path"] == "/fn/" and line["status"] == 200
    assert "Traceback" not in capfd.readouterr().err

    connection = http.client.HTTPConnection(host, port, timeout=10)  # and the router serves on
    connection.request("POST", "/fn/", body=BODY, headers={"Content-Type": "application/json"})
    assert connection.getresponse().status == 200
