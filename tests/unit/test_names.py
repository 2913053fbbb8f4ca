"""No two modules in `shared/` define the same public top-level name.

A name then says what one thing is, wherever it is imported. The exception is the CLI's plug-in
interface: every module of spotjobs/cli/ defines `register(subparsers)` (spotjobs/cli/__init__.py).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = REPO_ROOT / "shared"
ALLOWED = {"register"}


def public_names(source: str) -> set[str]:
    """Module-level functions, classes and assigned names not starting with `_` (imports excluded)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return {name for name in names if not name.startswith("_")}


def definitions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(SHARED.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        for name in public_names(path.read_text()):
            found[name].append(path.relative_to(REPO_ROOT).as_posix())
    return found


def test_the_scan_sees_functions_classes_and_assignments() -> None:
    source = (
        "import os\n"
        "from x import y\n"
        "A = 1\n"
        "B: int = 2\n"
        "C, (D, _E) = 3, (4, 5)\n"
        "_F = 6\n"
        "def g(): H = 7\n"
        "async def i(): pass\n"
        "class J: K = 8\n"
        "if True:\n    L = 9\n"
    )
    assert public_names(source) == {"A", "B", "C", "D", "g", "i", "J"}


def test_no_two_modules_in_shared_define_the_same_public_name() -> None:
    duplicated = {name: paths for name, paths in definitions().items() if name not in ALLOWED and len(paths) > 1}
    assert duplicated == {}
