"""One experiment across attempts: the names an experiment tracker resumes one run by.

A re-queued attempt, and a continuation after the job timeout, is a new Vertex job: without a
stable id each starts a new W&B run, a new TensorBoard directory and a new Vertex AI Experiments
run. spotjobs' submit sets `SPOTJOBS_REQUEST_ID` (and `SPOTJOBS_ATTEMPT`) on every worker pool of
every attempt, and the request's output directory is fixed at its first claim, so Vertex's
`AIP_TENSORBOARD_LOG_DIR` (`<output dir>/logs/`) is the same across attempts too.

    from spotjobs_kit import experiment_run

    experiment = experiment_run()
    wandb.init(project="p", id=experiment.name, resume="allow")

docs/kit.md ("One experiment across attempts") shows W&B, TensorBoard and Vertex AI Experiments.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

# Vertex AI Experiments' run names are the strictest of the three trackers: lowercase letters,
# digits and "-" (W&B ids refuse "/", "\", "#", "?", "%", ":"; TensorBoard takes any folder name).
_UNSAFE = re.compile(r"[^a-z0-9-]+")
_DIGEST_CHARS = 8


@dataclass(frozen=True)
class ExperimentRun:
    request_id: str | None  # None outside spotjobs (a local run, or a job submitted by hand)
    name: str  # the same in every attempt and continuation of the request
    attempt: int | None
    log_dir: str | None  # AIP_TENSORBOARD_LOG_DIR: the request's, the same in every attempt


def experiment_run(environ: Mapping[str, str] | None = None) -> ExperimentRun:
    """The request's id and its stable run name, from what submit puts in the environment. Outside
    spotjobs the name is the Vertex job's (`job-<id>`), else `local`: stable for that job only."""
    environ = os.environ if environ is None else environ
    request_id = (environ.get("SPOTJOBS_REQUEST_ID") or "").strip() or None
    attempt = (environ.get("SPOTJOBS_ATTEMPT") or "").strip()
    job_id = (environ.get("CLOUD_ML_JOB_ID") or "").strip()
    if request_id:
        name = run_name(request_id)
    else:
        name = run_name(f"job-{job_id}") if job_id else "local"
    return ExperimentRun(
        request_id=request_id,
        name=name,
        attempt=int(attempt) if attempt.isdigit() else None,
        log_dir=environ.get("AIP_TENSORBOARD_LOG_DIR") or None,
    )


def run_name(identity: str) -> str:
    """`identity` as a name every tracker accepts; where characters had to change, a digest of the
    original keeps two ids that differ only there apart (`a_b` and `a-b`)."""
    cleaned = _UNSAFE.sub("-", identity.lower()).strip("-") or "run"
    if cleaned == identity:
        return cleaned
    digest = hashlib.sha256(identity.encode()).hexdigest()[:_DIGEST_CHARS]
    return f"{cleaned[: 127 - _DIGEST_CHARS]}-{digest}"
