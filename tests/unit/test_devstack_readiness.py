"""The embedded stack's readiness probe: a port that answers, but not in HTTP/1, is not ready yet.

Google's Pub/Sub emulator (grpc-java behind Netty) once answered the probe's `GET /` with an
HTTP/2 frame, "Unexpected HTTP/1.x request", on a loaded CI machine; the probe raised
BadStatusLine and the whole stack failed to start instead of asking again."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from devstack.processes import http_ok


@pytest.fixture
def not_http_server() -> Iterator[str]:
    """A server that reads the request and answers bytes that are no HTTP/1 status line."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            with connection:
                connection.recv(1024)
                connection.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00Unexpected HTTP/1.x request: GET /\n")

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        listener.close()


def test_a_port_answering_in_another_protocol_is_not_ready(not_http_server: str) -> None:
    assert http_ok(not_http_server) is False


def test_a_closed_port_is_not_ready() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert http_ok(f"http://127.0.0.1:{port}/") is False
