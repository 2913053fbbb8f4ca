"""`spotjobs resubmit`: the new request id it picks when none is given."""

from __future__ import annotations

from shared.requests.request_ids import is_valid_request_id
from spotjobs.cli.requests import next_resubmit_id


def test_the_first_free_dash_r_id_from_r2_is_chosen() -> None:
    taken = {"nightly-001", "nightly-001-r2", "nightly-001-r3"}

    assert next_resubmit_id("other", taken.__contains__) == "other-r2"
    assert next_resubmit_id("nightly-001", taken.__contains__) == "nightly-001-r4"


def test_an_id_too_long_for_a_suffix_asks_for_new_id() -> None:
    longest = "a" * 63
    assert is_valid_request_id(longest)

    assert next_resubmit_id(longest, lambda candidate: False) is None
    assert next_resubmit_id("a" * 60, lambda candidate: False) == "a" * 60 + "-r2"
    assert next_resubmit_id("a" * 60, lambda candidate: True) is None  # -r10 would not fit
