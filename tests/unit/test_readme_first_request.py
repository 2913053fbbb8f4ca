"""The README's first request is one the default policy (the local stack's) accepts, for the
trainer and preemption plan the README runs it with."""

from __future__ import annotations

import json
import re
from pathlib import Path

import spotjobs
from devstack.trainer import parse_args
from shared.settings import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def first_request() -> dict:
    found = re.search(r"<!-- snippet: first-request -->\n```json\n(.*?)```\n", README, re.S)
    assert found, "README.md has no snippet 'first-request'"
    return json.loads(found.group(1))


def test_the_first_request_is_valid_under_the_default_policy() -> None:
    assert spotjobs.validate(first_request(), settings=Settings.from_env({})) == []


def test_the_commands_name_the_first_request() -> None:
    request_id = first_request()["request_id"]
    assert f'"spotjobs-request-id": "{request_id}"' in README
    for command in ("submit first.json", f"status {request_id} --watch", f"logs {request_id}"):
        assert f"spotjobs {command}" in README, command


def test_its_module_is_the_demo_trainer_and_takes_its_args(tmp_path: Path) -> None:
    pool = first_request()["custom_job"]["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]
    assert pool["pythonModule"] == "devstack.trainer"
    # The folders Vertex (and the emulator) pass as AIP_CHECKPOINT_DIR and AIP_MODEL_DIR.
    config = parse_args([*pool["args"], "--checkpoint-dir", str(tmp_path), "--model-dir", str(tmp_path)])
    # 12 checkpoints: room for the README's two preemptions, each right after a run's second one.
    assert (config.steps, config.checkpoint_every) == (600, 50)
