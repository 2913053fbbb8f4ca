"""`Settings.reconcile_timeout_seconds` (shared/settings.py): reconcile's function timeout as
Terraform deploys it. A deployment sets it from the function's own timeout
(`SPOTJOBS_RECONCILE_TIMEOUT_SECONDS`, terraform/functions.tf); where nothing sets it (the dev
stack, a shell run by hand) the default stands for it, and a call window (`CallWindow`) cut from
a longer timeout than the function's would send calls that are still waiting when it is killed.
`Settings.submit_timeout_seconds` is submit_job's, set the same way (`SPOTJOBS_SUBMIT_TIMEOUT_SECONDS`):
a drainer begins no create whose timeout would outlast it (`shared.pacing_drainer.drainer_run_seconds`)."""

from __future__ import annotations

import re

import pytest

from shared.errors import ConfigurationError
from shared.settings import Settings
from tests.support.terraform import module_config


def test_the_reconcile_timeout_a_run_without_terraform_assumes_is_the_one_terraform_deploys() -> None:
    deployed = module_config().locals["function_builtin"]["reconcile"]["timeout_seconds"]
    unset = Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SPOTJOBS_STATE_BUCKET": "b"})

    assert unset.reconcile_timeout_seconds == float(deployed)


def test_the_submit_timeout_a_run_without_terraform_assumes_is_the_one_terraform_deploys() -> None:
    config = module_config()
    assert "submit_job" not in config.locals["function_builtin"]  # it runs with the module's default
    deployed = re.search(
        r"timeout_seconds\s*=\s*optional\(number,\s*(\d+)\)", config.variables["function_defaults"]["type"]
    )
    assert deployed is not None
    unset = Settings.from_env({"GOOGLE_CLOUD_PROJECT": "p", "SPOTJOBS_STATE_BUCKET": "b"})

    assert unset.submit_timeout_seconds == float(deployed.group(1))


def test_a_create_timeout_as_long_as_submit_jobs_function_timeout_is_refused() -> None:
    """A drainer could begin no create at all: every run would hand the line over untouched."""
    with pytest.raises(ConfigurationError, match="SPOTJOBS_SUBMIT_TIMEOUT_SECONDS"):
        Settings.from_env(
            {
                "GOOGLE_CLOUD_PROJECT": "p",
                "SPOTJOBS_STATE_BUCKET": "b",
                "SPOTJOBS_CREATE_TIMEOUT_SECONDS": "60",
                "SPOTJOBS_CLAIM_LEASE_SECONDS": "120",
            }
        )
