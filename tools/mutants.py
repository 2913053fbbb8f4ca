"""Mutation testing of the decision rooms (`make mutants`; docs/simulator.md, "Mutation testing").

Mutants are made by cosmic-ray's operators (pinned in tools/mutants-requirements.txt, installed in
.venv-mutants), one mutation each. They are judged by a runner of our own, not cosmic-ray's: its
runner writes each mutant into the file on disk and starts the whole test command afresh, which is
seconds of imports per mutant and no place for the simulator. Here a warm parent process (the
project's venv, third-party libraries imported once) forks a child per mutant; the child imports
the project anew with the mutated module served from memory by an import hook, so no file of the
tree is ever written and other readers of the tree never see a mutant.

Each mutant is judged in two stages:
1. the room's unit tests (those that import the room, found by grep), first failure stops them;
2. only if they all pass, a fixed simulator budget (SIM_SEEDS): a violation or a crash kills it.
Each stage has a time limit of its own, derived from the unmutated code's time; a mutant that
exceeds it is counted as timed out (detected: the suite's own timeout would fail it too). A stage
is skipped for a mutant whose lines it never runs on the unmutated code (traced once per room):
code that does not run cannot change an outcome, so such a mutant survives that stage unjudged.

    python tools/mutants.py --room shared/pacing.py          # one room
    python tools/mutants.py                                  # all five rooms
    python tools/mutants.py generate FILE...                 # (in .venv-mutants) the mutants, as JSON

Results go to bench/results/mutants-<room>.json; a summary line per room is printed.
"""

from __future__ import annotations

import argparse
import builtins
import contextlib
import dataclasses
import importlib.abc
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "bench" / "results"
TOOL_PYTHON = ROOT / ".venv-mutants" / "bin" / "python"

ROOMS: tuple[str, ...] = (
    "shared/pacing.py",
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
PROJECT_PACKAGES = ("shared", "functions", "spotjobs", "spotjobs_kit", "devstack", "sim", "tests", "kit")

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


def module_name(path: str) -> str:
    """`shared/fleet/store.py` -> `shared.fleet.store`."""
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def imports_room(test_source: str, room: str) -> bool:
    """Whether a test module imports the room (`import shared.pacing`, `from shared.fleet.store
    import x`, `from shared import pacing`)."""
    dotted = module_name(room)
    parent, _, leaf = dotted.rpartition(".")
    direct = rf"^\s*(from|import)\s+{re.escape(dotted)}(\.|\s|$)"
    from_parent = rf"^\s*from\s+{re.escape(parent)}\s+import\s+[^#\n]*\b{re.escape(leaf)}\b"
    return bool(re.search(direct, test_source, re.M) or re.search(from_parent, test_source, re.M))


def select_tests(room: str, test_sources: Mapping[str, str]) -> list[str]:
    """The test files (of those given, path -> source) that import the room, in a stable order.

    Only unit tests are given by the caller: the functional tests start fake-gcs-server, seconds
    per mutant."""
    return sorted(path for path, source in test_sources.items() if imports_room(source, room))


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
                mutated = mutate_code(original, operator, occurrence)
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
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    return [Mutant(**fields) for fields in json.loads(out)]


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


class _LineTracer:
    """The lines of the room's files that run (sys.settrace, in every thread): which mutants a
    stage can judge at all."""

    def __init__(self, files: Iterable[str]) -> None:
        self.files = {str(ROOT / path): path for path in files}
        self.lines: set[tuple[str, int]] = set()

    def __call__(self, frame, event, arg):  # noqa: ANN001 (sys.settrace's protocol)
        path = self.files.get(frame.f_code.co_filename)
        if path is None:
            return None

        def local(frame, event, arg):  # noqa: ANN001
            if event == "line":
                self.lines.add((path, frame.f_lineno))
            return local

        self.lines.add((path, frame.f_lineno))
        return local

    def start(self) -> None:
        import threading

        threading.settrace(self)
        sys.settrace(self)


def covered(mutant: Mutant, lines: set[tuple[str, int]]) -> bool:
    """Whether any line the mutant changes ran."""
    return any((mutant.path, line) in lines for line in range(mutant.first, mutant.last + 1))


def executable_lines(path: str, source: str) -> set[tuple[str, int]]:
    """The lines of a module that carry code, the only ones a tracer can see run (a signature's
    `*,` line, for one, carries none: a mutant there is judged, never skipped)."""
    lines: set[tuple[str, int]] = set()
    pending = [compile(source, path, "exec")]
    while pending:
        code = pending.pop()
        lines.update((path, line) for _, _, line in code.co_lines() if line is not None)
        pending.extend(const for const in code.co_consts if hasattr(const, "co_lines"))
    return lines


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


def _unit_stage(tests: Sequence[str], report: Path) -> int:
    import pytest

    args = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=", *tests]
    with report.open("w") as out, contextlib.redirect_stdout(out):
        code = pytest.main(args)
    return 0 if code == 0 else 1


def _sim_stage() -> int:
    from sim.world import World

    for seed in SIM_SEEDS:
        if World(seed).run():
            return 1
    return 0


def _in_child(
    stage: str,
    mutant: Mutant | None,
    tests: Sequence[str],
    report: Path,
    limit: float,
    tracer: _LineTracer | None = None,
) -> tuple[str, float]:
    """Run one stage in a forked child: ('pass' | 'fail' | 'timeout', seconds). With a tracer, the
    lines it saw run are written to `report`.lines (JSON)."""
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
            if tracer is not None:
                tracer.start()
            code = _unit_stage(tests, report) if stage == "unit" else _sim_stage()
            if tracer is not None:
                sys.settrace(None)
                report.with_suffix(".lines").write_text(json.dumps(sorted(tracer.lines)))
        except BaseException:  # noqa: B036 (a mutant may raise anything, even at import: it is killed)
            code = 1
        finally:
            os._exit(code)
    deadline = started + limit
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            verdict = "pass" if os.waitstatus_to_exitcode(status) == 0 else "fail"
            return verdict, time.monotonic() - started
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "timeout", time.monotonic() - started
        time.sleep(0.02)


def _first_failure(report: Path) -> str:
    for line in report.read_text(errors="replace").splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:300]
    return ""


@dataclasses.dataclass(frozen=True)
class Stages:
    """What a room's stages need: the tests, each stage's time limit and the lines it runs."""

    tests: Sequence[str]
    unit_limit: float
    sim_limit: float
    unit_lines: set[tuple[str, int]]
    sim_lines: set[tuple[str, int]]
    executable: set[tuple[str, int]]


def judge(mutant: Mutant, stages: Stages, report: Path) -> dict:
    row: dict = {**dataclasses.asdict(mutant), "ident": mutant.ident}
    unseen = not covered(mutant, stages.executable)  # no tracer could tell: judge it
    in_unit = unseen or covered(mutant, stages.unit_lines)
    in_sim = unseen or covered(mutant, stages.sim_lines)
    if not (in_unit or in_sim):
        return {**row, "outcome": SURVIVED, "not_run": True}
    verdict, unit_seconds = "pass", 0.0
    if in_unit:
        verdict, unit_seconds = _in_child("unit", mutant, stages.tests, report, stages.unit_limit)
    row["unit_seconds"] = round(unit_seconds, 2)
    if verdict == "fail":
        return {**row, "outcome": KILLED_UNIT, "killed_by": _first_failure(report)}
    if verdict == "timeout":
        return {**row, "outcome": TIMEOUT, "stage": "unit"}
    if not in_sim:
        return {**row, "outcome": SURVIVED, "sim_not_run": True}
    verdict, sim_seconds = _in_child("sim", mutant, stages.tests, report, stages.sim_limit)
    row["sim_seconds"] = round(sim_seconds, 2)
    outcome = {"fail": KILLED_SIM, "timeout": TIMEOUT, "pass": SURVIVED}[verdict]
    return {**row, "outcome": outcome, **({"stage": "sim"} if verdict == "timeout" else {})}


def run_room(room: str, limit: int | None = None) -> dict:
    started = time.monotonic()
    unit_tests = {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "tests" / "unit").glob("test_*.py"))}
    tests = select_tests(room, unit_tests)
    mutants = generate_via_tool(room_files(room))[:limit]
    _warm_up(tests)
    builtins.__dict__.setdefault(TESTING_EXCEPTION, type(TESTING_EXCEPTION, (Exception,), {}))
    with tempfile.TemporaryDirectory(prefix="mutants-") as scratch:
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = scratch  # a mutant's failures stay out of the tree
        report = Path(scratch) / "pytest.txt"
        baseline, lines = {}, {}
        for stage in ("unit", "sim"):
            # Timed untraced (the limit), then traced (the lines): tracing slows it several times.
            verdict, seconds = _in_child(stage, None, tests, report, 3600)
            traced, _ = _in_child(stage, None, tests, report, 3600, _LineTracer(room_files(room)))
            if "fail" in (verdict, traced):
                raise SystemExit(f"{room}: the unmutated code fails its {stage} stage")
            baseline[stage] = seconds
            lines[stage] = {tuple(line) for line in json.loads(report.with_suffix(".lines").read_text())}
        stages = Stages(
            tests,
            unit_limit=baseline["unit"] * TIMEOUT_FACTOR + TIMEOUT_FLOOR_SECONDS,
            sim_limit=baseline["sim"] * TIMEOUT_FACTOR + TIMEOUT_FLOOR_SECONDS,
            unit_lines=lines["unit"],
            sim_lines=lines["sim"],
            executable=set().union(*(executable_lines(p, (ROOT / p).read_text()) for p in room_files(room))),
        )
        rows = []
        for index, mutant in enumerate(mutants, 1):
            rows.append(judge(mutant, stages, report))
            print(f"  [{index}/{len(mutants)}] {rows[-1]['outcome']:<11} {mutant.ident}", file=sys.stderr, flush=True)
    summary = {
        "room": room,
        **summarize(row["outcome"] for row in rows),
        "survived_not_run": sum(1 for row in rows if row.get("not_run")),
        "seconds": round(time.monotonic() - started, 1),
        "baseline_seconds": {k: round(v, 2) for k, v in baseline.items()},
        "tests": tests,
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
        f"{summary['room']}: {summary['mutants']} mutants, {summary[KILLED_UNIT]} killed by unit tests, "
        f"{summary[KILLED_SIM]} by the simulator, {summary[SURVIVED]} survived ({summary['survived_not_run']} on lines "
        f"no stage runs), {summary[TIMEOUT]} timed out: "
        f"{summary['killed_share']:.0%} killed in {summary['seconds']:.0f} s"
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["generate"]:
        json.dump([dataclasses.asdict(m) for m in generate(argv[1:])], sys.stdout)
        return 0
    parser = argparse.ArgumentParser(prog="tools/mutants.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--room",
        type=lambda text: text.rstrip("/"),
        choices=ROOMS,
        action="append",
        help="a room (repeatable); default: all five",
    )
    parser.add_argument("--limit", type=int, help="judge only the first N mutants of each room (a quick look)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "kit" / "src")]
    os.chdir(ROOT)
    summaries = []
    for room in args.room or ROOMS:
        summaries.append(run_room(room, args.limit))
        print(summary_line(summaries[-1]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
