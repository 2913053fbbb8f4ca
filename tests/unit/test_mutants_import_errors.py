"""tools/mutants.py's tests stage on a mutant that breaks its module's import: the tests it runs
cannot even be collected, which kills the mutant (the suite fails), and is no error of the runner."""

from __future__ import annotations

from pathlib import Path

from tools.mutants import _tests_stage, _verdict


def test_a_mutant_whose_module_no_longer_imports_is_killed_not_the_runners_error(tmp_path: Path) -> None:
    # cosmic-ray's ReplaceBinaryOperator_Pow_Mul turns `{**extra}` into `{*extra}`: a SyntaxError.
    (tmp_path / "mutated_room.py").write_text('def fields(**extra):\n    return {"event": 1, *extra}\n')
    (tmp_path / "test_of_the_room.py").write_text(
        "from mutated_room import fields\n\n\ndef test_fields():\n    assert fields(a=1)\n"
    )
    report = tmp_path / "pytest.txt"
    code = _tests_stage([f"{tmp_path / 'test_of_the_room.py'}::test_fields"], report)
    assert _verdict(code) == "fail", report.read_text()
