"""The framework venv's interpreter, for the kill-and-resume tests and the kit's."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


FRAMEWORK_PYTHON = REPO / ".venv-frameworks" / "bin" / "python"


def framework_python() -> str:
    if not FRAMEWORK_PYTHON.exists():
        pytest.fail(f"{FRAMEWORK_PYTHON.relative_to(REPO)} is missing: `make .venv-frameworks` (run by `make test`)")
    return str(FRAMEWORK_PYTHON)
