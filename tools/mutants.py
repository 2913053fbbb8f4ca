"""Mutation testing of the decision rooms (`make mutants`; docs/simulator.md, "Mutation testing").

Mutants are made by cosmic-ray's operators (pinned in tools/mutants-requirements.txt, installed in
.venv-mutants), one mutation each. They are judged by a runner of our own, not cosmic-ray's: its
runner writes each mutant into the file on disk and starts the whole test command afresh, which is
seconds of imports per mutant and no place for the simulator. Here a warm parent process (the
project's venv, third-party libraries imported once) forks a child per mutant; the child imports
the project anew with the mutated module served from memory by an import hook, so no file of the
tree is ever written and other readers of the tree never see a mutant.

Each mutant is judged by the tests that run its lines, then the simulator. Once per run, on the
unmutated code, a traced pytest session of every unit and functional test that can reach the rooms
(by their imports) records which tests run each line of the rooms, and how long each takes; the
simulator budget (SIM_SEEDS) is traced the same way. A mutant is then judged in two stages:
1. the tests that run its lines, fastest first, first failure stops them (a line that runs only at
   import, a constant's, is judged by every test that runs its module);
2. only if they all pass, and the simulator runs its lines, the simulator budget: a violation or a
   crash kills it.
Each stage has a time limit of its own, derived from the unmutated code's time; a mutant that
exceeds it is counted as timed out (detected: the suite's own timeout would fail it too). A mutant
whose lines no test and no seed runs survives unjudged: code that does not run cannot change an
outcome. The functional tests' fake-gcs-server is started once, by the warm parent, and reused by
every mutant's session (tests/conftest.py, REUSED_FAKE_GCS_ENV); each test still gets a fresh bucket.

    python tools/mutants.py --room shared/pacing.py          # one room
    python tools/mutants.py                                  # all six rooms
    python tools/mutants.py --outside shared/submit.py       # a file outside the rooms
    python tools/mutants.py generate FILE...                 # (in .venv-mutants) the mutants, as JSON

Results go to bench/results/mutants-<room>.json; a summary line per room is printed.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import contextlib
import dataclasses
import functools
import importlib.abc
import importlib.util
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
TOOL_PYTHON = ROOT / ".venv-mutants" / "bin" / "python"

ROOMS: tuple[str, ...] = (
    "shared/pacing.py",
    "shared/pacing_drainer.py",
    "shared/pruning",
    "shared/fleet",
    "shared/ledger",
    "shared/deciding",
)

# The simulator's budget for a mutant the unit tests left alive: a few seeds that pass on main.
SIM_SEEDS: tuple[int, ...] = (0, 1, 2, 3)

# cosmic-ray's operators, curated: one plausible slip per construct (as mutmut makes them), not
# every permutation (cosmic-ray has ten replacements for each binary operator). Bitwise operators
# are left out: in this code they are mostly type unions in annotations, which
# `from __future__ import annotations` turns into strings, so their mutants are all equivalent.
OPERATORS: tuple[str, ...] = (
    "core/ReplaceBinaryOperator_Add_Sub",
    "core/ReplaceBinaryOperator_Sub_Add",
    "core/ReplaceBinaryOperator_Mul_Div",
    "core/ReplaceBinaryOperator_Div_Mul",
    "core/ReplaceBinaryOperator_FloorDiv_Div",
    "core/ReplaceBinaryOperator_Mod_Div",
    "core/ReplaceBinaryOperator_Pow_Mul",
    "core/ReplaceComparisonOperator_Eq_NotEq",
    "core/ReplaceComparisonOperator_NotEq_Eq",
    "core/ReplaceComparisonOperator_Lt_LtE",
    "core/ReplaceComparisonOperator_LtE_Lt",
    "core/ReplaceComparisonOperator_Gt_GtE",
    "core/ReplaceComparisonOperator_GtE_Gt",
    "core/ReplaceComparisonOperator_Is_IsNot",
    "core/ReplaceComparisonOperator_IsNot_Is",
    "core/ReplaceUnaryOperator_USub_UAdd",
    "core/ReplaceUnaryOperator_Delete_Not",
    "core/AddNot",
    "core/ReplaceTrueWithFalse",
    "core/ReplaceFalseWithTrue",
    "core/ReplaceAndWithOr",
    "core/ReplaceOrWithAnd",
    "core/ReplaceBreakWithContinue",
    "core/ReplaceContinueWithBreak",
    "core/ExceptionReplacer",
    "core/NumberReplacer",
    "core/ZeroIterationForLoop",
)

# cosmic-ray's ExceptionReplacer writes this name into `except` clauses; its runner defines it.
TESTING_EXCEPTION = "CosmicRayTestingException"

# Packages the child imports anew for each mutant (everything of ours); third-party stays warm.
PROJECT_PACKAGES = (
    "shared",
    "functions",
    "spotjobs",
    "spotjobs_kit",
    "devstack",
    "sim",
    "bench",
    "tools",
    "tests",
    "kit",
)
# Where the kit's package lives in the tree.
KIT_SOURCE = "kit/src"
# The tests that may judge a mutant: the stack tests (tests/integration, tests/e2e) run the project
# in other processes, where no mutant is served.
TEST_DIRS = ("tests/unit/", "tests/functional/")
# The traced run of the unmutated code: every candidate test once (minutes).
TRACE_LIMIT_SECONDS = 3600.0

# Outcomes of one mutant.
KILLED_UNIT = "killed_unit"
KILLED_SIM = "killed_sim"
SURVIVED = "survived"
TIMEOUT = "timeout"
OUTCOMES = (KILLED_UNIT, KILLED_SIM, SURVIVED, TIMEOUT)

# Time limit of a stage: the unmutated code's time, times this, plus a floor (a loaded machine).
TIMEOUT_FACTOR = 3.0
TIMEOUT_FLOOR_SECONDS = 10.0


@dataclasses.dataclass(frozen=True)
class Mutant:
    """One mutation: lines first..last (1-based, inclusive) of `path` become `replacement`."""

    path: str
    operator: str
    occurrence: int
    first: int
    last: int
    original: str
    replacement: str

    @property
    def ident(self) -> str:
        return f"{self.path}:{self.first} {self.operator.removeprefix('core/')}#{self.occurrence}"


# ---- pure parts (tests/unit/test_mutants.py) --------------------------------------------------


def room_files(room: str, root: Path = ROOT) -> list[str]:
    """The room's Python files, relative to root: the file itself, or a package's modules."""
    path = root / room
    if path.is_file():
        return [room]
    return sorted(str(p.relative_to(root)) for p in path.rglob("*.py") if p.name != "__init__.py")


def room_argument(text: str) -> str:
    """A room as `--room` takes it: one of ROOMS, or one Python file inside one (a room judged file by
    file); anything else is refused with the choices."""
    room = os.path.normpath(text)
    inside_a_room = room.endswith(".py") and any(room.startswith(f"{known}/") for known in ROOMS)
    if room in ROOMS or (inside_a_room and (ROOT / room).is_file()):
        return room
    raise argparse.ArgumentTypeError(f"{text!r} is neither a room ({', '.join(ROOMS)}) nor a file in one")


def outside_argument(text: str) -> str:
    """A Python file of shared/ outside the rooms, as `--outside` takes it: judged as a room of its own
    (a pass over code changed since the last, where it touches the rooms' decisions); no share is
    promised for it. A file of a room, or anything else, is refused."""
    path = os.path.normpath(text)
    in_shared = path.startswith("shared/") and path.endswith(".py") and (ROOT / path).is_file()
    if in_shared and not any(path == room or path.startswith(f"{room}/") for room in ROOMS):
        return path
    raise argparse.ArgumentTypeError(f"{text!r} is no Python file of shared/ outside the rooms ({', '.join(ROOMS)})")


def module_name(path: str) -> str:
    """`shared/fleet/store.py` -> `shared.fleet.store`; the kit's `kit/src/spotjobs_kit/x.py` ->
    `spotjobs_kit.x`."""
    return path.removeprefix(f"{KIT_SOURCE}/").removesuffix(".py").removesuffix("/__init__").replace("/", ".")


@functools.cache
def imported_names(source: str) -> frozenset[str]:
    """Every dotted name a module imports, anywhere in it (functions import lazily here), with
    `from a.b import c` giving both `a.b` and `a.b.c` (c may be a module). Cached by source: each
    room's `candidate_tests` reads the same modules, and parsing them all takes seconds."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return frozenset(names)


def reaches(start: str, targets: Collection[str], imports: Mapping[str, Collection[str]]) -> bool:
    """Whether module `start` imports any of `targets`, directly or through other modules of ours
    (`imports`: module -> the names it imports)."""
    seen, pending = {start}, [start]
    while pending:
        for name in imports.get(pending.pop(), ()):
            if name in targets:
                return True
            if name in imports and name not in seen:
                seen.add(name)
                pending.append(name)
    return False


def has_module_fixture(source: str) -> bool:
    """A test module with a module-scoped fixture of its own builds an install or a stack and runs
    the project in other processes, where no mutant is served: never a judge, and minutes to trace."""
    return re.search(r"scope\s*=\s*[\"']module[\"']", source) is not None


def candidate_tests(rooms: Sequence[str], sources: Mapping[str, str]) -> list[str]:
    """The test files (of `sources`: every module of ours, path -> source) that can run any of the
    rooms' code in their own process: they import it, directly or not. In a stable order."""
    imports = {module_name(path): imported_names(source) for path, source in sources.items()}
    targets = {module_name(path) for room in rooms for path in room_files(room)}
    return sorted(
        path
        for path, source in sources.items()
        if path.startswith(TEST_DIRS)
        and Path(path).name.startswith("test_")
        and not has_module_fixture(source)
        and reaches(module_name(path), targets, imports)
    )


def changed_span(original: str, mutated: str) -> tuple[int, int, str, str]:
    """The lines a mutation changed: (first, last) 1-based in the original, the original lines
    and their replacement. cosmic-ray regenerates the whole module; only this span differs."""
    before, after = original.splitlines(keepends=True), mutated.splitlines(keepends=True)
    head = 0
    while head < min(len(before), len(after)) and before[head] == after[head]:
        head += 1
    tail = 0
    while tail < min(len(before), len(after)) - head and before[-1 - tail] == after[-1 - tail]:
        tail += 1
    return (
        head + 1,
        len(before) - tail,
        "".join(before[head : len(before) - tail]),
        "".join(after[head : len(after) - tail]),
    )


def apply(original: str, mutant: Mutant) -> str:
    """The module's source with the mutant applied."""
    lines = original.splitlines(keepends=True)
    return "".join(lines[: mutant.first - 1]) + mutant.replacement + "".join(lines[mutant.last :])


def summarize(outcomes: Iterable[str]) -> dict[str, float | int]:
    """Counts per outcome and the share detected (killed by either stage, or timed out)."""
    counts = {outcome: 0 for outcome in OUTCOMES}
    for outcome in outcomes:
        counts[outcome] += 1
    total = sum(counts.values())
    detected = total - counts[SURVIVED]
    return {"mutants": total, **counts, "killed_share": round(detected / total, 4) if total else 0.0}


def slug(room: str) -> str:
    """`shared/pacing.py` -> `shared-pacing`: the results file's name."""
    return room.removesuffix(".py").strip("/").replace("/", "-")


# ---- generation (runs in .venv-mutants, where cosmic-ray is) ------------------------------------


def generate(paths: Sequence[str]) -> list[Mutant]:
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast
    from cosmic_ray.mutating import mutate_code

    mutants = []
    for path in paths:
        original = (ROOT / path).read_text()
        for name in OPERATORS:
            operator = cosmic_ray.plugins.get_operator(name)()
            positions = sum(1 for node in ast_nodes(get_ast(original)) for _ in operator.mutation_positions(node))
            for occurrence in range(positions):
                try:
                    mutated = mutate_code(original, operator, occurrence)
                except Exception as exc:  # noqa: BLE001 - cosmic-ray 8.7 fails on some nodes (a dotted name in `except (a.B, C)`)
                    print(f"{path}: {name}#{occurrence} not made: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                if mutated is None or mutated == original:
                    continue
                first, last, before, after = changed_span(original, mutated)
                mutants.append(Mutant(path, name, occurrence, first, last, before, after))
    return mutants


def generate_via_tool(paths: Sequence[str]) -> list[Mutant]:
    """Ask .venv-mutants (cosmic-ray's interpreter) for the mutants of these files."""
    if not TOOL_PYTHON.exists():
        raise SystemExit(f"{TOOL_PYTHON} is missing: run `make mutants`, which installs it")
    out = subprocess.run(
        [str(TOOL_PYTHON), str(Path(__file__).resolve()), "generate", *paths],
        check=True,
        stdout=subprocess.PIPE,  # the mutants; what could not be made goes to stderr, shown
        text=True,
        cwd=ROOT,
    ).stdout
    return [Mutant(**fields) for fields in json.loads(out)]


# ---- which tests judge a mutant (pure; tests/unit/test_mutants.py) ------------------------------

# Who ran a line: a test id, or SIMULATOR for the simulator budget.
SIMULATOR = "<simulator>"
Line = tuple[str, int]


def executable_lines(path: str, source: str) -> set[Line]:
    """The lines of a module that carry code, the only ones a tracer can see run (a signature's
    `*,` line, for one, carries none)."""
    return {line for code in _code_objects(path, source) for line in _lines_of(path, code)}


def import_time_lines(path: str, source: str) -> set[Line]:
    """The lines that run when the module is imported, not when it is used: the module's own code
    and its class bodies (constants, defaults, decorators, `def` lines). Import happens once per
    process, at collection or in whichever test first needs it, so who ran them says nothing."""
    return {
        line
        for code in _code_objects(path, source)
        if not code.co_flags & inspect.CO_OPTIMIZED  # not a function: the module or a class body
        for line in _lines_of(path, code)
    }


def _code_objects(path: str, source: str) -> list[types.CodeType]:
    found, pending = [], [compile(source, path, "exec")]
    while pending:
        code = pending.pop()
        found.append(code)
        pending.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return found


def _lines_of(path: str, code: types.CodeType) -> set[Line]:
    return {(path, line) for _, _, line in code.co_lines() if line is not None}


def judges(
    mutant: Mutant,
    ran_by: Mapping[Line, Collection[str]],
    executable: Collection[Line],
    import_time: Collection[Line],
) -> set[str]:
    """Who can tell the mutant apart (test ids, SIMULATOR), from who ran which line of the
    unmutated code (`ran_by`): whoever ran one of its lines. A line that runs at import stands for
    the whole module (every one who ran any line of it); a line that carries no code (a
    signature's `*,`) for the next line that does."""
    users_of_module = {who for (path, _), whos in ran_by.items() if path == mutant.path for who in whos}
    found: set[str] = set()
    for number in range(mutant.first, mutant.last + 1):
        line = (mutant.path, number)
        if line not in executable:
            following = sorted(n for p, n in executable if p == mutant.path and n > mutant.last)
            line = (mutant.path, following[0]) if following else line
        found |= users_of_module if line in import_time else set(ran_by.get(line, ()))
    return found


def detected_before(rows: Iterable[Mapping]) -> dict[Mutant, Mapping]:
    """The rows of an earlier run whose mutant was detected, by mutant: with tests only added
    since, they stay detected, so `--again` judges only the rest. A mutant of a source changed
    since is another mutant (its lines differ) and is judged afresh."""
    return {row_mutant(row): row for row in rows if row["outcome"] != SURVIVED}


def row_mutant(row: Mapping) -> Mutant:
    return Mutant(**{field.name: row[field.name] for field in dataclasses.fields(Mutant)})


def fastest_first(tests: Iterable[str], seconds: Mapping[str, float]) -> list[str]:
    return sorted(tests, key=lambda test: (seconds.get(test, 0.0), test))


# ---- judging (runs in the project's venv) -------------------------------------------------------


class _MutatedSource(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module's mutated source from memory, compiled under its real file name."""

    def __init__(self, name: str, path: Path, source: str) -> None:
        self.name, self.path, self.source = name, path, source

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001 (importlib's protocol)
        if fullname != self.name:
            return None
        return importlib.util.spec_from_file_location(fullname, self.path, loader=self)

    def create_module(self, spec):  # noqa: ANN001
        return None

    def exec_module(self, module) -> None:  # noqa: ANN001
        exec(compile(self.source, str(self.path), "exec"), module.__dict__)


class _Tracer:
    """Who runs which line of the rooms' files (sys.settrace, in every thread): the test running
    (set by `_ByTest`), or SIMULATOR. Files of no room cost a call event each, nothing per line."""

    def __init__(self, files: Iterable[str], who: str) -> None:
        self.files = {str(ROOT / path): path for path in files}
        self.who = who
        self.ran_by: dict[Line, set[str]] = {}

    def __call__(self, frame, event, arg):  # noqa: ANN001 (sys.settrace's protocol)
        path = self.files.get(frame.f_code.co_filename)
        if path is None:
            return None

        def local(frame, event, arg):  # noqa: ANN001
            if event == "line":
                self.ran_by.setdefault((path, frame.f_lineno), set()).add(self.who)
            return local

        self.ran_by.setdefault((path, frame.f_lineno), set()).add(self.who)
        return local

    def start(self) -> None:
        threading.settrace(self)
        sys.settrace(self)

    def stop(self) -> None:
        threading.settrace(None)  # type: ignore[arg-type]
        sys.settrace(None)


def stable_test_id(nodeid: str, indices: Mapping[str, int]) -> str:
    """A test's name that no mutant changes: its node id with the parameters' values replaced by
    their positions. A test parametrized by a room's constant prints its value in its node id
    (`test_rate[0.02]`), so a mutant of the constant renames the test (`test_rate[1.02]`)."""
    if not indices:
        return nodeid
    base = nodeid.split("[", 1)[0]
    return f"{base}[{','.join(f'{name}#{index}' for name, index in sorted(indices.items()))}]"


def _stable_id(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    return stable_test_id(item.nodeid, callspec.indices if callspec is not None else {})


def _clear_caches(files: Collection[str]) -> None:
    """Empty the memo of every cached function (`functools.cache`, `lru_cache`) of the modules of
    these files, and of their classes: a mutant's child starts with them empty, so the first of its
    tests to call one runs the (mutated) body. Traced without this, a cached body is seen run only by
    the session's first caller, and that one test alone would judge its mutants."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) not in files:
            continue
        for value in list(vars(module).values()):
            for member in (value, *vars(value).values()) if isinstance(value, type) else (value,):
                if isinstance(member, functools._lru_cache_wrapper):
                    member.cache_clear()


class _ByTest:
    """A pytest plugin for the traced session: names the running test (by `stable_test_id`) to the
    tracer, and keeps each test's time and whether it passed on the unmutated code."""

    def __init__(self, tracer: _Tracer) -> None:
        self.tracer = tracer
        self.started = 0.0
        self.stable: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.failed: set[str] = set()

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.stable = {item.nodeid: _stable_id(item) for item in items}

    def pytest_runtest_logstart(self, nodeid: str, location: object) -> None:
        _clear_caches(self.tracer.files)
        self.tracer.who = self.stable.get(nodeid, nodeid)
        self.started = time.monotonic()

    def pytest_runtest_logfinish(self, nodeid: str, location: object) -> None:
        self.seconds[self.stable.get(nodeid, nodeid)] = time.monotonic() - self.started
        self.tracer.who = IMPORTING

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.add(self.stable.get(report.nodeid, report.nodeid))


class _Selected:
    """A pytest plugin for a mutant's stage: of the test files' tests, only those named (by
    `stable_test_id`), in the order named."""

    def __init__(self, tests: Sequence[str]) -> None:
        self.order = {test: position for position, test in enumerate(tests)}

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        chosen = [item for item in items if _stable_id(item) in self.order]
        config.hook.pytest_deselected(items=[item for item in items if _stable_id(item) not in self.order])
        items[:] = sorted(chosen, key=lambda item: self.order[_stable_id(item)])


# What ran lines outside any test: collection, imports.
IMPORTING = "<import>"


def _forget_project_modules() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in PROJECT_PACKAGES:
            del sys.modules[name]


def _warm_up(tests: Sequence[str]) -> None:
    """Import what the tests and the simulator import, then forget our own modules: each child
    re-imports only the project (milliseconds), not the Google client libraries (seconds)."""
    import pytest  # noqa: F401

    import sim.world  # noqa: F401

    for test in tests:
        importlib.import_module(module_name(test))
    _forget_project_modules()


PYTEST_ARGS = ("-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=")


# pytest's exit codes that say the runner asked for tests that are not there (a test file or a test
# renamed or removed since the trace), which says nothing about the mutant.
PYTEST_RUNNER_ERRORS = (4, 5)  # usage error (a file not found), no test selected
RUNNER_ERROR_EXIT = 75


class _CollectionErrors:
    """Whether pytest failed to import a test module: a mutant that breaks an import makes its
    tests "not found" too, and is killed (they cannot pass), not the runner's error."""

    def __init__(self) -> None:
        self.seen = False

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self.seen = self.seen or report.failed


def _tests_stage(tests: Sequence[str], report: Path) -> int:
    """The tests (by `stable_test_id`), in the order given (each stage a pytest session of its own),
    first failure stops."""
    import pytest

    collection = _CollectionErrors()
    files = dict.fromkeys(test.split("::", 1)[0] for test in tests)
    with report.open("w") as out, contextlib.redirect_stdout(out):
        code = pytest.main(["-x", *PYTEST_ARGS, *files], plugins=[collection, _Selected(tests)])
    if code in PYTEST_RUNNER_ERRORS and not collection.seen:
        return RUNNER_ERROR_EXIT
    return 0 if code == 0 else 1


def _sim_stage() -> int:
    from sim.world import World

    for seed in SIM_SEEDS:
        if World(seed).run():
            return 1
    return 0


def _traced_tests(files: Sequence[str], tests: Sequence[str], report: Path) -> int:
    """Every test once, untimed, traced: writes who ran which line, each test's seconds and the
    tests that fail on the unmutated code to `report`.json."""
    import pytest

    tracer = _Tracer(files, IMPORTING)
    plugin = _ByTest(tracer)
    tracer.start()
    with report.open("w") as out, contextlib.redirect_stdout(out):
        pytest.main([*PYTEST_ARGS, *tests], plugins=[plugin])
    tracer.stop()
    _write_trace(report, tracer, plugin.seconds, plugin.failed)
    return 0


def _traced_sim(files: Sequence[str], report: Path) -> int:
    tracer = _Tracer(files, SIMULATOR)
    tracer.start()
    code = _sim_stage()
    tracer.stop()
    _write_trace(report, tracer, {}, set())
    return code


def _write_trace(report: Path, tracer: _Tracer, seconds: Mapping[str, float], failed: set[str]) -> None:
    ran_by = [[path, line, sorted(whos)] for (path, line), whos in sorted(tracer.ran_by.items())]
    report.with_suffix(".json").write_text(json.dumps({"ran_by": ran_by, "seconds": seconds, "failed": sorted(failed)}))


def _in_child(run: Callable[[], int], mutant: Mutant | None, limit: float) -> tuple[str, float]:
    """Run one stage in a forked child, with the mutant (if any) served: ('pass' | 'fail' |
    'timeout', seconds)."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 1
        try:
            os.setpgid(0, 0)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            if mutant is not None:
                source = apply((ROOT / mutant.path).read_text(), mutant)
                sys.meta_path.insert(0, _MutatedSource(module_name(mutant.path), ROOT / mutant.path, source))
            code = run()
        except BaseException:  # noqa: B036 (a mutant may raise anything, even at import: it is killed)
            code = 1
        finally:
            os._exit(code)
    deadline = started + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return _verdict(os.waitstatus_to_exitcode(status)), time.monotonic() - started
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - started
        time.sleep(0.02)


def _verdict(exit_code: int) -> str:
    if exit_code == RUNNER_ERROR_EXIT:
        return "error"
    return "pass" if exit_code == 0 else "fail"


def _first_failure(report: Path) -> str:
    for line in report.read_text(errors="replace").splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:300]
    return ""


@dataclasses.dataclass(frozen=True)
class Coverage:
    """What the traced run of the unmutated code found: who ran which line of the rooms, each
    test's seconds (traced: an upper bound), the simulator budget's seconds (untraced)."""

    ran_by: Mapping[Line, Collection[str]]
    seconds: Mapping[str, float]
    sim_seconds: float
    executable: Collection[Line]
    import_time: Collection[Line]

    def stage_limit(self, tests: Sequence[str]) -> float:
        return sum(self.seconds[test] for test in tests) * TIMEOUT_FACTOR + TIMEOUT_FLOOR_SECONDS


def judge(mutant: Mutant, coverage: Coverage, report: Path) -> dict:
    row: dict = {**dataclasses.asdict(mutant), "ident": mutant.ident}
    found = judges(mutant, coverage.ran_by, coverage.executable, coverage.import_time)
    tests = fastest_first(found - {SIMULATOR}, coverage.seconds)
    if not found:
        return {**row, "outcome": SURVIVED, "not_run": True}
    row["tests"] = len(tests)
    if tests:
        verdict, seconds = _in_child(lambda: _tests_stage(tests, report), mutant, coverage.stage_limit(tests))
        row["unit_seconds"] = round(seconds, 2)
        if verdict == "error":
            raise SystemExit(
                f"mutants: pytest found no test among those the trace recorded for {mutant.ident} "
                f"(renamed or removed since the trace?): {report.read_text(errors='replace')[-600:]}"
            )
        if verdict == "fail":
            return {**row, "outcome": KILLED_UNIT, "killed_by": _first_failure(report)}
        if verdict == "timeout":
            return {**row, "outcome": TIMEOUT, "stage": "unit"}
    if SIMULATOR not in found:
        return {**row, "outcome": SURVIVED, "sim_not_run": True}
    limit = coverage.sim_seconds * TIMEOUT_FACTOR + TIMEOUT_FLOOR_SECONDS
    verdict, seconds = _in_child(_sim_stage, mutant, limit)
    row["sim_seconds"] = round(seconds, 2)
    outcome = {"fail": KILLED_SIM, "timeout": TIMEOUT, "pass": SURVIVED}[verdict]
    return {**row, "outcome": outcome, **({"stage": "sim"} if verdict == "timeout" else {})}


def trace(rooms: Sequence[str], scratch: Path) -> tuple[Coverage, list[str]]:
    """Run every candidate test and the simulator budget once on the unmutated code, traced: who
    runs which line of the rooms. Returns the coverage and the tests left out because they fail."""
    files = [path for room in rooms for path in room_files(room)]
    sources = {
        str(p.relative_to(ROOT)): p.read_text()
        for package in (*PROJECT_PACKAGES, KIT_SOURCE)
        for p in sorted((ROOT / package).rglob("*.py"))
        if ".venv" not in p.parts
    }
    tests = candidate_tests(rooms, sources)
    _warm_up(tests)
    report = scratch / "trace.txt"
    _in_child(lambda: _traced_tests(files, tests, report), None, TRACE_LIMIT_SECONDS)
    traced = json.loads(report.with_suffix(".json").read_text())
    verdict, sim_seconds = _in_child(_sim_stage, None, TRACE_LIMIT_SECONDS)
    if verdict != "pass":
        raise SystemExit("the unmutated code fails the simulator budget")
    _in_child(lambda: _traced_sim(files, report), None, TRACE_LIMIT_SECONDS)
    sim = json.loads(report.with_suffix(".json").read_text())
    failing = set(traced["failed"])
    ran_by: dict[Line, set[str]] = {}
    for path, line, whos in traced["ran_by"] + sim["ran_by"]:
        ran_by.setdefault((path, line), set()).update(who for who in whos if who not in failing and who != IMPORTING)
    coverage = Coverage(
        ran_by=ran_by,
        seconds=traced["seconds"],
        sim_seconds=sim_seconds,
        executable=set().union(*(executable_lines(p, (ROOT / p).read_text()) for p in files)),
        import_time=set().union(*(import_time_lines(p, (ROOT / p).read_text()) for p in files)),
    )
    return coverage, sorted(failing)


def run_room(room: str, coverage: Coverage, scratch: Path, limit: int | None = None, again: bool = False) -> dict:
    started = time.monotonic()
    mutants = generate_via_tool(room_files(room))[:limit]
    results = RESULTS_DIR / f"mutants-{slug(room)}.json"
    kept = detected_before(json.loads(results.read_text())["mutants"]) if again and results.exists() else {}
    report = scratch / "pytest.txt"
    rows = []
    for index, mutant in enumerate(mutants, 1):
        rows.append(kept.get(mutant) or judge(mutant, coverage, report))
        print(f"  [{index}/{len(mutants)}] {rows[-1]['outcome']:<11} {mutant.ident}", file=sys.stderr, flush=True)
    judged_by = {
        who
        for row in rows
        for who in judges(row_mutant(row), coverage.ran_by, coverage.executable, coverage.import_time)
    }
    summary = {
        "room": room,
        **summarize(row["outcome"] for row in rows),
        "survived_not_run": sum(1 for row in rows if row.get("not_run")),
        "seconds": round(time.monotonic() - started, 1),
        "tests": len(judged_by - {SIMULATOR}),
        "judged_again": len(mutants) - sum(1 for mutant in mutants if mutant in kept) if again else None,
        "sim_seeds": list(SIM_SEEDS),
        "commit": _commit(),
        "date": time.strftime("%Y-%m-%d"),
    }
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / f"mutants-{slug(room)}.json").write_text(json.dumps({"summary": summary, "mutants": rows}, indent=1))
    return summary


def _commit() -> str:
    result = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return result.stdout.strip()


def summary_line(summary: Mapping) -> str:
    return (
        f"{summary['room']}: {summary['mutants']} mutants, {summary[KILLED_UNIT]} killed by tests, "
        f"{summary[KILLED_SIM]} by the simulator, {summary[SURVIVED]} survived ({summary['survived_not_run']} on lines "
        f"nothing runs), {summary[TIMEOUT]} timed out: "
        f"{summary['killed_share']:.0%} killed in {summary['seconds']:.0f} s"
    )


@contextlib.contextmanager
def shared_fake_gcs(scratch: Path) -> Iterator[None]:
    """One fake-gcs-server for every mutant's tests (tests/conftest.py reuses it)."""
    from devstack.emulators import start_fake_gcs
    from tests.conftest import REUSED_FAKE_GCS_ENV

    process, url = start_fake_gcs(scratch)
    os.environ[REUSED_FAKE_GCS_ENV] = url
    try:
        yield
    finally:
        del os.environ[REUSED_FAKE_GCS_ENV]
        process.stop()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["generate"]:
        json.dump([dataclasses.asdict(m) for m in generate(argv[1:])], sys.stdout)
        return 0
    parser = argparse.ArgumentParser(prog="tools/mutants.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--room",
        type=room_argument,
        action="append",
        help="a room, or one file of a room (repeatable); default: all five",
    )
    parser.add_argument(
        "--outside",
        type=outside_argument,
        action="append",
        default=[],
        help="a Python file of shared/ outside the rooms, judged after them as a room of its own (repeatable)",
    )
    parser.add_argument("--limit", type=int, help="judge only the first N mutants of each room (a quick look)")
    parser.add_argument(
        "--again",
        action="store_true",
        help="after adding tests: judge again only the mutants the room's last results left alive",
    )
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / KIT_SOURCE)]
    os.chdir(ROOT)
    rooms = [*(args.room or ([] if args.outside else ROOMS)), *args.outside]
    builtins.__dict__.setdefault(TESTING_EXCEPTION, type(TESTING_EXCEPTION, (Exception,), {}))
    with tempfile.TemporaryDirectory(prefix="mutants-") as directory:
        scratch = Path(directory)
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(scratch)  # a mutant's failures stay out of the tree
        with shared_fake_gcs(scratch):
            started = time.monotonic()
            coverage, failing = trace(rooms, scratch)
            print(f"traced in {time.monotonic() - started:.0f} s; left out, failing unmutated: {failing}", flush=True)
            for room in rooms:
                print(summary_line(run_room(room, coverage, scratch, args.limit, args.again)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
