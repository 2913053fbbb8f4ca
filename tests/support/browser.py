"""A real headless browser for tests: Debian's Chromium, run once per page.

`render(path)` loads a local file with no network and returns the DOM after parsing and layout
(`--dump-dom`) and every console message the page produced: Chromium writes them to stderr as
`...:CONSOLE:<line>] "<text>", source: <url> (<line>)` with `--enable-logging=stderr --v=0`
(levels are not told apart there, so a page without scripts must produce none at all).
Tests skip with the reason when Chromium is absent locally; in CI (`CI=true`, where `.ci/run`
installs it) they fail instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-extensions",
    "--enable-logging=stderr",
    "--v=0",
)
CONSOLE = re.compile(r":CONSOLE(?:\(\d+\))?:?\d*\]\s*(.*)$")


@dataclass(frozen=True)
class Rendered:
    dom: str
    console: list[str]
    screenshot_bytes: int


def chromium() -> str:
    """The browser's path; skips (fails in CI) when there is none."""
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    message = "Chromium is not installed: `apt-get install -y chromium` (Debian) to run the browser tests"
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(message)
    pytest.skip(message)


def _run(browser: str, profile: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def render(page: Path) -> Rendered:
    browser = chromium()
    url = page.resolve().as_uri()
    with tempfile.TemporaryDirectory(prefix="spotjobs-chromium-") as profile:
        dumped = _run(browser, profile, "--dump-dom", url)
        assert dumped.returncode == 0, dumped.stderr[-2000:]
        shot = Path(profile) / "page.png"
        captured = _run(browser, profile, f"--screenshot={shot}", "--window-size=1280,2000", url)
        assert captured.returncode == 0, captured.stderr[-2000:]
        size = shot.stat().st_size if shot.exists() else 0
    console = [m.group(1) for line in (dumped.stderr + captured.stderr).splitlines() if (m := CONSOLE.search(line))]
    return Rendered(dom=dumped.stdout, console=console, screenshot_bytes=size)
