"""Reading pip's failures, for the deploy-zip and kit install tests."""

from __future__ import annotations

import subprocess

import pytest

NETWORK_ERRORS = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Name or service not known",
    "Network is unreachable",
    "No route to host",
    "ConnectTimeoutError",
    "Connection refused",
    "ProxyError",
    "Read timed out",
)


def pip_failure(result: subprocess.CompletedProcess[str], what: str) -> None:
    output = result.stdout + result.stderr
    network = next((marker for marker in NETWORK_ERRORS if marker in output), None)
    if network is not None:
        lines = [line for line in output.splitlines() if network in line]
        pytest.skip(f"pip cannot reach the package registry ({what}): {lines[0].strip()[:300]}")
    pytest.fail(f"{what} failed ({result.returncode}):\n{output[-6000:]}")
