"""shared/jobs.py at the edges its mutants found: a FLEX_START job waits a day for capacity when its
request says nothing, or says it in no form Vertex reads (Vertex's documented default), and a job
carries at most 64 labels, Vertex's limit, three of them spotjobs' own."""

from __future__ import annotations

from shared.jobs import job_replicas, max_wait_seconds, state_name
from shared.requests.job_policy import check_labels

DAY = 24 * 3600


def flex(**scheduling: str) -> dict:
    return {"jobSpec": {"scheduling": {"strategy": "FLEX_START", **scheduling}}}


def test_a_flex_start_job_waits_a_day_unless_its_request_says_how_long_in_seconds() -> None:
    assert max_wait_seconds(flex()) == DAY
    assert max_wait_seconds(flex(maxWaitDuration="1800s")) == 1800
    assert max_wait_seconds(flex(maxWaitDuration="one day")) == DAY  # no duration Vertex reads


def test_a_request_may_carry_61_labels_of_its_own_not_62() -> None:
    def labels(count: int) -> dict[str, str]:
        return {f"team-{k}": "ml" for k in range(count)}

    assert check_labels(labels(61), "custom_job.labels") == []
    assert [v.path for v in check_labels(labels(62), "custom_job.labels")] == ["custom_job.labels"]


def test_a_job_state_number_names_the_state_vertex_numbers_so() -> None:
    """A state read as a bare number (a job whose state the client library did not make an enum)."""
    from google.cloud.aiplatform_v1 import JobState as VertexJobState

    numbers = range(len(VertexJobState))
    assert [state_name(n) for n in numbers] == [
        f"JOB_STATE_{VertexJobState(n).name.removeprefix('JOB_STATE_')}" for n in numbers
    ]


def test_a_worker_pool_that_names_no_replica_count_runs_one_replica() -> None:
    pools = [{"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": "2"}, {"machineSpec": {}}, {}]

    assert job_replicas({"jobSpec": {"workerPoolSpecs": pools}}) == 3  # the empty pool is a placeholder
