"""A local Vertex AI emulator: the v1 CustomJob REST surface, run as local processes.

API (the real API's JSON, read and written with `google.cloud.aiplatform_v1` types, so the
official client with `transport="rest"` and an `http://` api_endpoint works, and so does curl):

    POST /v1/projects/P/locations/L/customJobs                 create (body: a CustomJob)
    GET  /v1/projects/P/locations/L/customJobs/ID              get
    GET  /v1/projects/P/locations/L/customJobs?filter=&pageSize=&pageToken=
                                                               list; the documented filter
                                                               (see `filter`): labels.K=V,
                                                               labels.K:*, state=, displayName:,
                                                               createTime>, AND/OR/NOT
    POST /v1/projects/P/locations/L/customJobs/ID:cancel       cancel -> CANCELLING -> CANCELLED

Errors are google.rpc JSON (`{"error": {"code", "message", "status"}}`) with the HTTP status the
real API would use, so the client raises the matching google.api_core exception.

Vertex AI's request quotas are enforced by default, per project and region over a sliding minute
(see `quotas`): 60 creates (`--quota-submissions-per-minute`) and 600 get/list/cancel calls
(`--quota-crud-per-minute`), then 429 RESOURCE_EXHAUSTED naming the quota; 0 turns one off.
`GET /emulator/v1/stats` reports them under "quotas" with what each refused.

A job runs each replica of each worker pool as a local process (see `worker`) through QUEUED ->
PENDING -> RUNNING -> SUCCEEDED (the primary exited 0) or FAILED, at most `--max-running` jobs at a
time (see `runner`), and writes `ml_job` log entries (task_name `workerpool<P>-<i>`) to
`--events-topic` the way a Logging sink would (see `logs`).

Spot preemption (SPOT jobs only): a replica's process group gets SIGTERM, SIGKILL after `--grace-seconds`,
and the replica restarts (alone, or with every replica: the job's `restartJobOnWorkerRestart` and the
undocumented modes `--preemption-restarts`, `--survivor-stop`, `--spot-restart-count`, see `modes`); past six
restarts the job fails with a STOCKOUT error. Preemptions come from plans registered through the control surface,
else from a seeded random rate (`--preemption-rate` per minute of running time, `--seed`); see `preemption`.
Any replica's exit 134 or 139 (SIGABRT, SIGSEGV) restarts up to three times (`--transient-exit-restarts`).

`--gcs-fuse-dir DIR` (opt-in) stands in for the Cloud Storage FUSE mount Vertex gives training at
`/gcs/`: each job's checkpoint folder mirrored between the bucket and DIR (see `fuse`).

Signal profiles (`--signals`, see `signals`): `documented` (the default) shows only what Google
documents: the job stays RUNNING while its worker restarts, no line marks a preemption, service
lines are textPayload at INFO, the STOCKOUT error appears `--error-delay-seconds` (default 60)
after the job ends. `rich` adds the emulator's invented signals (a WARNING line per preemption,
RUNNING -> PENDING on restart, jsonPayload service lines, error code 8, the error set at once).

Control surface (JSON in, JSON out):

    POST /emulator/v1/preemption-plans   {"labels": {"k": "v"}, "preemptions": 7,
                                         "after_seconds": 1.5}, {"labels", "delays": [0.5, 2]},
                                         or {"labels", "preemptions", "after_checkpoints": 2}:
                                         matching jobs are preempted that long after each
                                         (re)start, or after its 2nd committed checkpoint;
                                         opt-in: "replica" ("workerpool1-0", "all"),
                                         "after_output", "grace_seconds", "exit_zero_succeeds"
                                         (see `preemption`)
    GET  /emulator/v1/preemption-plans
    POST /emulator/v1/spot-capacity      {"data": [1, 0, ...], "tick_seconds": 2}: replay a Spot
                                         availability trace (invented, opt-in; see `capacity`):
                                         Spot jobs wait while it says 0, are preempted when it
                                         turns 0; {"data": []} ends it; "location": R for region
                                         R's jobs only; `flex-capacity`: FLEX_START's (`flex`, `--flex-*`)
    GET  /emulator/v1/spot-capacity, GET /emulator/v1/flex-capacity
    POST /emulator/v1/projects/P/locations/L/customJobs/ID:preempt    preempt a RUNNING SPOT job
                                         now (body {"replica": R}: R, or "all"; default primary)
    GET  /emulator/v1/projects/P/locations/L/customJobs/ID            runs, pids, signals (the
                                         primary's), replicas, output (the last 1,000 lines:
                                         run, stream, line, time, replica)
    POST /emulator/v1/faults             {"method": "create|get|list|cancel", "status": 503,
                                         "count": 2}: the next 2 calls are refused;
                                         {"method": ..., "mode": "lost_response", "status":
                                         499|500|503|504, "rpc_status": "DATA_LOSS"}: the call
                                         is carried out, then answered with that error (opt-in;
                                         UNKNOWN and DATA_LOSS travel as HTTP 500, so over REST
                                         the client raises InternalServerError);
                                         {"method": "list", "mode": "lag", "seconds": 30}: jobs
                                         created less than 30 s ago are missing from lists
                                         (invented, opt-in; see `faults`)
    DELETE /emulator/v1/faults           drop every pending fault and the list lag
    POST /emulator/v1/log-sink           {"enabled": false}
    POST /emulator/v1/signals            {"profile": "rich"}: the profile of jobs created next
    POST /emulator/v1/replica-modes      {"preemption_restarts": "job", ...}: the modes of jobs
                                         created next
    POST /emulator/v1/reset              forget jobs (terminating workers), plans and faults
    GET  /emulator/v1/stats

Run: `python -m devstack.vertex.emulator --port 0 --project P --events-topic
projects/P/topics/job-events`; it prints one JSON line `{"port": N, "url": "http://HOST:N"}` when
ready and serves until SIGTERM/SIGINT, then terminates every worker and exits 0. In-process:
`VertexEmulator(EmulatorConfig(...)).start()`, `.url`, `.stop()`.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType, TracebackType
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from devstack.vertex.errors import ApiError, invalid_argument, not_found
from devstack.vertex.modes import add_mode_arguments, modes_from_args
from devstack.vertex.quotas import DEFAULT_CRUD_PER_MINUTE, DEFAULT_SUBMISSIONS_PER_MINUTE
from devstack.vertex.service import EmulatorConfig, VertexService
from devstack.vertex.signals import DEFAULT_PROFILE, PROFILES
from shared.log import Logger

_JOBS = r"/projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/customJobs"
_JOB = _JOBS + r"/(?P<job_id>[^/:]+)"
_SHUTDOWN_POLL_SECONDS = 0.05  # how soon serve_forever notices stop()


@dataclass(frozen=True)
class _Request:
    params: dict[str, str]
    query: dict[str, list[str]]
    body: bytes

    @property
    def int_enums(self) -> bool:
        # The REST client sends `$alt=json;enum-encoding=int` and expects enums back as numbers.
        return any("enum-encoding=int" in value for value in self.query.get("$alt", []))

    def json_body(self) -> Any:
        try:
            return json.loads(self.body or b"{}")
        except ValueError as error:
            raise invalid_argument(f"Invalid JSON payload received. {error}") from error

    def job_key(self) -> tuple[str, str, str]:
        return self.params["project"], self.params["location"], self.params["job_id"]


_Handler = Callable[[VertexService, _Request], "str | dict[str, Any]"]
_ROUTES: list[tuple[str, re.Pattern[str], _Handler]] = [
    (
        "POST",
        re.compile(f"^/v1{_JOBS}$"),
        lambda service, request: service.create_job(
            request.params["project"], request.params["location"], request.body, request.int_enums
        ),
    ),
    (
        "GET",
        re.compile(f"^/v1{_JOBS}$"),
        lambda service, request: service.list_jobs(
            request.params["project"], request.params["location"], request.query, request.int_enums
        ),
    ),
    (
        "GET",
        re.compile(f"^/v1{_JOB}$"),
        lambda service, request: service.get_job(*request.job_key(), request.int_enums),
    ),
    (
        "POST",
        re.compile(f"^/v1{_JOB}:cancel$"),
        lambda service, request: service.cancel_job(*request.job_key()),
    ),
    (
        "POST",
        re.compile("^/emulator/v1/preemption-plans$"),
        lambda service, request: service.add_preemption_plan(request.json_body()),
    ),
    (
        "GET",
        re.compile("^/emulator/v1/preemption-plans$"),
        lambda service, request: service.preemption_plans(),
    ),
    (
        "POST",
        re.compile("^/emulator/v1/(?P<kind>spot|flex)-capacity$"),
        lambda service, request: service.set_capacity(request.params["kind"], request.json_body()),
    ),
    (
        "GET",
        re.compile("^/emulator/v1/(?P<kind>spot|flex)-capacity$"),
        lambda service, request: service.capacity(request.params["kind"]),
    ),
    (
        "POST",
        re.compile(f"^/emulator/v1{_JOB}:preempt$"),
        lambda service, request: service.preempt_job(*request.job_key(), request.json_body()),
    ),
    (
        "GET",
        re.compile(f"^/emulator/v1{_JOB}$"),
        lambda service, request: service.job_details(*request.job_key()),
    ),
    (
        "POST",
        re.compile("^/emulator/v1/faults$"),
        lambda service, request: service.add_fault(request.json_body()),
    ),
    (
        "DELETE",
        re.compile("^/emulator/v1/faults$"),
        lambda service, request: service.clear_faults(),
    ),
    (
        "POST",
        re.compile("^/emulator/v1/log-sink$"),
        lambda service, request: service.set_log_sink(request.json_body()),
    ),
    (
        "POST",
        re.compile("^/emulator/v1/signals$"),
        lambda service, request: service.set_signals(request.json_body()),
    ),
    (
        "POST",
        re.compile("^/emulator/v1/replica-modes$"),
        lambda service, request: service.set_replica_modes(request.json_body()),
    ),
    ("POST", re.compile("^/emulator/v1/reset$"), lambda service, request: service.reset()),
    ("GET", re.compile("^/emulator/v1/stats$"), lambda service, request: service.stats()),
]


def _route(service: VertexService, method: str, path: str, query: dict[str, list[str]], body: bytes) -> str:
    for route_method, pattern, handler in _ROUTES:
        match = pattern.match(path)
        if match and route_method == method:
            result = handler(service, _Request(match.groupdict(), query, body))
            return result if isinstance(result, str) else json.dumps(result)
    raise not_found(f"No such method: {method} {path}")


class _EmulatorHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], service: VertexService, logger: Logger) -> None:
        super().__init__(address, _RequestHandler)
        self.service = service
        self.logger = logger

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client closing its keep-alive connection (a test or the demo ending) is not an error.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the REST client's session expects
    server: _EmulatorHTTPServer

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        """Requests are not logged one by one; errors are, by `_dispatch`."""

    def _dispatch(self, method: str) -> None:
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        try:
            query = parse_qs(parts.query, keep_blank_values=True)
            text = _route(self.server.service, method, path, query, self._read_body())
            status = 200
        except ApiError as error:
            status, text = error.http_status, json.dumps(error.body())
        except Exception as error:  # reported to the caller as INTERNAL and logged, not lost
            self.server.logger.error("request failed", method=method, path=path, error=repr(error))
            status, text = 500, json.dumps(ApiError(500, f"Emulator error: {error!r}").body())
        self._send(status, text)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", ""):
            self.close_connection = True
            raise ApiError(411, "Send a Content-Length; chunked bodies are not supported.")
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, text: str) -> None:
        payload = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class VertexEmulator:
    """The emulator in-process: `start()`, then `url`; `stop()` terminates every worker."""

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        logger: Logger | None = None,
    ) -> None:
        self._logger = logger or Logger({"component": "vertex-emulator"})
        self._service = VertexService(config or EmulatorConfig(), self._logger)
        self._server = _EmulatorHTTPServer((host, port), self._service, self._logger)
        self._host = host
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def start(self) -> VertexEmulator:
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": _SHUTDOWN_POLL_SECONDS},
            name="vertex-emulator-http",
            daemon=True,
        )
        self._thread.start()
        self._logger.info("vertex emulator serving", url=self.url)
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join()
            self._thread = None
        self._server.server_close()
        self._service.close()

    def __enter__(self) -> VertexEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m devstack.vertex.emulator", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--project", help="refuse requests for other projects")
    parser.add_argument("--project-number", help="name jobs with this number, as Vertex does")
    parser.add_argument("--events-topic", help="projects/P/topics/T for ml_job log entries")
    parser.add_argument("--no-log-sink", action="store_true", help="publish no log entries")
    parser.add_argument("--max-running", type=int, default=8)
    parser.add_argument("--queued-seconds", type=float, default=0.2)
    parser.add_argument("--pending-seconds", type=float, default=0.2)
    parser.add_argument("--grace-seconds", type=float, default=2.0)
    parser.add_argument(
        "--signals",
        choices=PROFILES,
        default=DEFAULT_PROFILE,
        help="documented: only what Google documents (default); rich: also invented signals",
    )
    parser.add_argument(
        "--error-delay-seconds",
        type=float,
        default=None,
        help="set a failed job's error this long after its final state (default: the profile's; "
        "documented 60, Vertex's 'about a minute'; rich 0)",
    )
    parser.add_argument(
        "--preemption-rate",
        type=float,
        default=0.0,
        help="random Spot preemptions per minute of running time, per job",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--quota-submissions-per-minute",
        type=int,
        default=DEFAULT_SUBMISSIONS_PER_MINUTE,
        help="custom job creates per project and region in any minute, then 429 RESOURCE_EXHAUSTED "
        f"(Vertex AI's documented quota, {DEFAULT_SUBMISSIONS_PER_MINUTE}; 0: off)",
    )
    parser.add_argument(
        "--quota-crud-per-minute",
        type=int,
        default=DEFAULT_CRUD_PER_MINUTE,
        help="get, list and cancel calls per project and region in any minute "
        f"(Vertex AI's documented quota, {DEFAULT_CRUD_PER_MINUTE}; 0: off)",
    )
    add_mode_arguments(parser)
    parser.add_argument(
        "--gcs-fuse-dir",
        default=None,
        help="mirror each job's AIP_CHECKPOINT_DIR here, as Vertex's /gcs/ mount (devstack.vertex.fuse)",
    )
    return parser.parse_args(argv)


def _config_from(args: argparse.Namespace) -> EmulatorConfig:
    """Raises ValueError for values EmulatorConfig refuses."""
    return EmulatorConfig(
        project=args.project,
        project_number=args.project_number,
        events_topic=args.events_topic,
        log_sink_enabled=not args.no_log_sink,
        max_running=args.max_running,
        queued_seconds=args.queued_seconds,
        pending_seconds=args.pending_seconds,
        grace_seconds=args.grace_seconds,
        error_delay_seconds=args.error_delay_seconds,
        preemption_rate_per_minute=args.preemption_rate,
        seed=args.seed,
        signals=args.signals,
        quota_submissions_per_minute=args.quota_submissions_per_minute,
        quota_crud_per_minute=args.quota_crud_per_minute,
        gcs_fuse_dir=args.gcs_fuse_dir,
        replica_modes=modes_from_args(args),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        config = _config_from(args)
    except ValueError as error:
        sys.stderr.write(f"vertex_emulator: {error}\n")
        return 2
    stop_requested = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    emulator = VertexEmulator(config, host=args.host, port=args.port).start()
    sys.stdout.write(json.dumps({"port": emulator.port, "url": emulator.url}) + "\n")
    sys.stdout.flush()
    stop_requested.wait()
    emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
