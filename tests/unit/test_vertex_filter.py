"""The emulator's customJobs.list filter: the documented grammar, and refusal of the rest."""

from __future__ import annotations

from datetime import datetime

import pytest
from google.cloud import aiplatform_v1
from hypothesis import given
from hypothesis import strategies as st

from devstack.vertex.filter import parse_filter

State = aiplatform_v1.JobState
label_keys = st.from_regex(r"[a-z][a-z0-9_-]{0,20}", fullmatch=True)
label_values = st.from_regex(r"[a-z0-9_-]{1,20}", fullmatch=True)


def job(
    labels: dict[str, str] | None = None,
    state: int = State.JOB_STATE_RUNNING,
    display_name: str = "train",
    created: str = "2026-03-01T12:00:00Z",
) -> aiplatform_v1.CustomJob:
    return aiplatform_v1.CustomJob(
        labels=labels or {},
        state=state,
        display_name=display_name,
        create_time=datetime.fromisoformat(created.replace("Z", "+00:00")),
    )


A = job({"spotjobs-request-id": "r1", "spotjobs-attempt": "1", "team": "ml"}, display_name="my_job_1")
B = job(
    {"spotjobs-request-id": "r1", "spotjobs-attempt": "2"},
    state=State.JOB_STATE_SUCCEEDED,
    display_name="my_job",
    created="2026-03-02T00:00:00Z",
)
C = job({}, state=State.JOB_STATE_FAILED, display_name="other", created="2021-05-17T23:59:59Z")
JOBS = {"A": A, "B": B, "C": C}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "ABC"),
        ("   ", "ABC"),
        # labels: equality (quoted or bare), inequality, existence, wildcard
        ('labels.spotjobs-request-id="r1"', "AB"),
        ("labels.spotjobs-attempt=2", "B"),
        ('labels.spotjobs-attempt!="2"', "AC"),
        ("labels.team:*", "A"),
        ('labels."team":*', "A"),
        ("labels.spotjobs-attempt:*", "AB"),
        ('labels.team:"m*"', "A"),
        # state
        ('state="JOB_STATE_SUCCEEDED"', "B"),
        ("state=JOB_STATE_RUNNING", "A"),
        ('state!="JOB_STATE_FAILED"', "AB"),
        # displayName / display_name
        ('displayName="my_job"', "B"),
        ('display_name="my_job"', "B"),
        ('displayName!="my_job"', "AC"),
        ('displayName:"my_job_*"', "A"),
        ('displayName:"my_job*"', "AB"),
        ('displayName:"*job*"', "AB"),
        ('displayName:"my_job"', "B"),
        # createTime / create_time, RFC 3339
        ('createTime>"2021-05-18T00:00:00Z"', "AB"),
        ('create_time<"2021-05-18T00:00:00Z"', "C"),
        ('createTime>="2026-03-02T00:00:00Z"', "B"),
        ('createTime<="2026-03-01T12:00:00Z"', "AC"),
        ('createTime="2026-03-01T12:00:00Z"', "A"),
        ('createTime!="2026-03-01T12:00:00Z"', "BC"),
        ('createTime>"2026-03-01T13:00:00+02:00"', "AB"),
        ("createTime>2026-03-01T12:00:00.5Z", "B"),
        # the documented examples
        ('state="JOB_STATE_SUCCEEDED" AND displayName:"my_job_*"', ""),
        ('state!="JOB_STATE_FAILED" OR displayName="my_job"', "AB"),
        ('NOT displayName="my_job"', "AC"),
        # boolean structure: AND, OR (tighter than AND, AIP-160), NOT, -, parentheses, juxtaposition
        ('labels.spotjobs-request-id="r1" AND labels.spotjobs-attempt="2"', "B"),
        ('labels.spotjobs-request-id="r1" labels.spotjobs-attempt="2"', "B"),
        ('state="JOB_STATE_FAILED" OR labels.team:* AND displayName:"my*"', "A"),
        ('(state="JOB_STATE_FAILED" OR labels.team:*) AND displayName:"my*"', "A"),
        ('state="JOB_STATE_FAILED" OR (labels.team:* AND displayName:"my*")', "AC"),
        ("-labels.team:*", "BC"),
        ("NOT (labels.team:* OR state=JOB_STATE_FAILED)", "B"),
        ('NOT(displayName="other")', "AB"),
        # escaped quotes
        (r'displayName="say \"hi\""', ""),
    ],
)
def test_documented_filters_select_the_documented_jobs(text: str, expected: str) -> None:
    job_filter = parse_filter(text)

    assert "".join(name for name, candidate in JOBS.items() if job_filter.matches(candidate)) == expected


def test_escaped_quotes_in_a_value() -> None:
    assert parse_filter(r'displayName="say \"hi\""').matches(job(display_name='say "hi"'))


@given(key=label_keys, value=label_values, quoted=st.booleans())
def test_a_label_term_matches_exactly_that_label(key: str, value: str, quoted: bool) -> None:
    text = f'labels.{key}="{value}"' if quoted else f"labels.{key}={value}"

    job_filter = parse_filter(text)

    assert job_filter.matches(job({key: value}))
    assert not job_filter.matches(job({key: value + "x"}))
    assert not job_filter.matches(job({}))


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ('updateTime>"2026-01-01T00:00:00Z"', "unsupported field 'updateTime'"),
        ('update_time>"2026-01-01T00:00:00Z"', "unsupported field 'update_time'"),
        ('jobSpec.scheduling.strategy="SPOT"', "unsupported field 'jobSpec.scheduling.strategy'"),
        ('labels:"team"', "unsupported field 'labels'"),
        ('name="x"', "unsupported field 'name'"),
        ('state:"JOB_STATE_RUNNING"', "does not support ':'"),
        ('state>"JOB_STATE_RUNNING"', "does not support '>'"),
        ('displayName<"b"', "does not support '<'"),
        ('labels.a>"b"', "does not support '>'"),
        ('createTime:"2026-01-01T00:00:00Z"', "does not support ':'"),
        ('state="RUNNING"', "not a JobState"),
        ('createTime>"2026-01-01"', "RFC 3339"),
        ('createTime>"yesterday"', "RFC 3339"),
        ("labels.a", "comparator"),
        ('labels.a="b" OR', "a field"),
        ('labels.a="b" AND', "a field"),
        ('(labels.a="b"', "')'"),
        ('labels.a="b")', "unexpected"),
        ('displayName="open', "unterminated"),
        ("state=", "a value"),
        ("AND state=JOB_STATE_RUNNING", "a field"),
    ],
)
def test_what_the_api_does_not_document_is_refused_not_ignored(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match="Invalid filter") as raised:
        parse_filter(text)
    assert complaint in str(raised.value)


def test_a_job_without_create_time_never_matches_a_time_comparison() -> None:
    bare = aiplatform_v1.CustomJob(display_name="x")

    assert not parse_filter('createTime<"2100-01-01T00:00:00Z"').matches(bare)
    assert parse_filter('NOT createTime<"2100-01-01T00:00:00Z"').matches(bare)
