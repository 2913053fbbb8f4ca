"""Only the CLI may name the dev stack.

The deploy zip ships `shared/` and `functions/` without `devstack/`, so nothing they run may need
it. The `spotjobs` command line (`shared/cli/`) is the one exception, for `local up` and `demo`,
and even there `devstack` is imported only inside the function that runs a command, so every
other command works without it. "Names" means an import statement or a string that is a
`devstack` module name (what importlib.import_module, __import__ or find_spec would be given).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_PACKAGE = REPO_ROOT / "shared" / "cli"
DEVSTACK_MODULE = re.compile(r"devstack(\.\w+)*")


def _is_devstack(name: str | None) -> bool:
    return name is not None and DEVSTACK_MODULE.fullmatch(name) is not None


def devstack_references(source: str) -> list[tuple[int, str, bool]]:
    """(line, what, at module level) for every import of devstack or devstack module-name string."""
    tree = ast.parse(source)
    found: list[tuple[int, str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(
                    (child.lineno, f"import {a.name}", not in_function) for a in child.names if _is_devstack(a.name)
                )
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and _is_devstack(child.module):
                found.append((child.lineno, f"from {child.module} import ...", not in_function))
            elif isinstance(child, ast.Constant) and isinstance(child.value, str) and _is_devstack(child.value):
                found.append((child.lineno, repr(child.value), not in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_scan_sees_every_way_of_naming_devstack() -> None:
    source = (
        "import devstack\n"
        "import os, devstack.stack as s\n"
        "from devstack.demo import run_demo\n"
        "import importlib\n"
        "importlib.import_module('devstack.vertex_jobs')\n"
        "def f():\n"
        "    from devstack import demo\n"
        "    return __import__('devstack')\n"
        "x = 'see devstack/stack.py'  # prose, not a module name\n"
        "from shared import devstack_like\n"
    )
    assert devstack_references(source) == [
        (1, "import devstack", True),
        (2, "import devstack.stack", True),
        (3, "from devstack.demo import ...", True),
        (5, "'devstack.vertex_jobs'", True),
        (7, "from devstack import ...", False),
        (8, "'devstack'", False),
    ]


@pytest.mark.parametrize(
    "path",
    [p for p in python_files(REPO_ROOT / "shared", REPO_ROOT / "functions") if CLI_PACKAGE not in p.parents],
    ids=lambda p: p.relative_to(REPO_ROOT).as_posix(),
)
def test_deployed_code_outside_the_cli_never_names_devstack(path: Path) -> None:
    assert devstack_references(path.read_text()) == []


def test_the_cli_imports_devstack_only_inside_a_command() -> None:
    at_module_level = {
        path.relative_to(REPO_ROOT).as_posix(): [ref for ref in devstack_references(path.read_text()) if ref[2]]
        for path in python_files(CLI_PACKAGE)
    }
    assert {name: refs for name, refs in at_module_level.items() if refs} == {}
    assert any(devstack_references(p.read_text()) for p in python_files(CLI_PACKAGE)), (
        "the CLI no longer runs the local stack: drop this test's exception for shared/cli/"
    )
