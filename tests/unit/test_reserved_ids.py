"""The ids spotjobs derives are reserved (issue 32 item 6): what the operator's tools name stays
outside them, so submit_job accepts it."""

from __future__ import annotations

from shared.jobs import RESERVED_ID_PREFIXES
from shared.requests.request_ids import is_valid_request_id
from spotjobs.cli.requests import generate_request_id, next_resubmit_id


def test_spotjobs_submit_names_a_bare_body_outside_the_reserved_prefixes() -> None:
    generated = generate_request_id()
    assert is_valid_request_id(generated) and not generated.startswith(RESERVED_ID_PREFIXES)


def test_a_resubmit_of_a_derived_or_trigger_request_gets_an_id_outside_the_reserved_prefixes() -> None:
    taken = {"rs-trg-nightly-w20261201t030000z-r2"}
    assert (
        next_resubmit_id("trg-nightly-w20261201t030000z", taken.__contains__) == "rs-trg-nightly-w20261201t030000z-r3"
    )
    assert next_resubmit_id("req-0123456789abcdef-20261201090000", lambda _: False) == (
        "rs-req-0123456789abcdef-20261201090000-r2"
    )
    assert next_resubmit_id("resnet-nightly", lambda _: False) == "resnet-nightly-r2"  # as before
