"""Each function's Vertex AI custom role holds every customJobs permission its code can call.

Grep-level and deliberately simple: for each entry point Terraform deploys, follow the imports of
its module through the repository's own packages (functions/, shared/), collect the Vertex AI
JobService methods called there (`client.cancel_custom_job(...)`) or reached through the helpers
of shared/adapters/vertex.py the modules import (`from shared.adapters.vertex import cancel_job`), and require the
custom role terraform/iam.tf gives that function to hold the matching permission. It would have
caught submit_job's `_cancel_unrecorded` calling cancel_custom_job under a create/get/list role.

It over-approximates (an imported helper counts as called) and cannot see calls made through
other means; recording every API call of the integration tests is the fuller check.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from tests.support.terraform import REPO_ROOT, entry_points, module_config

PACKAGES = ("functions", "shared")
VERTEX_HELPERS = "shared.adapters.vertex"

# JobService method -> the IAM permission Google's REST reference says it requires, e.g.
# https://cloud.google.com/vertex-ai/docs/reference/rest/v1/projects.locations.customJobs/cancel
# ("Requires the following IAM permission on the name resource: aiplatform.customJobs.cancel");
# likewise .../customJobs/create, /get, /list, /delete.
METHOD_PERMISSIONS = {
    "create_custom_job": "aiplatform.customJobs.create",
    "get_custom_job": "aiplatform.customJobs.get",
    "list_custom_jobs": "aiplatform.customJobs.list",
    "cancel_custom_job": "aiplatform.customJobs.cancel",
    "delete_custom_job": "aiplatform.customJobs.delete",
}


def _path(module: str) -> Path | None:
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@cache
def _tree(module: str) -> ast.Module:
    path = _path(module)
    assert path is not None, module
    return ast.parse(path.read_text(), str(path))


def _imports(module: str) -> tuple[set[str], set[str]]:
    """(repository modules `module` imports anywhere in its body, names it imports from shared.adapters.vertex)."""
    modules: set[str] = set()
    helpers: set[str] = set()
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            modules |= {a.name for a in node.names if a.name.split(".")[0] in PACKAGES}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in PACKAGES:
                continue
            modules.add(node.module)
            for alias in node.names:  # `from shared import clients` imports a module
                if _path(f"{node.module}.{alias.name}") is not None:
                    modules.add(f"{node.module}.{alias.name}")
            if node.module == VERTEX_HELPERS:
                helpers |= {a.name for a in node.names}
    return {m for m in modules if _path(m) is not None}, helpers


def _method_calls(node: ast.AST) -> set[str]:
    return {
        n.func.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in METHOD_PERMISSIONS
    }


@cache
def helper_methods() -> dict[str, frozenset[str]]:
    """shared.adapters.vertex function -> the JobService methods it calls, directly or through its siblings."""
    functions = {n.name: n for n in _tree(VERTEX_HELPERS).body if isinstance(n, ast.FunctionDef)}
    direct = {name: _method_calls(fn) for name, fn in functions.items()}
    calls = {
        name: {n.func.id for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        & set(functions)
        for name, fn in functions.items()
    }
    resolved: dict[str, frozenset[str]] = {}
    for name in functions:
        seen, todo, methods = set(), [name], set()
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                methods |= direct[current]
                todo.extend(calls[current])
        resolved[name] = frozenset(methods)
    return resolved


def vertex_methods(entry_point: str) -> set[str]:
    from functions.main import ENTRY_POINTS

    todo, seen, methods = [ENTRY_POINTS[entry_point]], set(), set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        imported, helpers = _imports(module)
        todo.extend(imported - {VERTEX_HELPERS})
        if module != VERTEX_HELPERS:
            methods |= _method_calls(_tree(module))
        for helper in helpers:
            methods |= helper_methods().get(helper, frozenset())
    return methods


def granted_permissions(entry_point: str) -> set[str]:
    config = module_config()
    vertex = config.locals["function_access"][entry_point]["vertex"]
    if vertex is None:
        return set()
    role = {"submitter": "job_submitter", "controller": "job_controller"}[vertex]
    binding = config.resource("google_project_iam_member", "vertex")["role"]
    assert f"google_project_iam_custom_role.{role}.id" in binding, binding
    return set(config.resource("google_project_iam_custom_role", role)["permissions"])


def test_each_function_role_holds_the_vertex_permissions_its_code_calls() -> None:
    missing = {}
    for fn in entry_points():
        needed = {METHOD_PERMISSIONS[m] for m in vertex_methods(fn)}
        lacking = needed - granted_permissions(fn)
        if lacking:
            missing[fn] = sorted(lacking)
    assert not missing, f"functions call Vertex AI methods their custom role does not allow: {missing}"


def test_the_call_table_sees_what_the_code_does() -> None:
    """Guards the grep itself: the calls the issue is about are found where they are."""
    assert helper_methods()["cancel_job"] == {"cancel_custom_job"}
    assert helper_methods()["find_attempt_job"] == {"list_custom_jobs"}
    assert {"create_custom_job", "cancel_custom_job", "list_custom_jobs"} <= vertex_methods("submit_job")
    assert "get_custom_job" in vertex_methods("on_job_event")
    assert {"list_custom_jobs", "get_custom_job"} <= vertex_methods("reconcile")
    assert vertex_methods("prune_checkpoints") == set()
    assert "create_custom_job" not in vertex_methods("on_job_event") | vertex_methods("reconcile")
