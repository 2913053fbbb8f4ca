"""Reading a module's imports, and its references to devstack, without importing it."""

from __future__ import annotations

import ast
import re

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
