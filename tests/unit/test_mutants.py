"""The pure parts of `make mutants`' driver (tools/mutants.py): which tests judge a room, where a
mutation lands, and the arithmetic of the summary. The mutation run itself is a benchmark."""

from __future__ import annotations

from pathlib import Path

from tools.mutants import (
    KILLED_SIM,
    KILLED_UNIT,
    ROOMS,
    SURVIVED,
    TIMEOUT,
    Mutant,
    apply,
    changed_span,
    covered,
    executable_lines,
    imports_room,
    room_files,
    select_tests,
    slug,
    summarize,
)

ROOT = Path(__file__).resolve().parents[2]


def test_a_test_judges_a_room_it_imports_in_any_spelling() -> None:
    assert imports_room("from shared.pacing import Pacer\n", "shared/pacing.py")
    assert imports_room("import shared.pacing as pacing\n", "shared/pacing.py")
    assert imports_room("from shared import alerts, pacing\n", "shared/pacing.py")
    assert imports_room("from shared.fleet.store import FleetStore\n", "shared/fleet")
    assert imports_room("    from shared.fleet import placement\n", "shared/fleet")


def test_a_test_that_imports_a_neighbour_does_not_judge_the_room() -> None:
    assert not imports_room("from shared.paced_submit import submit\n", "shared/pacing.py")
    assert not imports_room("from shared.pacing_extra import x\n", "shared/pacing.py")
    assert not imports_room("# from shared.pacing import Pacer\n", "shared/pacing.py")
    assert not imports_room("from shared import fleetwide\n", "shared/fleet")


def test_the_selection_is_the_importing_tests_in_a_stable_order() -> None:
    sources = {
        "tests/unit/test_b.py": "from shared.pruning.plan import plan\n",
        "tests/unit/test_a.py": "from shared.pruning import runner\n",
        "tests/unit/test_c.py": "from shared.ledger import store\n",
    }
    assert select_tests("shared/pruning", sources) == ["tests/unit/test_a.py", "tests/unit/test_b.py"]


def test_every_room_exists_and_has_unit_tests() -> None:
    unit = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "tests" / "unit").glob("test_*.py")}
    for room in ROOMS:
        assert room_files(room, ROOT), room
        assert select_tests(room, unit), room


def test_a_mutation_is_the_span_of_lines_it_changed_and_applies_back() -> None:
    original = "a = 1\nif a:\n    b = (a +\n         2)\nc = 3\n"
    mutated = "a = 1\nif a:\n    b = (a -\n         2)\nc = 3\n"
    first, last, before, after = changed_span(original, mutated)
    assert (first, last, before, after) == (3, 3, "    b = (a +\n", "    b = (a -\n")
    mutant = Mutant("m.py", "core/ReplaceBinaryOperator_Add_Sub", 0, first, last, before, after)
    assert apply(original, mutant) == mutated


def test_a_mutant_counts_as_run_when_any_of_its_lines_ran() -> None:
    mutant = Mutant("m.py", "core/NumberReplacer", 0, 3, 4, "", "")
    assert covered(mutant, {("m.py", 4)})
    assert not covered(mutant, {("m.py", 5), ("other.py", 3)})


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
    source = "def f(\n    a,\n    *,\n    b,\n):\n    return a + b\n"
    lines = {line for _, line in executable_lines("m.py", source)}
    assert {1, 6} <= lines
    assert 3 not in lines
