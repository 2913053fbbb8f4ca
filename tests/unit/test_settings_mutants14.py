"""`Settings.reconcile_timeout_seconds` (shared/settings.py): reconcile's function timeout as
Terraform deploys it. A deployment sets it from the function's own timeout
(`SPOTJOBS_RECONCILE_TIMEOUT_SECONDS`, terraform/functions.tf); where nothing sets it (the dev
stack, a shell run by hand) the default stands for it, and a call window (`CallWindow`) cut from
a longer timeout than the function's would send calls that are still waiting when it is killed."""

from __future__ import annotations

from shared.settings import Settings
from tests.support.terraform import module_config


def test_the_reconcile_timeout_a_run_without_terraform_assumes_is_the_one_terraform_deploys() -> None:
    deployed = module_config().locals["function_builtin"]["reconcile"]["timeout_seconds"]
    unset = Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SPOTJOBS_STATE_BUCKET": "b"})

    assert unset.reconcile_timeout_seconds == float(deployed)
