"""A request's canonical CustomJob is the same bytes in every process. protobuf's map fields (a
job's `labels`) come back in an order that varies with the process's hash seed, and the canonical
form is what the ledger stores: two instances wrote one trigger window's request with its labels in
two orders (seen as a simulator seed whose stored state differed from run to run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

CANONICAL_OF_A_LABELLED_JOB = """
import json
from shared.requests.job_schema import read_custom_job
job = {"displayName": "x", "labels": {"retrain-trigger": "a", "retrain-window": "b", "team": "c", "zone": "d"},
       "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1",
                   "containerSpec": {"imageUri": "us-docker.pkg.dev/p/r/t:1"}}]}}
violations = []
print(json.dumps(read_custom_job(job, "custom_job", violations)), violations)
"""


def canonical_in_a_process(hash_seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed)}
    done = subprocess.run(
        [sys.executable, "-c", CANONICAL_OF_A_LABELLED_JOB], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


def test_a_jobs_canonical_form_is_the_same_bytes_whatever_the_process_hash_seed() -> None:
    outputs = {canonical_in_a_process(seed) for seed in range(6)}

    assert len(outputs) == 1, outputs
    canonical = json.loads(outputs.pop().rsplit(" ", 1)[0])
    assert list(canonical["labels"]) == ["retrain-trigger", "retrain-window", "team", "zone"]
