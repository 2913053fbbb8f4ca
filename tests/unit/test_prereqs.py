"""`make demo` / `make test` on a fresh machine: what is missing is said in one message, first."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools import check_prereqs

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "check_prereqs.py"


def bin_dir(tmp_path: Path, *tools: str) -> Path:
    """A PATH with the real Python as python3 and the named tools, nothing else."""
    path = tmp_path / "bin"
    path.mkdir()
    (path / "python3").symlink_to(os.path.realpath(sys.executable))
    for tool in tools:
        found = shutil.which(tool)
        assert found, tool
        (path / tool).symlink_to(found)
    return path


def test_without_gcloud_and_java_one_line_says_what_to_install_and_how(tmp_path: Path) -> None:
    path = bin_dir(tmp_path)
    result = subprocess.run(
        [str(path / "python3"), str(SCRIPT)], env={"PATH": str(path)}, capture_output=True, text=True
    )
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("spotjobs needs the Google Cloud CLI with its Pub/Sub emulator")
    assert "apt-get install google-cloud-cli google-cloud-cli-pubsub-emulator" in lines[0]
    assert "Java 11 or newer" in lines[0] and "default-jre-headless" in lines[0]
    assert "Traceback" not in result.stderr


def test_gcloud_without_its_emulator_component_is_named(tmp_path: Path) -> None:
    sdk = tmp_path / "sdk" / "bin"
    sdk.mkdir(parents=True)
    (sdk / "gcloud").write_text("#!/bin/sh\n")
    assert check_prereqs.gcloud_problem(lambda name: str(sdk / name)) == check_prereqs.EMULATOR_HELP
    (tmp_path / "sdk" / "platform" / "pubsub-emulator" / "bin").mkdir(parents=True)
    (tmp_path / "sdk" / "platform" / "pubsub-emulator" / "bin" / "cloud-pubsub-emulator").write_text("")
    assert check_prereqs.gcloud_problem(lambda name: str(sdk / name)) is None


def test_an_old_python_is_named_with_the_version_needed() -> None:
    assert check_prereqs.python_problem((3, 11, 0)) is None
    assert check_prereqs.python_problem((3, 9, 2)).startswith("Python 3.11+ (this is 3.9")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_demo_and_make_test_stop_at_the_message(tmp_path: Path) -> None:
    path = bin_dir(tmp_path, "make")
    for target in ("demo", "test"):
        result = subprocess.run(
            ["make", "-s", target], cwd=REPO, env={"PATH": str(path)}, capture_output=True, text=True, timeout=60
        )
        assert result.returncode != 0
        assert result.stderr.startswith("spotjobs needs the Google Cloud CLI"), result.stderr
        assert "Traceback" not in result.stderr and result.stdout == ""
