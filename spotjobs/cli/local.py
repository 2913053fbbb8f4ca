"""`spotjobs local up | demo`: the embedded stack on this machine.

The stack and the demo themselves live in the `devstack` package, which only a checkout of the
repository has: the deploy zip and the functions ship `shared/` and `functions/` alone. So the
commands are always offered, `devstack` is imported only when one of them runs, and without it
they print one line saying how to get the local stack and exit 2 (EXIT_NO_LOCAL_STACK).

This is the only module under `shared/` that names `devstack`
(tests/unit/test_layering.py enforces it).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import signal
import sys
import threading
import time
from typing import Any

from spotjobs.cli.common import EXIT_INTERRUPTED, EXIT_INVALID, EXIT_OK, command

EXIT_NO_LOCAL_STACK = 2
DEMO_TIMEOUT_SECONDS = 150.0  # how long the demo waits for its eight requests to end
NO_LOCAL_STACK_HELP = (
    f"Exits {EXIT_NO_LOCAL_STACK} when the local stack (the devstack package) is not installed, "
    "as in the deployed package: run it from a checkout of the repository."
)


def register(subparsers: argparse._SubParsersAction) -> None:
    local = command(
        subparsers,
        "local",
        help="run the embedded stack on this machine",
        description=f"The embedded stack. {NO_LOCAL_STACK_HELP}",
        examples=["spotjobs local up", "spotjobs local up --json --reconcile-every 10"],
    )
    local_commands = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    up = command(
        local_commands,
        "up",
        help="start Pub/Sub and GCS emulators, the Vertex AI emulator and every function",
        description="Starts the whole embedded stack, prints the environment a shell needs, and "
        "runs until Ctrl-C or SIGTERM, then stops every process it started. " + NO_LOCAL_STACK_HELP,
        examples=[
            "spotjobs local up",
            "spotjobs local up --vertex-arg=--preemption-rate=2",
            "spotjobs local up --vertex-mode preemption_restarts=job --vertex-mode survivor_stop=sigkill",
        ],
    )
    up.add_argument("--json", action="store_true", help="print one JSON line once ready")
    up.add_argument("--project", default=None, help="project id for the emulators (default: the stack's own)")
    up.add_argument(
        "--vertex-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag for the Vertex emulator, e.g. --vertex-arg=--preemption-rate=2",
    )
    up.add_argument(
        "--vertex-mode",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="one of the Vertex emulator's modes for what Google does not document about multi-replica "
        "jobs (docs/local.md, 'Replicas and worker pools'), e.g. --vertex-mode preemption_restarts=job; "
        "repeatable",
    )
    up.add_argument(
        "--vertex-signals",
        choices=("documented", "rich"),
        default="documented",
        help="the Vertex emulator's signal profile: only what Google documents (default), or "
        "also the emulator's invented signals (a line per preemption, RUNNING -> PENDING on "
        "restart); reported as vertex_signals",
    )
    up.add_argument(
        "--quota-submissions-per-minute",
        type=int,
        metavar="N",
        help="the Vertex emulator's job creates per minute per region before 429 RESOURCE_EXHAUSTED "
        "(default: Vertex AI's documented quota, 60; 0: off); reported as vertex_quotas",
    )
    up.add_argument(
        "--quota-crud-per-minute",
        type=int,
        metavar="N",
        help="the Vertex emulator's get/list/cancel calls per minute per region (default: the documented 600; 0: off)",
    )
    up.add_argument(
        "--reconcile-every",
        type=positive_seconds,
        default=30.0,
        metavar="SECONDS",
        help='publish {"task": "reconcile"} to maintenance this often, as Cloud Scheduler does',
    )
    up.add_argument(
        "--prune-every",
        type=positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help='publish {"task": "prune"} to maintenance this often',
    )
    up.add_argument(
        "--triggers-every",
        type=positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help='publish {"task": "triggers"} to on_trigger\'s topic this often (closes due trigger windows; '
        "Cloud Scheduler's every minute in the deployment)",
    )
    up.set_defaults(run=run_local_up)

    demo = command(
        subparsers,
        "demo",
        help="play a scripted Spot-preemption scenario on the embedded stack and report on it",
        description="Starts the embedded stack, plays six job requests and a retraining trigger through the real functions "
        "(preemptions, a re-queue, a fallback to STANDARD, a duplicate, an invalid request, failing "
        "code), prunes checkpoints, stops the stack and reports outcomes, goodput and cost, and writes "
        "the HTML report (its path is printed). Exits 0 "
        "only when every scenario ended as designed, 1 otherwise. " + NO_LOCAL_STACK_HELP,
        examples=["spotjobs demo", "spotjobs demo --seed 3 --json --html /tmp/demo.html"],
    )
    demo.add_argument("--json", action="store_true", help="write the report as JSON on stdout")
    demo.add_argument("--seed", type=int, default=1, help="request ids, preemption plans and data (default 1)")
    demo.add_argument(
        "--html",
        metavar="FILE",
        help="where to write the HTML report (default: spotjobs-demo-seed<N>.html in the temp dir)",
    )
    demo.add_argument(
        "--timeout",
        type=float,
        default=DEMO_TIMEOUT_SECONDS,
        help=f"seconds to wait for every request to end (default {DEMO_TIMEOUT_SECONDS:.0f})",
    )
    demo.set_defaults(run=run_demo)


def positive_seconds(text: str) -> float:
    """A schedule's period: a finite number of seconds above 0 (0 would publish without pause)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return seconds


def local_stack_missing(command: str, make_target: str) -> bool:
    """True, after one line on stderr saying how to get it, when `devstack` is not installed.

    Only the absence of the `devstack` package itself counts: a module missing inside it, or a
    library it needs, is a real error and surfaces as one.
    """
    try:
        import devstack  # noqa: F401
    except ModuleNotFoundError as exc:
        if exc.name != "devstack":
            raise
        print(
            f"spotjobs {command}: the local stack is not installed: run from a checkout of the "
            f"repository (`make {make_target}`)",
            file=sys.stderr,
        )
        return True
    return False


# local up


def run_local_up(args: argparse.Namespace) -> int:
    if local_stack_missing("local up", "up"):
        return EXIT_NO_LOCAL_STACK
    from devstack.stack import DEFAULT_PROJECT, Stack, StackOptions

    try:
        mode_flags = vertex_mode_flags(args.vertex_mode)
    except ValueError as error:
        print(f"spotjobs local up: --vertex-mode: {error}", file=sys.stderr)
        return EXIT_INVALID

    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    started = time.monotonic()
    stack = Stack(
        StackOptions(
            project=args.project or DEFAULT_PROJECT,
            vertex_args=(*mode_flags, *args.vertex_arg),
            vertex_signals=args.vertex_signals,
            **quota_options(args),
            schedule=local_up_schedule(args),
        )
    )
    try:
        stack.start()
        if stopping.is_set():
            return EXIT_INTERRUPTED
        description = stack.describe()
        if args.json:
            print(json.dumps(description), flush=True)
        else:
            print_ready(description, time.monotonic() - started)
        while not stopping.wait(0.5):
            pass
    finally:
        stack.stop()
    if not args.json:
        print("stopped every process of the embedded stack", file=sys.stderr)
    return EXIT_OK


def vertex_mode_flags(pairs: list[str]) -> tuple[str, ...]:
    """`NAME=VALUE` modes (`devstack.vertex.modes`) as the Vertex emulator's flags; ValueError
    naming what is not a mode or not one of its values."""
    from devstack.vertex.modes import ReplicaModes, parse_modes

    chosen: dict[str, str] = {}
    for pair in pairs:
        name, equals, value = pair.partition("=")
        if not equals or not name or not value:
            raise ValueError(f"{pair!r} is not NAME=VALUE")
        chosen[name.strip()] = value.strip()
    modes = parse_modes(chosen, ReplicaModes()).to_json()
    return tuple(f"--{name.replace('_', '-')}={modes[name]}" for name in chosen)


def local_up_schedule(args: argparse.Namespace) -> dict[str, float]:
    """What `local up` has the stack's scheduler publish, like the deployment's Cloud Scheduler
    jobs (terraform/scheduler.tf): reconcile and prune to maintenance, the triggers tick."""
    return {"reconcile": args.reconcile_every, "prune": args.prune_every, "triggers": args.triggers_every}


def quota_options(args: argparse.Namespace) -> dict[str, int]:
    """The quota flags given, as StackOptions fields (unset: the stack's documented defaults)."""
    given = {
        "vertex_quota_submissions_per_minute": args.quota_submissions_per_minute,
        "vertex_quota_crud_per_minute": args.quota_crud_per_minute,
    }
    return {name: value for name, value in given.items() if value is not None}


def print_ready(description: dict[str, Any], seconds: float) -> None:
    print(f"# spotjobs embedded stack ready in {seconds:.1f} s; paste into a shell:")
    for key, value in sorted(description["env"].items()):
        # Quoted: some settings hold spaces and regex characters (the stockout and preemption patterns).
        print(f"export {key}={shlex.quote(value)}")
    print("# functions:")
    for name, url in description["functions"].items():
        print(f"#   {name:<18} {url}")
    quotas = description["vertex_quotas"]
    print(
        f"# Vertex AI emulator: {description['vertex_endpoint']} (signals: {description['vertex_signals']}; "
        f"quotas per minute: {quotas['submissions_per_minute']} creates, {quotas['crud_per_minute']} CRUD, 0 = off)"
    )
    print(f"# logs: {description['logs']}")
    print("# Ctrl-C stops everything.", flush=True)


# demo


def run_demo(args: argparse.Namespace) -> int:
    if local_stack_missing("demo", "demo"):
        return EXIT_NO_LOCAL_STACK
    from devstack.demo.cli import run_demo as play

    return play(args)
