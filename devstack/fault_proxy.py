"""A small HTTP proxy that adds latency and injects failures in front of a local emulator.

Used in two ways: chaos tests put it in front of fake-gcs-server and make it answer 503 for a
while (as GCS does under load); benchmarks make every request cost about what a call to real GCS
costs (~20 ms), because without it the local server shares the two cores with the client and
every strategy looks alike.

Control (on the proxy itself, never forwarded):
    POST /_proxy/faults {"status": 503, "seconds": 5}   every request fails for 5 s
    POST /_proxy/faults {"status": 503, "count": 3}     the next 3 requests fail
    POST /_proxy/latency {"seconds": 0.02}
    GET  /_proxy/stats                                  {"requests": N, "failed": M}
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
}


class FaultPlan:
    """What the proxy does to the next requests. Thread-safe."""

    def __init__(self, latency_seconds: float = 0.0) -> None:
        self._lock = threading.Lock()
        self.latency_seconds = latency_seconds
        self._status = 0
        self._fail_until = 0.0
        self._fail_count = 0
        self.requests = 0
        self.failed = 0

    def set_fault(self, status: int, *, seconds: float = 0.0, count: int = 0) -> None:
        with self._lock:
            self._status = status
            self._fail_until = time.monotonic() + seconds if seconds else 0.0
            self._fail_count = count

    def next_status(self) -> int | None:
        """The status to fail this request with, or None to forward it."""
        with self._lock:
            self.requests += 1
            if self._fail_count > 0:
                self._fail_count -= 1
            elif time.monotonic() >= self._fail_until:
                return None
            self.failed += 1
            return self._status


class FaultProxy:
    """Forwards every request to `upstream` (http://host:port), applying a `FaultPlan`."""

    def __init__(self, upstream: str, *, port: int = 0, latency_seconds: float = 0.0) -> None:
        self.plan = FaultPlan(latency_seconds)
        target = urlsplit(upstream)
        handler = _make_handler(target.hostname or "127.0.0.1", target.port or 80, self.plan)
        self._server = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _make_handler(host: str, port: int, plan: FaultPlan) -> type[BaseHTTPRequestHandler]:
    local = threading.local()

    def upstream() -> http.client.HTTPConnection:
        # One keep-alive connection per proxy thread, as a client library would hold.
        if getattr(local, "connection", None) is None:
            local.connection = http.client.HTTPConnection(host, port, timeout=60)
        return local.connection

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out as two writes; with Nagle they meet delayed ACKs (+40 ms a call).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
            pass

        def _forward(self) -> None:
            if self.path.startswith("/_proxy/"):
                self._control()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            status = plan.next_status()
            if plan.latency_seconds:
                time.sleep(plan.latency_seconds)
            if status is not None:
                self._reply(status, {"error": {"code": status, "message": "injected by fault proxy"}})
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            for attempt in range(2):
                connection = upstream()
                try:
                    connection.request(self.command, self.path, body=body, headers=headers)
                    response = connection.getresponse()
                    payload = response.read()
                    break
                except (http.client.HTTPException, OSError):
                    connection.close()
                    local.connection = None
                    if attempt:
                        raise
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in _HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _control(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}") if length else {}
            if self.path == "/_proxy/faults":
                plan.set_fault(
                    int(body.get("status", 503)), seconds=float(body.get("seconds", 0)), count=int(body.get("count", 0))
                )
            elif self.path == "/_proxy/latency":
                plan.latency_seconds = float(body["seconds"])
            self._reply(200, {"requests": plan.requests, "failed": plan.failed})

        def _reply(self, status: int, document: dict) -> None:
            payload = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward

    return Handler


def main() -> None:
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(description="latency and fault-injecting HTTP proxy")
    parser.add_argument("--upstream", required=True, help="http://host:port to forward to")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to each request")
    args = parser.parse_args()
    proxy = FaultProxy(args.upstream, port=args.port, latency_seconds=args.latency).start()
    print(json.dumps({"url": proxy.url}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    proxy.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
