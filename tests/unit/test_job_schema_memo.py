"""The CustomJob walk judges a short string, an integer or a boolean leaf once per field: what it
says must be what judging it afresh says, at each violation's own path."""

from __future__ import annotations

import pytest

from shared.errors import Violation
from shared.requests import job_schema


def _job(**pool: object) -> dict[str, object]:
    return {
        "displayName": "memo",
        "jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4", **pool}, "replicaCount": 1}]},
    }


def _walk(job: dict[str, object], path: str = "custom_job") -> list[Violation]:
    found: list[Violation] = []
    job_schema._canonical_custom_job(job, path, found)  # noqa: SLF001 - the walk itself, past read_custom_job's memo
    return found


@pytest.mark.parametrize(
    "field",
    [
        {"acceleratorCount": True},  # a boolean where an integer goes: refused
        {"acceleratorCount": 1},
        {"acceleratorCount": "two"},
        {"acceleratorType": "NOT_A_TYPE"},
        {"acceleratorType": 7},
        {"acceleratorType": "NVIDIA_TESLA_T4"},
        {"acceleratorCount": 1.5},  # not remembered: judged each time
        {"acceleratorCount": [1]},
    ],
)
def test_a_leaf_judged_again_says_what_it_said_first_at_its_own_path(field: dict[str, object]) -> None:
    job_schema._remembered_leaf_problem.cache_clear()  # noqa: SLF001
    first = _walk(_job(**field))
    again = _walk(_job(**field), "elsewhere")
    job_schema._remembered_leaf_problem.cache_clear()  # noqa: SLF001
    assert again == _walk(_job(**field), "elsewhere")
    assert [v.message for v in first] == [v.message for v in again]
    assert all(v.path.startswith("elsewhere") for v in again)


def test_true_and_one_are_judged_apart() -> None:
    job_schema._remembered_leaf_problem.cache_clear()  # noqa: SLF001
    assert _walk(_job(acceleratorCount=1)) == []
    assert _walk(_job(acceleratorCount=True)) != []
    assert _walk(_job(acceleratorCount=1)) == []
