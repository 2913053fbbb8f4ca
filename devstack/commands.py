"""Local-only CLI commands: `spotjobs local up` (and `spotjobs demo`, registered by devstack.demo)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any


def register(subparsers: Any) -> None:
    local = subparsers.add_parser("local", help="run the embedded stack on this machine")
    local_commands = local.add_subparsers(dest="local_command", required=True, metavar="COMMAND")
    up = local_commands.add_parser(
        "up",
        help="start Pub/Sub and GCS emulators, the Vertex AI emulator and every function",
        description="Starts the whole embedded stack, prints the environment a shell needs, and "
        "runs until Ctrl-C or SIGTERM, then stops every process it started.",
    )
    up.add_argument("--json", action="store_true", help="print one JSON line once ready")
    up.add_argument("--project", default=None, help="project id for the emulators")
    up.add_argument(
        "--vertex-arg",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag for the Vertex emulator, e.g. --vertex-arg=--preemption-rate=2",
    )
    up.add_argument(
        "--reconcile-every", type=float, default=30.0, metavar="SECONDS",
        help="publish {\"task\": \"reconcile\"} to maintenance this often, as Cloud Scheduler does",
    )
    up.add_argument(
        "--prune-every", type=float, default=300.0, metavar="SECONDS",
        help="publish {\"task\": \"prune\"} to maintenance this often",
    )
    up.set_defaults(run=run_local_up)
    try:
        from devstack.demo import cli as demo
    except ModuleNotFoundError as exc:
        if exc.name != "devstack.demo":
            raise
    else:
        demo.register(subparsers)


def run_local_up(args: argparse.Namespace) -> int:
    from devstack.stack import DEFAULT_PROJECT, Stack, StackOptions

    stopping = threading.Event()

    def request_stop(signum: int, frame: object) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    started = time.monotonic()
    stack = Stack(
        StackOptions(
            project=args.project or DEFAULT_PROJECT,
            vertex_args=tuple(args.vertex_arg),
            schedule={"reconcile": args.reconcile_every, "prune": args.prune_every},
        )
    )
    try:
        stack.start()
        if stopping.is_set():
            return 130
        description = stack.describe()
        if args.json:
            print(json.dumps(description), flush=True)
        else:
            _print_human(description, time.monotonic() - started)
        while not stopping.wait(0.5):
            pass
    finally:
        stack.stop()
    if not args.json:
        print("stopped every process of the embedded stack", file=sys.stderr)
    return 0


def _print_human(description: dict[str, Any], seconds: float) -> None:
    print(f"# spotjobs embedded stack ready in {seconds:.1f} s; paste into a shell:")
    for key, value in sorted(description["env"].items()):
        print(f"export {key}={value}")
    print("# functions:")
    for name, url in description["functions"].items():
        print(f"#   {name:<18} {url}")
    print(f"# Vertex AI emulator: {description['vertex_endpoint']}")
    print(f"# logs: {description['logs']}")
    print("# Ctrl-C stops everything.", flush=True)
