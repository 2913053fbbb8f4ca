"""`spotjobs_kit.experiment_run()`: the request id and a run name that is the same in every attempt
and continuation of a request, and a name every tracker accepts (W&B id, TensorBoard folder,
Vertex AI Experiments run)."""

from __future__ import annotations

import re

import pytest
from spotjobs_kit import experiment_run
from spotjobs_kit.experiment import run_name

# Vertex AI Experiments: a run name is lowercase letters, digits and "-", at most 128.
EXPERIMENTS_RUN = re.compile(r"[a-z0-9][a-z0-9-]{0,127}")


def attempt_env(attempt: int, job_id: str) -> dict[str, str]:
    """What a job of attempt `attempt` gets from submit and Vertex (the request's output dir is fixed)."""
    return {
        "SPOTJOBS_REQUEST_ID": "pretrain-7b",
        "SPOTJOBS_ATTEMPT": str(attempt),
        "CLOUD_ML_JOB_ID": job_id,
        "AIP_TENSORBOARD_LOG_DIR": "gs://ckpt/requests/pretrain-7b/logs/",
    }


def test_every_attempt_of_a_request_names_the_same_run_and_log_dir() -> None:
    first = experiment_run(attempt_env(1, "111"))
    continued = experiment_run(attempt_env(2, "222"))

    assert (first.request_id, first.name, first.attempt) == ("pretrain-7b", "pretrain-7b", 1)
    assert (continued.name, continued.log_dir, continued.attempt) == (first.name, first.log_dir, 2)
    assert first.log_dir == "gs://ckpt/requests/pretrain-7b/logs/"


def test_outside_spotjobs_the_run_is_the_jobs_or_local() -> None:
    assert experiment_run({"CLOUD_ML_JOB_ID": "123"}).name == "job-123"
    local = experiment_run({})
    assert (local.request_id, local.name, local.attempt, local.log_dir) == (None, "local", None, None)


@pytest.mark.parametrize("request_id", ["a", "nightly_retrain_2026", "x" * 63, "run_1", "run-1"])
def test_the_name_is_one_every_tracker_accepts(request_id: str) -> None:
    assert EXPERIMENTS_RUN.fullmatch(run_name(request_id))


def test_ids_that_differ_only_in_a_changed_character_stay_apart() -> None:
    assert run_name("run_1") != run_name("run-1") == "run-1"
    assert run_name("run_1") == run_name("run_1")  # stable: a digest, not a random suffix
