"""`make mutants`' test stage (tools/mutants.py, `_tests_stage`) when a mutant breaks an import:
pytest then cannot collect the test module and says the traced tests are "not found", as for a
test renamed since the trace; the mutant is killed (its tests cannot pass), not the runner's error."""

from __future__ import annotations

from pathlib import Path

from tools.mutants import _tests_stage, _verdict


def test_a_test_module_that_no_longer_imports_fails_the_stage_not_the_runner(tmp_path: Path) -> None:
    module = tmp_path / "test_a_module_the_mutant_breaks.py"
    module.write_text("raise SyntaxError('what a mutant of an imported module raises')\n\ndef test_it():\n    pass\n")
    code = _tests_stage([f"{module}::test_it"], tmp_path / "pytest.txt")
    assert _verdict(code) == "fail"
