"""The framework venv's interpreter, for the kill-and-resume tests and the kit's; a framework
script as those tests build it (a child script from tests/frameworks/children/ plus the README's
snippet), for the stack's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


FRAMEWORK_PYTHON = REPO / ".venv-frameworks" / "bin" / "python"


def framework_python() -> str:
    if not FRAMEWORK_PYTHON.exists():
        pytest.fail(f"{FRAMEWORK_PYTHON.relative_to(REPO)} is missing: `make .venv-frameworks` (run by `make test`)")
    return str(FRAMEWORK_PYTHON)


CHILDREN = REPO / "tests" / "frameworks" / "children"


def readme_snippet(name: str) -> str:
    """The code block under `<!-- snippet: NAME -->` in README.md, exactly."""
    found = re.search(
        rf"<!-- snippet: {re.escape(name)} -->\n```python\n(.*?)```\n", (REPO / "README.md").read_text(), re.S
    )
    assert found, f"README.md has no snippet {name!r}"
    return found.group(1)


def write_framework_script(folder: Path, child: str, snippet: str) -> Path:
    """`children/<child>` with README snippet `snippet` appended, and the `common.py` it imports,
    in `folder`; returns the script's path."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / child
    script.write_text((CHILDREN / child).read_text() + "\n" + readme_snippet(snippet))
    (folder / "common.py").write_text((CHILDREN / "common.py").read_text())
    return script
