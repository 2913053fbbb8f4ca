"""The `spotjobs` command line: every subcommand is registered here, in this package.

- `requests`: validate, submit, status, resubmit
- `cancel`: cancel
- `prune`: prune
- `local`: local up, demo (the embedded stack)
- `ops`: alerts, dead-letters (the ops rotation's topics)
- `report`: report (the HTML page)
- `logs`: logs (the trainer's output of a request)
- `dashboard`: dashboard (the local web app, spotjobs/dashboard/)
- `triggers`: triggers apply, list, test, delete
- `watch`: watch (a request's notifications)

Each module exposes `register(subparsers)`: a plug-in interface, so it is the one name every
command module defines (tests/unit/test_names.py allows it and nothing else twice in `shared/`);
what runs a command is named for it (`run_report`, `run_explain`, ...). A module imports heavy
libraries only inside the function that runs a command, so `spotjobs --help` stays instant. This package is the only code under
`shared/` that may name `devstack`, and only `local` does, inside its run functions: the deploy
zip ships `shared/` without `devstack/`, and there `local up` and `demo` say how to get the local
stack instead of failing (exit 2).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from spotjobs.cli import (
    cancel,
    dashboard,
    explain,
    fleet,
    local,
    logs,
    ops,
    prune,
    report,
    requests,
    status,
    triggers,
    watch,
)
from spotjobs.cli.common import EXIT_BROKEN_PIPE, EXIT_FAILED, EXIT_INTERRUPTED, terminal_text

COMMAND_MODULES = (
    requests,
    status,
    watch,
    cancel,
    logs,
    prune,
    ops,
    report,
    explain,
    fleet,
    dashboard,
    triggers,
    local,
)

EPILOG = """exit status: 0 success; 1 failure (not found, or the command ran and reported errors);
2 invalid input or usage, or (local up, demo) the local stack is not installed;
130 interrupted (Ctrl-C); 141 the reader of its output went away (e.g. `| head`).

examples:
  spotjobs validate request.json
  spotjobs submit request.json && spotjobs status --watch resnet-nightly-001
  spotjobs alerts --follow
  spotjobs <command> --help"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spotjobs",
        description="Spot-VM training on Vertex AI that survives preemption.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"spotjobs {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("spotjobs")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. A reader that went away (`spotjobs ... | head`) or Ctrl-C ends it quietly,
    with the status a shell expects, never a traceback; so does an error spotjobs raises on purpose
    that the command leaves to it (a ledger record that cannot be read): its message, exit 1."""
    from shared.errors import SpotjobsError

    args = build_parser().parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except SpotjobsError as exc:
        print(f"spotjobs: {terminal_text(str(exc))}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's flush at exit does not fail on the closed
    pipe again (the Python docs' recipe for SIGPIPE: library/signal.html, "Note on SIGPIPE")."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):  # stdout replaced or already closed
        pass
    finally:
        os.close(devnull)
