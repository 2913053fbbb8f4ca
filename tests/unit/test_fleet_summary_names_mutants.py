"""A compacted attempt's name with its answered restart waits (shared/fleet/store.py, the
thirteenth mutation pass): `~<replicas>~<answered restart waits>` is read only for a job of at
least one VM and a wait of no negative seconds; anything else is no fact."""

from __future__ import annotations

import pytest

from shared.fleet import store

# A summary's fixed parts: at, attempt key, exposure, waited, preemptions, restart waits, wait, changeover.
SUMMARY = "fleet/a3-highgpu-8g+nvidia_h100_80gb+8/us-east4/attempt~1764590400~k~7200~600~1~1800~600~-"


def test_a_summary_of_one_vm_and_its_answered_wait_is_read() -> None:
    parsed = store.parse_name(f"{SUMMARY}~1~1800")
    assert parsed is not None
    summary = parsed[1].summary
    assert summary is not None and (summary.replicas, summary.answered_restart_waits) == (1, 1800)


@pytest.mark.parametrize(
    "tail",
    [
        "~0~1800",  # a job of no VM
        "~-1~1800",
        "~1~-1",  # a wait of negative seconds
        "~2~-5",
    ],
)
def test_a_summary_of_no_vm_or_a_negative_answered_wait_is_no_fact(tail: str) -> None:
    assert store.parse_name(f"{SUMMARY}{tail}") is None
