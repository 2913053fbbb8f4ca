"""The emulator's list filter: the label terms spotjobs relies on, and refusal of the rest."""

from __future__ import annotations

import pytest
from google.cloud import aiplatform_v1
from hypothesis import given
from hypothesis import strategies as st

from devstack.vertex.filter import FilterTerm, matches_all, parse_filter

label_keys = st.from_regex(r"[a-z][a-z0-9_-]{0,20}", fullmatch=True)
label_values = st.from_regex(r"[a-z0-9_-]{1,20}", fullmatch=True)


def job(
    labels: dict[str, str], state: int = 3, display_name: str = "train"
) -> aiplatform_v1.CustomJob:
    return aiplatform_v1.CustomJob(labels=labels, state=state, display_name=display_name)


@given(key=label_keys, value=label_values, quoted=st.booleans())
def test_a_label_term_matches_exactly_that_label(key: str, value: str, quoted: bool) -> None:
    text = f'labels.{key}="{value}"' if quoted else f"labels.{key}={value}"

    [term] = parse_filter(text)

    assert term == FilterTerm(field=f"labels.{key}", value=value, negated=False)
    assert term.matches(job({key: value}))
    assert not term.matches(job({key: value + "x"}))
    assert not term.matches(job({}))


def test_terms_joined_by_and_must_all_match() -> None:
    terms = parse_filter('labels.spotjobs-request-id="r1" AND labels.spotjobs-attempt="2"')

    assert matches_all(job({"spotjobs-request-id": "r1", "spotjobs-attempt": "2"}), terms)
    assert not matches_all(job({"spotjobs-request-id": "r1", "spotjobs-attempt": "1"}), terms)


def test_state_display_name_negation_and_escaped_quotes() -> None:
    running = job(
        {"a": "b"}, state=aiplatform_v1.JobState.JOB_STATE_RUNNING, display_name='say "hi"'
    )

    assert matches_all(running, parse_filter("state=JOB_STATE_RUNNING"))
    assert matches_all(running, parse_filter(r'display_name="say \"hi\""'))
    assert matches_all(running, parse_filter('labels.a!="c" AND state!="JOB_STATE_FAILED"'))
    assert not matches_all(running, parse_filter("labels.a!=b"))


def test_an_empty_filter_matches_everything() -> None:
    assert parse_filter("  ") == ()
    assert matches_all(job({}), ())


@pytest.mark.parametrize(
    "text",
    ['create_time>"2026-01-01"', "labels.a", 'labels.a="b" OR labels.c="d"', 'labels.a:"b"'],
)
def test_unsupported_filters_are_refused_not_ignored(text: str) -> None:
    with pytest.raises(ValueError, match="Unsupported filter term"):
        parse_filter(text)
