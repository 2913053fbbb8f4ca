"""The `spotjobs` command line.

Commands live in modules that each expose `register(subparsers)`. The local-only commands
(`local up`, `demo`) come from the dev stack package, which the deploy zip leaves out; when it is
absent they are simply not offered.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMAND_MODULES = (
    "shared.commands.requests",  # validate, submit, status
    "shared.commands.prune",  # prune
    "devstack.commands",  # local up, demo
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spotjobs",
        description="Spot-VM training on Vertex AI that survives preemption.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise  # a real import error inside the module: surface it
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
