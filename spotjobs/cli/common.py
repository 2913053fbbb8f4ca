"""What every `spotjobs` command shares: exit statuses, how a command is added (its `--help`
keeps its description as written and ends with examples), and how text others wrote is shown."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from typing import Any

EXIT_OK = 0  # success
EXIT_FAILED = 1  # the command ran and failed, or what it was asked about does not exist
EXIT_INVALID = 2  # invalid input or usage
# What a shell reports for a command killed by SIGINT (128 + 2) or SIGPIPE (128 + 13).
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_BROKEN_PIPE = 141  # the reader of its output went away (`spotjobs ... | head`)


def command(
    subparsers: argparse._SubParsersAction,
    name: str,
    *,
    examples: Sequence[str] = (),
    **options: Any,
) -> argparse.ArgumentParser:
    """Add command `name` (`options` as for `add_parser`); its `--help` ends with `examples`."""
    return subparsers.add_parser(
        name,
        epilog=examples_epilog(*examples) if examples else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **options,
    )


def examples_epilog(*commands: str) -> str:
    """The end of a command's `--help`: one or more examples."""
    return "examples:\n" + "\n".join(f"  {command}" for command in commands)


# C0 and C1 controls and DEL (escape sequences, bells, carriage returns, newlines that would fake
# a line) and the bidirectional overrides and isolates (which reorder what a reader sees).
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_text(value: object) -> str:
    """`value` as text safe to print: every control character escaped as Python writes it (`\\x1b`,
    `\\n`, `\\u202e`). For every field a publisher or a job wrote (a request's fields quoted by
    a violation, an error, a log line, a dead letter's data): shown as text, never obeyed by the
    terminal."""
    return _CONTROLS.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), str(value))
