"""Loading terraform/ with python-hcl2, shared by the Terraform tests (and the deploy-zip test).

Every .tf file must parse; the other test_terraform*.py modules assert on the parsed structure.
python-hcl2 8.x keeps the quotes of string literals and block labels (`'"enforced"'`); older
versions strip them. `clean()` normalises both to plain strings, and interpolations stay as
`"${...}"` text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.terraform import TERRAFORM_DIR, module_files, parse, tf_files


@pytest.mark.parametrize("path", tf_files(), ids=lambda p: str(p.relative_to(TERRAFORM_DIR)))
def test_every_tf_file_parses_with_python_hcl2(path: Path) -> None:
    parsed = parse(path)
    assert parsed, f"{path} parsed to nothing"


def test_module_has_the_expected_files() -> None:
    names = {p.name for p in module_files()}
    assert {"versions.tf", "variables.tf", "main.tf", "outputs.tf"} <= names
    assert {"pubsub.tf", "functions.tf", "iam.tf", "storage.tf", "logging.tf", "scheduler.tf", "monitoring.tf"} <= names
    assert (TERRAFORM_DIR / "README.md").is_file()
    assert (TERRAFORM_DIR / "examples" / "basic" / "main.tf").is_file()
