"""The command line as people expect it: --version, an example in every command's --help, the exit
statuses documented."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version

import pytest

from spotjobs.cli import build_parser, main


def commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*path, name))


def test_version() -> None:
    out = subprocess.run([sys.executable, "-m", "spotjobs.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == f"spotjobs {version('spotjobs')}"


@pytest.mark.parametrize("path", [p for p, _ in commands(build_parser())], ids=lambda p: " ".join(p) or "spotjobs")
def test_every_command_has_help_with_an_example(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*path, "--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    assert "examples:" in text, f"`spotjobs {' '.join(path)} --help` shows no example"
    example_lines = text.split("examples:", 1)[1].strip().splitlines()
    assert example_lines and all("spotjobs" in line for line in example_lines)
    assert any(" ".join(path) in line for line in example_lines) or not path


def test_exit_statuses_are_documented_in_the_top_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "0 success" in text and "1 failure" in text and "2 invalid input or usage" in text


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["status", "--no-such-flag"])
    assert exited.value.code == 2


@pytest.mark.parametrize("flag", ["--triggers-every", "--reconcile-every", "--prune-every"])
@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_local_up_refuses_a_schedule_that_is_not_a_positive_number_of_seconds(flag: str, value: str, capsys) -> None:
    from spotjobs.cli import build_parser

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["local", "up", flag, value])
    assert exited.value.code == 2
    assert "positive number of seconds" in capsys.readouterr().err
