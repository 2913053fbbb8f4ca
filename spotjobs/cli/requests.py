"""`spotjobs validate | submit | resubmit`: job requests from the command line (`status` is
spotjobs/cli/status.py).

- `validate FILE` is offline (no network, no credentials): it applies the configured policy and
  prints the CustomJob that attempt 1 would create; `--show-policy` prints the effective policy.
  Exit 0 valid, 2 invalid (one violation per line on stderr) or unreadable.
- `submit FILE` validates the same way first (nothing is published when invalid), then publishes
  to job-requests (PUBSUB_EMULATOR_HOST is honoured; otherwise Application Default Credentials).
- `resubmit REQUEST_ID` runs a request that ended FAILED, GAVE_UP or CANCELLED again, as a new
  request: its canonical body (`record.request`) published under a new id (`--new-id`, default
  `<id>-r2`, `-r3`, ..., the first the ledger does not hold and whose folder is empty). Never a
  new attempt under the same id: a request id names one run, whose record and jobs stay as they
  ended. The checkpoint it resumes from is copied and checked first (spotjobs/resume.py).

Heavy libraries are imported inside the commands, so `spotjobs --help` stays instant.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from spotjobs.cli.common import EXIT_FAILED, EXIT_INVALID, EXIT_OK, command

if TYPE_CHECKING:
    from shared.requests.envelope import JobRequest
    from shared.settings import Settings

PUBLISH_TIMEOUT_SECONDS = 60.0
# The statuses a request may be resubmitted from: it ended without succeeding.
RESUBMITTABLE = ("FAILED", "GAVE_UP", "CANCELLED")


def register(subparsers: argparse._SubParsersAction) -> None:
    validate = command(
        subparsers,
        "validate",
        help="check a job request offline and print the CustomJob it would create",
        description="Offline (no network, no credentials): applies the configured request policy and "
        "prints the CustomJob attempt 1 would create. Exits 0 when valid, 2 when invalid (every "
        "violation on stderr, one per line) or unreadable.",
        examples=[
            "spotjobs validate request.json",
            "spotjobs validate --show-policy",
            "cat body.json | spotjobs validate - --request-id resnet-001",
        ],
    )
    _add_request_arguments(validate, file_optional=True)
    validate.add_argument(
        "--show-policy",
        action="store_true",
        help="print the effective request policy (what a publisher may set, and its limits)",
    )
    validate.set_defaults(run=run_validate)

    submit = command(
        subparsers,
        "submit",
        help="validate a job request, then publish it to job-requests",
        description="Validates like `validate` (nothing is published when invalid: exit 2), then "
        "publishes to job-requests: the emulator when PUBSUB_EMULATOR_HOST is set, else Google Cloud.",
        examples=[
            "spotjobs submit request.json",
            "spotjobs submit body.json --request-id resnet-001 --attribute team=vision --json",
        ],
    )
    _add_request_arguments(submit)
    submit.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    submit.add_argument("--json", action="store_true", help="print {request_id, message_id} as JSON")
    submit.set_defaults(run=run_submit)

    resubmit = command(
        subparsers,
        "resubmit",
        help="run a FAILED, GAVE_UP or CANCELLED request again, under a new request id",
        description="Reads the request from the ledger (it must have ended FAILED, GAVE_UP or "
        "CANCELLED, else exit 2), validates its body against today's policy (exit 2 when invalid) "
        "and publishes it to job-requests under a new request id: --new-id, or <id>-r2, <id>-r3, "
        "... (the first the ledger does not hold and whose folder is empty; a --new-id whose "
        "folder holds anything: exit 2). The old request keeps its record and jobs. "
        "It resumes: the newest complete checkpoint of the old request is copied into the new "
        "request's folder first and checked (--fresh: start from step 0). "
        "Exits 1 when the request is not in the ledger, or the copy does not check out "
        "(nothing is published).",
        examples=[
            "spotjobs resubmit resnet-nightly-001",
            "spotjobs resubmit resnet-nightly-001 --new-id resnet-nightly-001b --json",
        ],
    )
    resubmit.add_argument("request_id", help="the request that ended FAILED, GAVE_UP or CANCELLED")
    resubmit.add_argument(
        "--new-id",
        help="the new request's id (default: <id>-r2, -r3, ... the first not in the ledger, with an empty folder)",
    )
    resubmit.add_argument("--project", help="Google Cloud project (default: GOOGLE_CLOUD_PROJECT)")
    resubmit.add_argument(
        "--fresh",
        action="store_true",
        help="start from step 0 instead of the old request's newest complete checkpoint",
    )
    resubmit.add_argument(
        "--json",
        action="store_true",
        help="print {request_id, message_id, topic, resubmitted_from, resumed_from} as JSON",
    )
    resubmit.set_defaults(run=run_resubmit)


def _add_request_arguments(parser: argparse.ArgumentParser, file_optional: bool = False) -> None:
    parser.add_argument(
        "file",
        nargs="?" if file_optional else None,
        help="the job request (envelope or bare CustomJob body) as JSON; - for stdin",
    )
    parser.add_argument("--request-id", help="request id for a bare CustomJob body (default: generated)")
    parser.add_argument(
        "--attribute",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a message attribute (repeatable)",
    )


# validate


def run_validate(args: argparse.Namespace) -> int:
    from shared.settings import get_settings

    settings = get_settings()
    if args.show_policy:
        from shared.requests.policy import describe_policy

        json.dump({"policy": describe_policy(settings)}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        if args.file is None:
            return EXIT_OK
    elif args.file is None:
        print("spotjobs validate: a request FILE (or --show-policy) is required", file=sys.stderr)
        return EXIT_INVALID
    prepared = _prepare(args, settings)
    if prepared is None:
        return EXIT_INVALID
    request, _, _ = prepared
    json.dump(describe_first_attempt(request, settings), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return EXIT_OK


def describe_first_attempt(request: JobRequest, settings: Settings) -> dict[str, Any]:
    """The normalized request and the CustomJob its first attempt would create."""
    from shared.adapters.vertex import build_job_json, parent_path, to_custom_job, to_job_json
    from shared.requests.attempts import plan_attempt
    from shared.requests.envelope import canonical_envelope

    envelope = canonical_envelope(
        request,
        default_location=settings.location,
        default_max_attempts=settings.default_max_attempts,
    )
    location, strategy = plan_attempt(envelope, 1, None, after_stockout=False)
    job_json = build_job_json(
        envelope["custom_job"],
        request_id=envelope["request_id"],
        attempt=1,
        strategy=strategy,
        output_dir=settings.output_dir_for(envelope["request_id"]),
        deployment=settings.deployment_label,
        commit_markers=settings.commit_markers,
        service_account=settings.training_service_account,
    )
    return {
        "request_id": envelope["request_id"],
        "attempt": 1,
        "location": location,
        "strategy": strategy,
        "parent": parent_path(settings.project, location),
        "custom_job": to_job_json(to_custom_job(job_json)),  # round-trip: exactly what the API gets
        "request": envelope,
        "hourly_price": hourly_price(envelope, location),
    }


def hourly_price(envelope: dict[str, Any], location: str) -> dict[str, Any]:
    """What an hour of the job costs where attempt 1 runs (every replica of every pool: the price
    table), or why it is unknown: never 0."""
    from shared.requests.pricing import hourly, layout, layout_hourly, table

    prices = layout_hourly(envelope, location)
    as_of = table()["as_of"]
    if prices is None:
        missing = [f"{m or '?'} in {location}" for m, _ in layout(envelope) if hourly(m, location) is None]
        return {
            "unknown": f"no price for {', '.join(missing) or 'a job without worker pools'} in the price table (as of {as_of})"
        }
    return {"spot_usd": round(prices[0], 4), "on_demand_usd": round(prices[1], 4), "prices_as_of": as_of}


def _prepare(args: argparse.Namespace, settings: Settings) -> tuple[JobRequest, bytes, dict[str, str]] | None:
    """Read, name and validate the request; None (after saying why on stderr) when unusable."""
    from shared.requests.envelope import InvalidJobRequest, read_request
    from shared.requests.policy import validate_request

    data = _read_input(args.file)
    if data is None:
        return None
    attributes = _parse_attributes(args.attribute)
    if attributes is None:
        return None
    if args.request_id:
        attributes["request_id"] = args.request_id
    if "request_id" not in attributes:
        # A bare body needs a name the user can look up later; an envelope carries its own.
        shape = read_request(
            data,
            attributes=attributes,
            max_bytes=settings.max_request_bytes,
        )[0]
        if shape.shape == "bare":
            attributes["request_id"] = generate_request_id()
        elif shape.shape == "envelope" and shape.request_id:
            attributes["request_id"] = shape.request_id
    try:
        request = validate_request(data, attributes=attributes, settings=settings)
    except InvalidJobRequest as exc:
        for violation in exc.violations:
            print(violation, file=sys.stderr)
        return None
    return request, data, attributes


def generate_request_id() -> str:
    """A name for a bare body `spotjobs submit` publishes; not `req-`, which spotjobs reserves for
    the ids it derives itself."""
    return f"cli-{uuid.uuid4().hex[:12]}"


def _read_input(path: str) -> bytes | None:
    try:
        if path == "-":
            return sys.stdin.buffer.read()
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        print(f"cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return None


def _parse_attributes(pairs: Sequence[str]) -> dict[str, str] | None:
    attributes: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            print(f"--attribute {pair!r}: expected KEY=VALUE", file=sys.stderr)
            return None
        attributes[key] = value
    return attributes


# submit


def run_submit(args: argparse.Namespace) -> int:
    from shared.settings import get_settings

    settings = get_settings()
    prepared = _prepare(args, settings)
    if prepared is None:
        return EXIT_INVALID
    request, data, attributes = prepared
    from google.cloud import pubsub_v1

    project = args.project or settings.project
    topic = f"projects/{project}/topics/{settings.job_requests_topic}"
    future = pubsub_v1.PublisherClient().publish(topic, data, **attributes)
    message_id = future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
    if args.json:
        json.dump({"request_id": request.request_id, "message_id": message_id, "topic": topic}, sys.stdout)
        sys.stdout.write("\n")
    else:
        print(f"request_id: {request.request_id}")
        print(f"message_id: {message_id}")
    return EXIT_OK


# resubmit


def run_resubmit(args: argparse.Namespace) -> int:
    from shared.ledger.store import LedgerStore
    from shared.requests.envelope import InvalidJobRequest
    from shared.requests.policy import validate_request
    from shared.requests.request_ids import is_valid_request_id
    from shared.settings import get_settings

    settings = get_settings()
    from google.cloud import pubsub_v1, storage

    from spotjobs.resume import CheckpointCarrier, ResumeError

    project = args.project or settings.project
    client = storage.Client(project=project)
    ledger = LedgerStore(client.bucket(settings.state_bucket))
    carrier = CheckpointCarrier(client, settings)
    record = ledger.get(args.request_id)
    if record is None:
        print(f"no request {args.request_id} in gs://{settings.state_bucket}", file=sys.stderr)
        return EXIT_FAILED
    if record.status not in RESUBMITTABLE:
        print(
            f"spotjobs resubmit: {args.request_id} is {record.status}; only a request that ended "
            f"{', '.join(RESUBMITTABLE[:-1])} or {RESUBMITTABLE[-1]} can be resubmitted",
            file=sys.stderr,
        )
        return EXIT_INVALID
    if args.new_id is not None:
        new_id = args.new_id
        if not is_valid_request_id(new_id):
            print(
                f"spotjobs resubmit: --new-id {new_id!r} is not a valid request id (a lowercase "
                "letter, then at most 62 lowercase letters, digits, '_' or '-')",
                file=sys.stderr,
            )
            return EXIT_INVALID
        if ledger.get(new_id) is not None:
            print(f"spotjobs resubmit: {new_id} is already in the ledger; choose another --new-id", file=sys.stderr)
            return EXIT_INVALID
        if not carrier.folder_empty(new_id):
            print(
                f"spotjobs resubmit: {new_id}'s folder {carrier.folder_uri(new_id)} is not empty (another "
                "run's checkpoints, which the new request would resume from); choose another --new-id",
                file=sys.stderr,
            )
            return EXIT_INVALID
    else:
        new_id = next_resubmit_id(
            args.request_id, lambda candidate: ledger.get(candidate) is not None or not carrier.folder_empty(candidate)
        )
        if new_id is None:
            print(
                f"spotjobs resubmit: {args.request_id}-r<N> would not be a valid request id; "
                "name the new request with --new-id",
                file=sys.stderr,
            )
            return EXIT_INVALID
    envelope = {**record.request, "request_id": new_id}
    data = json.dumps(envelope, separators=(",", ":")).encode()
    attributes = {"request_id": new_id}
    try:
        validate_request(data, attributes=attributes, settings=settings)
    except InvalidJobRequest as exc:
        for violation in exc.violations:
            print(violation, file=sys.stderr)
        return EXIT_INVALID
    carried = None
    if not args.fresh:
        try:
            carried = carrier.carry(args.request_id, new_id)
        except ResumeError as exc:
            print(f"spotjobs resubmit: {exc}; nothing was published", file=sys.stderr)
            return EXIT_FAILED
    topic = f"projects/{project}/topics/{settings.job_requests_topic}"
    future = pubsub_v1.PublisherClient().publish(topic, data, **attributes)
    message_id = future.result(timeout=PUBLISH_TIMEOUT_SECONDS)
    if args.json:
        json.dump(
            {
                "request_id": new_id,
                "message_id": message_id,
                "topic": topic,
                "resubmitted_from": args.request_id,
                "resumed_from": carried.to_json() if carried else None,
            },
            sys.stdout,
        )
        sys.stdout.write("\n")
    else:
        print(f"request_id: {new_id}")
        print(f"message_id: {message_id}")
        if carried:
            print(f"resumes from: {args.request_id}'s checkpoint {carried.name} (step {carried.step})")
        else:
            print("starts from step 0" + (" (--fresh)" if args.fresh else f": {args.request_id} has no checkpoint"))
    return EXIT_OK


# How many `-rN` ids `resubmit` tries before asking for --new-id.
MAX_RESUBMISSIONS = 1000


def next_resubmit_id(request_id: str, taken: Callable[[str], bool]) -> str | None:
    """`<request_id>-r2`, `-r3`, ...: the first that `taken` (in the ledger, or a folder holding
    anything) says is free; None when such an id would be too long to be a request id (or a
    thousand are taken). An id spotjobs derived (`req-`, `trg-`: reserved, submit_job refuses them
    from publishers) gets `rs-` in front."""
    from shared.jobs import RESERVED_ID_PREFIXES
    from shared.requests.request_ids import is_valid_request_id

    base = f"rs-{request_id}" if request_id.startswith(RESERVED_ID_PREFIXES) else request_id
    for n in range(2, MAX_RESUBMISSIONS + 2):
        candidate = f"{base}-r{n}"
        if not is_valid_request_id(candidate):
            return None
        if not taken(candidate):
            return candidate
    return None
