"""A replica count in a fleet fact's name and in the job's expected Spot run
(shared/fleet/store.py, shared/fleet/estimate.py): only several replicas are ever written, and a
job said to have none runs as one VM."""

from __future__ import annotations

from shared.fleet import store
from shared.fleet.estimate import per_job_lifetime

RUN = "fleet/a3-highgpu-8g+nvidia_h100_80gb+8/us-east4/run~1764590400~36000~2~k~0"


def test_a_name_saying_one_replica_is_passed_over_as_never_written() -> None:
    assert store.parse_name(f"{RUN}~2") is not None
    assert store.parse_name(f"{RUN}~1") is None


def test_a_job_of_no_replicas_runs_one_vms_lifetime() -> None:
    assert per_job_lifetime(3600.0, 0) == 3600.0
    assert per_job_lifetime(3600.0, 2) == 1800.0
