"""Who may import whom: the rooms of docs/ARCHITECTURE.md ("Layout and what each folder may
import"), the dev stack, no import cycle, and tests take shared helpers from conftest.py or
tests/support/ only.

Every import counts: at module level, inside a function (lazy) and under `if TYPE_CHECKING:`. A
module that may not import another at run time may not name its types either, or the picture of
who depends on whom would be wrong for a reader.

The dev stack: the deploy zip ships `shared/` and `functions/` without `devstack/`, so nothing
they run may need it. The `spotjobs` command line (`spotjobs/cli/`) may name it, for `local up`
and `demo`, and even there only inside the function that runs a command, so every other command
works without it. "Names" means an import statement or a string that is a `devstack` module name
(what importlib.import_module, __import__ or find_spec would be given).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.imports import devstack_references

REPO_ROOT = Path(__file__).resolve().parents[2]
CLI_PACKAGE = REPO_ROOT / "spotjobs" / "cli"
KIT = "spotjobs_kit"

# The rooms of shared/ (module name prefixes; the longest match wins), and the packages around it.
ROOMS: dict[str, str] = {
    "shared": "foundation",  # the package docstring
    "shared.settings": "foundation",
    "shared.errors": "foundation",
    "shared.log": "foundation",
    "shared.clock": "foundation",
    "shared.topology": "foundation",
    "shared.alerts": "foundation",
    "shared.image_ref": "foundation",
    "shared.jobs": "foundation",
    "shared.swap": "foundation",
    "shared.requests": "requests",
    "shared.ledger": "ledger",
    "shared.adapters": "adapters",
    "shared.wiring": "wiring",
    "shared.delivery": "delivery",
    "shared.deciding": "deciding",
    "shared.fleet": "fleet",
    "shared.pruning": "pruning",
    "shared.triggers": "triggers",
    "shared.submit": "shells",
    "shared.reconcile": "shells",
    "shared.observe": "shells",
    "shared.redeliveries": "shell parts",
    "shared.deleted_records": "shell parts",
    "shared.found_jobs": "shell parts",
    "shared.pacing": "shell parts",
    "shared.pacing_drainer": "shell parts",
    "shared.paced_submit": "shell parts",
    "shared.create_lease": "shell parts",
    "shared.reconcile_vertex": "shell parts",
    "shared.pass_client": "shell parts",
    "shared.reconcile_index": "shell parts",
    "shared.job_locations": "shell parts",
    "shared.attempt_lookup": "shell parts",
    "shared.kept_lines": "shell parts",
    "shared.unanswering": "shell parts",
    "functions": "functions",
    "spotjobs": "spotjobs",
    "devstack": "devstack",
}
SHARED_ROOMS = {room for prefix, room in ROOMS.items() if prefix.split(".")[0] == "shared"}

# Room -> the other rooms it may import (its own room is always allowed). The same table is in
# docs/ARCHITECTURE.md; the kit (spotjobs_kit) may be imported by shared/ and functions/.
ALLOWED: dict[str, set[str]] = {
    "foundation": set(),
    "requests": {"foundation"},
    "ledger": {"foundation", "requests"},
    "adapters": {"foundation"},
    "wiring": {"foundation", "ledger", "adapters"},
    "delivery": {"foundation"},
    "fleet": {"foundation", "requests", "ledger", "wiring"},
    "deciding": {"foundation", "requests", "ledger", "wiring", "fleet"},
    "pruning": {"foundation", "ledger", "wiring", "delivery", "deciding", "fleet"},
    "triggers": {"foundation", "requests", "wiring", "delivery"},
    # What more than one shell does around the rooms' decisions (adopting a found job, cancelling a
    # stray) or one shell's flow split out for size (redeliveries, submit's): never a shell.
    "shell parts": SHARED_ROOMS - {"shells"},
    # A shell is one function's flow; it uses every room but not another shell.
    "shells": SHARED_ROOMS - {"shells"},
    "functions": SHARED_ROOMS,
    "spotjobs": SHARED_ROOMS | {"devstack"},  # devstack: the CLI only, lazily (tests below)
    "devstack": SHARED_ROOMS | {"spotjobs"},
}

# (importer, imported module) pairs the table does not allow, each with the reason it is allowed
# anyway. None since issue 21's phase 2; a new one needs a reason a reviewer accepts.
EXCEPTIONS: dict[tuple[str, str], str] = {}


def room_of(module: str) -> str | None:
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        room = ROOMS.get(".".join(parts[:end]))
        if room is not None:
            return room
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def python_files(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def imported_modules(source: str, importer: str) -> Iterator[tuple[int, str]]:
    """(line, module) for every import anywhere in `source`: lazy and TYPE_CHECKING ones too.

    `from a.b import c` yields `a.b.c` when c may be a module and `a.b` otherwise, so a caller
    resolves it with `resolve`."""
    package = importer if importer.count(".") == 0 else importer.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield node.lineno, f"{base}.{alias.name}"


def resolve(name: str, modules: set[str]) -> str | None:
    """The repository module `name` refers to (a module, or a name inside one), or None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def repository_modules() -> dict[str, Path]:
    roots = [REPO_ROOT / top for top in ("shared", "functions", "spotjobs", "devstack")]
    return {module_name(path): path for path in python_files(*roots)}


def import_graph() -> dict[str, set[str]]:
    modules = repository_modules()
    names = set(modules)
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        targets = {resolve(name, names) for _, name in imported_modules(path.read_text(), module)}
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def test_every_module_is_in_a_room() -> None:
    assert [m for m in repository_modules() if room_of(m) is None] == []


def test_the_scan_sees_lazy_type_only_and_relative_imports() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import shared.clock\n"
        "from shared.ledger import store\n"
        "if TYPE_CHECKING:\n"
        "    from shared.adapters.vertex import JobState\n"
        "def f():\n"
        "    from . import envelope\n"
    )
    found = {name for _, name in imported_modules(source, "shared.requests.policy")}
    modules = {"shared.clock", "shared.ledger", "shared.ledger.store", "shared.adapters.vertex", "shared.requests"}
    modules.add("shared.requests.envelope")
    assert {resolve(n, modules) for n in found} - {None} == {
        "shared.clock",
        "shared.ledger.store",
        "shared.adapters.vertex",
        "shared.requests.envelope",
    }


def test_imports_between_rooms_follow_the_table() -> None:
    wrong = []
    for importer, targets in import_graph().items():
        source_room = room_of(importer)
        for target in sorted(targets):
            target_room = room_of(target)
            allowed = target_room == source_room or target_room in ALLOWED[source_room]
            if not allowed and (importer, target) not in EXCEPTIONS:
                wrong.append(f"{importer} ({source_room}) -> {target} ({target_room})")
    assert wrong == []


def test_every_listed_exception_is_still_an_import() -> None:
    graph = import_graph()
    assert [pair for pair in EXCEPTIONS if pair[1] not in graph[pair[0]]] == [], "drop it from EXCEPTIONS"


def test_shared_and_functions_import_only_shared_the_kit_and_libraries() -> None:
    ours = {"shared", "functions", "spotjobs", "devstack", "tests", "bench", "tools", KIT}
    wrong = []
    for path in python_files(REPO_ROOT / "shared", REPO_ROOT / "functions"):
        importer = module_name(path)
        allowed = {"shared", KIT} | ({"functions"} if importer.startswith("functions") else set())
        for line, name in imported_modules(path.read_text(), importer):
            top = name.split(".")[0]
            if top in ours and top not in allowed:
                wrong.append(f"{importer}:{line} imports {name}")
    assert wrong == []


def test_test_helpers_come_from_conftest_or_tests_support_only() -> None:
    """A helper two test modules share lives in a conftest.py or tests/support/; a test module is
    never imported for its helpers (running it, or renaming one of its tests, must not break
    another module)."""
    wrong = []
    for path in python_files(REPO_ROOT / "tests"):
        importer = module_name(path)
        for line, name in imported_modules(path.read_text(), importer):
            parts = name.split(".")
            if parts[0] == "tests" and len(parts) > 1 and parts[1] != "support" and "conftest" not in parts:
                wrong.append(f"{importer}:{line} imports {name}")
    assert wrong == []


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph` as [a, b, ..., a], or [] when there is none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> list[str]:
        if node in path:
            return [*path[path.index(node) :], node]
        if node in done:
            return []
        path.append(node)
        for target in sorted(graph.get(node, ())):
            cycle = visit(target)
            if cycle:
                return cycle
        path.pop()
        done.add(node)
        return []

    for node in sorted(graph):
        cycle = visit(node)
        if cycle:
            return cycle
    return []


def test_find_cycle_finds_one() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_anywhere() -> None:
    """In shared/, functions/, spotjobs/ and devstack/, type-only imports included."""
    assert find_cycle(import_graph()) == []


MAX_LINES = 450


def test_a_module_over_450_lines_says_why_it_is_one_thing() -> None:
    """Its docstring says so in words that name the size ("over 450 lines") and give the reason."""
    unexplained = []
    for module, path in repository_modules().items():
        source = path.read_text()
        if source.count("\n") > MAX_LINES and "450 lines" not in (ast.get_docstring(ast.parse(source)) or "").lower():
            unexplained.append(module)
    assert unexplained == []


# ---------------------------------------------------------------------------------------------
# The dev stack
# ---------------------------------------------------------------------------------------------


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
    [
        p
        for p in python_files(REPO_ROOT / "shared", REPO_ROOT / "functions", REPO_ROOT / "spotjobs")
        if CLI_PACKAGE not in p.parents
    ],
    ids=lambda p: p.relative_to(REPO_ROOT).as_posix(),
)
def test_code_outside_the_cli_never_names_devstack(path: Path) -> None:
    assert devstack_references(path.read_text()) == []


def test_the_cli_imports_devstack_only_inside_a_command() -> None:
    at_module_level = {
        path.relative_to(REPO_ROOT).as_posix(): [ref for ref in devstack_references(path.read_text()) if ref[2]]
        for path in python_files(CLI_PACKAGE)
    }
    assert {name: refs for name, refs in at_module_level.items() if refs} == {}
    assert any(devstack_references(p.read_text()) for p in python_files(CLI_PACKAGE)), (
        "the CLI no longer runs the local stack: drop this test's exception for spotjobs/cli/"
    )
