"""What every `spotjobs` command shares: exit statuses and the examples at the end of `--help`."""

from __future__ import annotations

EXIT_OK = 0  # success
EXIT_FAILED = 1  # the command ran and failed, or what it was asked about does not exist
EXIT_INVALID = 2  # invalid input or usage


def examples(*commands: str) -> str:
    """The epilog of a command's `--help`: one or more examples (use RawDescriptionHelpFormatter)."""
    return "examples:\n" + "\n".join(f"  {command}" for command in commands)
