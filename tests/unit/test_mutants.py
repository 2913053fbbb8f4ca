"""The pure parts of `make mutants`' driver (tools/mutants.py): which tests can reach a room,
which of them judge a mutant, where a mutation lands, and the arithmetic of the summary. The
mutation run itself is a benchmark."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from tools.mutants import (
    IMPORTING,
    KILLED_SIM,
    KILLED_UNIT,
    PROJECT_PACKAGES,
    PYTEST_ARGS,
    ROOMS,
    SIMULATOR,
    SURVIVED,
    TIMEOUT,
    Mutant,
    _ByTest,
    _tests_stage,
    _Tracer,
    _verdict,
    apply,
    candidate_tests,
    changed_span,
    detected_before,
    executable_lines,
    fastest_first,
    import_time_lines,
    imported_names,
    judges,
    module_name,
    room_argument,
    room_files,
    slug,
    stable_test_id,
    summarize,
)

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_is_read_in_any_spelling_and_anywhere() -> None:
    source = (
        "import shared.pacing as pacing\n"
        "from shared import alerts\n"
        "def f():\n"
        "    from shared.fleet.store import FleetStore\n"
        "from . import sibling\n"
    )
    assert imported_names(source) == {
        "shared.pacing",
        "shared",
        "shared.alerts",
        "shared.fleet.store",
        "shared.fleet.store.FleetStore",
    }


def test_module_names_of_the_tree_and_of_the_kit() -> None:
    assert module_name("shared/fleet/store.py") == "shared.fleet.store"
    assert module_name("shared/fleet/__init__.py") == "shared.fleet"
    assert module_name("kit/src/spotjobs_kit/resume.py") == "spotjobs_kit.resume"


def test_a_test_is_a_candidate_when_it_reaches_the_room_through_other_modules() -> None:
    sources = {
        "shared/pacing.py": "import json\n",
        "shared/submit.py": "def f():\n    from shared.pacing import Pacer\n",
        "shared/other.py": "import shared.alerts\n",
        "tests/unit/test_direct.py": "from shared import pacing\n",
        "tests/functional/test_through_submit.py": "from shared.submit import f\n",
        "tests/unit/test_unrelated.py": "from shared.other import x\n",
        "tests/functional/test_own_install.py": (
            "from shared.submit import f\n@pytest.fixture(scope='module')\ndef install(): ...\n"
        ),
        "tests/integration/test_stack.py": "from shared.submit import f\n",
        "tests/unit/helpers.py": "from shared.pacing import Pacer\n",
    }
    assert candidate_tests(["shared/pacing.py"], sources) == [
        "tests/functional/test_through_submit.py",
        "tests/unit/test_direct.py",
    ]


def test_every_room_exists_and_has_candidate_tests() -> None:
    sources = {
        str(p.relative_to(ROOT)): p.read_text()
        for package in ("shared", "tests")
        for p in (ROOT / package).rglob("*.py")
    }
    for room in ROOMS:
        assert room_files(room, ROOT), room
        assert candidate_tests([room], sources), room


def test_a_mutation_is_the_span_of_lines_it_changed_and_applies_back() -> None:
    original = "a = 1\nif a:\n    b = (a +\n         2)\nc = 3\n"
    mutated = "a = 1\nif a:\n    b = (a -\n         2)\nc = 3\n"
    first, last, before, after = changed_span(original, mutated)
    assert (first, last, before, after) == (3, 3, "    b = (a +\n", "    b = (a -\n")
    mutant = Mutant("m.py", "core/ReplaceBinaryOperator_Add_Sub", 0, first, last, before, after)
    assert apply(original, mutant) == mutated


SOURCE = (
    "LIMIT = 5\n"  # 1: runs at import
    "def f(\n"  # 2: runs at import (and when called)
    "    a,\n"  # 3: no code
    "    *,\n"  # 4: no code
    "    b,\n"  # 5: no code
    "):\n"  # 6: no code
    "    if a > LIMIT:\n"  # 7
    "        return b\n"  # 8
    "    return a\n"  # 9
)
EXECUTABLE = executable_lines("m.py", SOURCE)
IMPORT_TIME = import_time_lines("m.py", SOURCE)
RAN_BY = {("m.py", 7): {"t_fast", "t_slow", SIMULATOR}, ("m.py", 8): {"t_slow"}, ("m.py", 9): {"t_fast", SIMULATOR}}


def mutant_on(first: int, last: int | None = None) -> Mutant:
    return Mutant("m.py", "core/NumberReplacer", 0, first, last or first, "", "")


def test_a_mutant_is_judged_by_whoever_ran_one_of_its_lines() -> None:
    assert judges(mutant_on(8), RAN_BY, EXECUTABLE, IMPORT_TIME) == {"t_slow"}
    assert judges(mutant_on(8, 9), RAN_BY, EXECUTABLE, IMPORT_TIME) == {"t_slow", "t_fast", SIMULATOR}
    assert judges(mutant_on(8), {}, EXECUTABLE, IMPORT_TIME) == set()


def test_a_mutant_of_a_line_run_at_import_is_judged_by_every_user_of_its_module() -> None:
    assert ("m.py", 1) in IMPORT_TIME
    assert ("m.py", 7) not in IMPORT_TIME
    assert judges(mutant_on(1), RAN_BY, EXECUTABLE, IMPORT_TIME) == {"t_fast", "t_slow", SIMULATOR}


def test_a_mutant_of_a_line_without_code_is_judged_by_those_who_ran_the_next_line_with_code() -> None:
    assert ("m.py", 4) not in EXECUTABLE
    assert judges(mutant_on(4), RAN_BY, EXECUTABLE, IMPORT_TIME) == {"t_fast", "t_slow", SIMULATOR}


def test_judging_again_keeps_only_what_was_detected_and_only_for_the_same_mutant() -> None:
    killed, alive = mutant_on(7), mutant_on(8)
    rows = [
        {**killed.__dict__, "outcome": KILLED_UNIT},
        {**alive.__dict__, "outcome": SURVIVED},
        {**mutant_on(9).__dict__, "outcome": TIMEOUT},
    ]
    kept = detected_before(rows)
    assert set(kept) == {killed, mutant_on(9)}
    moved = Mutant("m.py", "core/NumberReplacer", 0, 8, 8, "", "")  # its line moved: another mutant
    assert moved not in kept


def test_tests_run_fastest_first() -> None:
    assert fastest_first({"t_slow", "t_fast", "t_new"}, {"t_slow": 2.0, "t_fast": 0.1}) == ["t_new", "t_fast", "t_slow"]


def test_the_summary_counts_timeouts_as_detected_and_survivors_not() -> None:
    outcomes = [KILLED_UNIT] * 5 + [KILLED_SIM] * 2 + [TIMEOUT] + [SURVIVED] * 2
    assert summarize(outcomes) == {
        "mutants": 10,
        KILLED_UNIT: 5,
        KILLED_SIM: 2,
        SURVIVED: 2,
        TIMEOUT: 1,
        "killed_share": 0.8,
    }
    assert summarize([])["killed_share"] == 0.0


def test_a_rooms_results_file_is_named_after_it() -> None:
    assert slug("shared/pacing.py") == "shared-pacing"
    assert slug("shared/pruning/") == "shared-pruning"


def test_only_lines_that_carry_code_can_be_seen_run() -> None:
    lines = {line for _, line in EXECUTABLE}
    assert {1, 2, 7, 8, 9} <= lines
    assert not {3, 4, 5, 6} & lines


def test_a_room_or_one_file_of_a_room_is_taken_and_anything_else_refused_naming_the_rooms() -> None:
    assert room_argument("shared/ledger/") == "shared/ledger"
    assert room_argument("shared/ledger/claims.py") == "shared/ledger/claims.py"
    assert room_files(room_argument("shared/ledger/claims.py")) == ["shared/ledger/claims.py"]
    for wrong in ("shared/alerts.py", "shared/ledger/absent.py", "shared/ledger/../alerts.py", "tools"):
        with pytest.raises(argparse.ArgumentTypeError, match="shared/pacing.py"):
            room_argument(wrong)


def test_tests_the_trace_recorded_that_pytest_no_longer_finds_are_the_runners_error_never_a_kill(
    tmp_path: Path,
) -> None:
    # A test renamed while a run goes on: pytest selects nothing (exit 5); counting that as a failed
    # test would count every mutant that test judges as killed.
    report = tmp_path / "pytest.txt"
    code = _tests_stage(["tests/unit/test_mutants.py::a_test_renamed_since_the_trace"], report)
    assert _verdict(code) == "error"
    assert _verdict(0) == "pass"
    assert _verdict(1) == "fail"


def test_a_mutant_that_breaks_a_test_modules_import_is_killed_not_the_runners_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mutant raising at import (a constant's `Path(...) * "x.json"`) makes pytest collect nothing
    # of the module and exit 4 ("found no collectors"), as for a renamed test; but the module the
    # trace imported no longer imports: the mutant failed the test.
    (tmp_path / "test_served_a_broken_import.py").write_text(
        'raise TypeError("the mutated module fails at import")\n\ndef test_x():\n    pass\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = _tests_stage(["test_served_a_broken_import.py::test_x"], tmp_path / "pytest.txt")
    assert _verdict(code) == "fail"


def test_a_mutant_whose_module_no_longer_parses_is_killed_not_the_runners_error(tmp_path: Path) -> None:
    # cosmic-ray's ReplaceBinaryOperator_Pow_Mul turns `{**extra}` into `{*extra}`: a SyntaxError in
    # the room's module, so the test module importing it cannot be collected.
    (tmp_path / "mutated_room.py").write_text('def fields(**extra):\n    return {"event": 1, *extra}\n')
    (tmp_path / "test_of_the_room.py").write_text(
        "from mutated_room import fields\n\n\ndef test_fields():\n    assert fields(a=1)\n"
    )
    report = tmp_path / "pytest.txt"
    code = _tests_stage([f"{tmp_path / 'test_of_the_room.py'}::test_fields"], report)
    assert _verdict(code) == "fail", report.read_text()


def test_a_test_whose_parameters_print_a_mutated_constant_is_still_run_and_judges(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A test parametrized by a room's constant carries its value in its id
    # (`test_rate[0.02]`); a mutant changing the constant renames it (`test_rate[1.02]`), so the
    # id the trace recorded is not found. That says nothing about the mutant: the test still runs.
    (tmp_path / "rates.py").write_text("RATE = 0.02\n")
    (tmp_path / "test_rates.py").write_text(
        "import pytest\n\nfrom rates import RATE\n\n\n"
        "@pytest.mark.parametrize(('name', 'rate'), [('same', RATE)])\n"
        "def test_rate(name, rate):\n    assert rate < 0.5\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # The mutant has the same size as the original and may be written in the same second: a cached
    # .pyc would then pass for it (make test writes bytecode).
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    traced = _ByTest(_Tracer([], IMPORTING))
    pytest.main([*PYTEST_ARGS, "test_rates.py"], plugins=[traced])
    recorded = list(traced.seconds)
    for name in ("rates", "test_rates"):
        monkeypatch.delitem(sys.modules, name, raising=False)

    (tmp_path / "rates.py").write_text("RATE = 1.02\n")  # the mutant: the test now fails
    report = tmp_path / "pytest.txt"
    assert _verdict(_tests_stage(recorded, report)) == "fail", report.read_text()


def test_a_tests_stable_id_names_its_parameters_by_position_not_by_value() -> None:
    assert stable_test_id("t.py::test_rate[US-0.02]", {"rate": 1, "where": 0}) == "t.py::test_rate[rate#1,where#0]"
    assert stable_test_id("t.py::Tests::test_plain", {}) == "t.py::Tests::test_plain"


def test_every_package_of_the_tree_is_imported_anew_for_each_mutant() -> None:
    # A package of ours left warm keeps the unmutated room it imported: `bench` did, so the tests
    # that drive the room through bench's code judged no mutant, and failed in the traced session
    # where they compare bench's functions with the room's (nine of them).
    packages = {init.parent.name for init in ROOT.glob("*/__init__.py")}
    assert packages <= set(PROJECT_PACKAGES)


def test_the_traced_session_starts_each_test_with_the_rooms_caches_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A mutant's child starts with empty caches, so the first of its tests to call a cached
    # function of the room runs the mutated body. The trace must see every test that calls it, not
    # only the first of the session (records.py's shape checks are cached: the one test that first
    # read a record judged every mutant of them, and they survived).
    room = tmp_path / "cached_room.py"
    room.write_text("import functools\n\n\n@functools.cache\ndef rate():\n    return 2\n")
    (tmp_path / "test_cached_room.py").write_text(
        "from cached_room import rate\n\n\n"
        "def test_first():\n    assert rate() == 2\n\n\n"
        "def test_second():\n    assert rate.cache_info().currsize == 0\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("cached_room", "test_cached_room"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    traced = _ByTest(_Tracer([str(room)], IMPORTING))
    pytest.main([*PYTEST_ARGS, "test_cached_room.py"], plugins=[traced])
    assert set(traced.seconds) == {"test_cached_room.py::test_first", "test_cached_room.py::test_second"}
    assert not traced.failed
