"""Subscription filters for the embedded stack, applied where the emulator leaves them out.

Pub/Sub delivers to a subscription with a filter only the messages whose attributes match it and
acknowledges the rest for that subscription (https://cloud.google.com/pubsub/docs/subscription-message-filter).
Google's Pub/Sub emulator as installed here (SDK 528, cloud-pubsub-emulator 0.8.20) accepts and
echoes a subscription's `filter` but delivers every message regardless; the SDK release notes
announce filtering only for 555.0.0. So the stack creates its trigger subscriptions with the filter
(a newer emulator applies it) **and** points each filtered subscription's push endpoint at this
router, which evaluates the same filter on the pushed message's attributes: a message that does
not match is answered 204 (acknowledged, as Pub/Sub would, and logged), one that matches is
forwarded to the function unchanged and the function's answer is returned.

The router also stands where Cloud Run's front end stands: a push that finds no function process
listening (it crashed and the stack's supervisor is starting it again) waits for the new process,
up to `INSTANCE_WAIT_SECONDS`, as a request waits for a new Cloud Run instance, instead of being
refused at once. A push in flight on a process that dies fails (502), as on a crashed instance,
and Pub/Sub redelivers it.

`compile_filter` understands the filter grammar spotjobs could use: `attributes.KEY = "v"`,
`!=`, `attributes:KEY` (has the key), `hasPrefix(attributes.KEY, "p")`, `NOT`/`-`, `AND`, `OR`
and parentheses. Anything else raises `ValueError`, so a new filter in topology.json that this
module does not understand fails the stack's start instead of silently delivering everything.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Predicate = Callable[[Mapping[str, str]], bool]

# How long a push waits for a function process to listen again (a cold start under load).
INSTANCE_WAIT_SECONDS = 45.0

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*")
      | (?P<op>!=|=|:|\(|\)|,|-)
      | (?P<word>[A-Za-z_][A-Za-z0-9_.\-]*)
    )""",
    re.VERBOSE,
)


def _tokens(expression: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    expression = expression.rstrip()
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None or match.end() == position:
            raise ValueError(f"unsupported filter syntax at {expression[position:]!r}")
        tokens.append(match.group(match.lastgroup or 0))
        position = match.end()
    return tokens


def compile_filter(expression: str | None) -> Predicate:
    """A predicate over a message's attributes; an empty filter admits everything."""
    if not expression or not expression.strip():
        return lambda attributes: True
    tokens = _tokens(expression)
    position = 0

    def peek() -> str | None:
        return tokens[position] if position < len(tokens) else None

    def take(expected: str | None = None) -> str:
        nonlocal position
        token = peek()
        if token is None or (expected is not None and token != expected):
            raise ValueError(f"filter {expression!r}: expected {expected or 'more'}, got {token!r}")
        position += 1
        return token

    def string() -> str:
        token = take()
        if not token.startswith('"'):
            raise ValueError(f"filter {expression!r}: expected a string, got {token!r}")
        return json.loads(token)

    def key(token: str) -> str:
        if not token.startswith("attributes."):
            raise ValueError(f"filter {expression!r}: only attributes.KEY is supported, got {token!r}")
        return token[len("attributes.") :]

    def term() -> Predicate:
        token = take()
        if token in ("NOT", "-"):
            inner = term()
            return lambda a: not inner(a)
        if token == "(":
            inner = disjunction()
            take(")")
            return inner
        if token == "hasPrefix":
            take("(")
            name = key(take())
            take(",")
            prefix = string()
            take(")")
            return lambda a: a.get(name, "").startswith(prefix) if name in a else False
        if token == "attributes":
            take(":")
            name = take()
            return lambda a: name in a
        name = key(token)
        op = take()
        if op not in ("=", "!="):
            raise ValueError(f"filter {expression!r}: unsupported operator {op!r}")
        value = string()
        if op == "=":
            return lambda a: a.get(name) == value
        return lambda a: a.get(name) != value

    def conjunction() -> Predicate:
        parts = [term()]
        while peek() == "AND":
            take()
            parts.append(term())
        return lambda a: all(p(a) for p in parts)

    def disjunction() -> Predicate:
        parts = [conjunction()]
        while peek() == "OR":
            take()
            parts.append(conjunction())
        return lambda a: any(p(a) for p in parts)

    predicate = disjunction()
    if peek() is not None:
        raise ValueError(f"filter {expression!r}: unexpected {peek()!r}")
    return predicate


def push_attributes(body: bytes) -> Mapping[str, str]:
    """The attributes of a push body's message ({} when the body is not a push)."""
    try:
        document = json.loads(body)
        attributes = document["message"].get("attributes") or {}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}
    return attributes if isinstance(attributes, Mapping) else {}


@dataclass(frozen=True)
class Route:
    name: str  # the function
    upstream: str  # its base URL
    expression: str
    admits: Predicate


class PushFilterRouter:
    """An HTTP server in the stack's process: `POST /<function>/<path>` is filtered by that
    function's subscription filter and forwarded to `<upstream>/<path>`."""

    def __init__(self, log: Callable[..., None]) -> None:
        self.routes: dict[str, Route] = {}
        self.log = log  # log(event=..., **fields): one line in the stack's log
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, name: str, upstream: str, expression: str) -> str:
        """Route `name`'s pushes through its filter; returns the URL prefix to push to."""
        self.routes[name] = Route(name, upstream, expression, compile_filter(expression))
        return f"{self.url}/{name}"

    def start(self) -> PushFilterRouter:
        self._thread = threading.Thread(target=self._server.serve_forever, name="push-filter", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(router: PushFilterRouter) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib name
            pass

        def do_POST(self) -> None:  # noqa: N802 - stdlib name
            name, _, rest = self.path.lstrip("/").partition("/")
            route = router.routes.get(name)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if route is None:
                self._answer(404, b"no such route")
                return
            attributes = push_attributes(body)
            if not route.admits(attributes):
                router.log(event="filtered_out", function=name, filter=route.expression, attributes=dict(attributes))
                self._answer(204, b"")
                return
            upstream = urllib.parse.urlsplit(route.upstream)
            headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
            deadline = time.monotonic() + INSTANCE_WAIT_SECONDS
            while True:
                connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=900)
                try:
                    connection.connect()
                except ConnectionRefusedError:  # no process: wait for the next one, as Cloud Run would
                    connection.close()
                    if time.monotonic() < deadline:
                        time.sleep(0.2)
                        continue
                    router.log(event="forward_failed", function=name, error="no instance listening")
                    self._answer(503, b"no instance")
                    return
                try:
                    connection.request("POST", f"/{rest}", body=body, headers=headers)
                    response = connection.getresponse()
                    self._answer(response.status, response.read())
                except OSError as exc:  # the process died with the push in flight: Pub/Sub retries
                    router.log(event="forward_failed", function=name, error=str(exc))
                    self._answer(502, b"function died")
                finally:
                    connection.close()
                return

        def _answer(self, status: int, payload: bytes) -> None:
            try:
                self.send_response(status)
                if status != 204:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if status != 204:
                    self.wfile.write(payload)
            except ConnectionError as exc:  # the pusher hung up (its deadline, or the stack stopping): it redelivers
                self.close_connection = True
                router.log(event="pusher_hung_up", path=self.path, status=status, error=str(exc))

    return Handler
