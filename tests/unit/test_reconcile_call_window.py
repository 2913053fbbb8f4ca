"""`shared.reconcile_vertex.CallWindow`: which Vertex calls a reconcile pass may still send."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from google.api_core.exceptions import DeadlineExceeded, ServiceUnavailable

from shared.reconcile_vertex import CallDeferred, CallWindow

START = datetime(2026, 12, 7, 13, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def window(clock: Clock, *, function_timeout: float = 300.0, call_timeout: float = 30.0) -> CallWindow:
    return CallWindow(START + timedelta(seconds=function_timeout), call_timeout, clock)


def send(window: CallWindow, location: str, error: Exception | None = None) -> None:
    with window.sending(location):
        if error is not None:
            raise error


def test_a_location_whose_call_ran_out_its_timeout_gets_no_more_calls_in_the_pass() -> None:
    calls = window(Clock())

    with pytest.raises(DeadlineExceeded):
        send(calls, "europe-west4", DeadlineExceeded("no reply"))

    with pytest.raises(CallDeferred, match="europe-west4"):
        send(calls, "europe-west4")
    send(calls, "us-central1")  # the other locations' calls go on
    assert calls.stalled == {"europe-west4"} and not calls.out_of_time


def test_an_error_vertex_answered_with_is_a_reply_not_a_stall() -> None:
    calls = window(Clock())

    with pytest.raises(ServiceUnavailable):
        send(calls, "europe-west4", ServiceUnavailable("busy"))

    send(calls, "europe-west4")
    assert calls.stalled == set()


@pytest.mark.parametrize(("function_timeout", "call_timeout"), [(300.0, 30.0), (540.0, 60.0), (120.0, 10.0)])
def test_a_call_starts_only_while_it_and_one_more_timeout_fit_before_the_function_timeout(
    function_timeout: float, call_timeout: float
) -> None:
    """The sweep's calls, once the requests are done (`sweeping`)."""
    clock = Clock()
    calls = window(clock, function_timeout=function_timeout, call_timeout=call_timeout)
    calls.sweeping = True
    clock.now = START + timedelta(seconds=function_timeout - 2 * call_timeout)

    send(calls, "us-central1")
    assert not calls.out_of_time

    clock.now += timedelta(milliseconds=1)
    with pytest.raises(CallDeferred, match="function timeout"):
        send(calls, "us-central1")
    assert calls.out_of_time and calls.sweep_deferred == 1


@pytest.mark.parametrize(("function_timeout", "call_timeout"), [(300.0, 30.0), (540.0, 60.0), (120.0, 10.0)])
def test_the_requests_leave_the_last_call_timeout_to_the_stray_sweep(
    function_timeout: float, call_timeout: float
) -> None:
    """No request is begun, nor its call sent, once only the sweep's call timeout (and the margin)
    is left: a pass whose requests outgrow its window still sweeps (seed 10348)."""
    clock = Clock()
    calls = window(clock, function_timeout=function_timeout, call_timeout=call_timeout)
    clock.now = START + timedelta(seconds=function_timeout - 3 * call_timeout)

    send(calls, "us-central1")
    assert not calls.requests_closed() and not calls.out_of_time

    clock.now += timedelta(milliseconds=1)
    assert calls.requests_closed()
    with pytest.raises(CallDeferred, match="function timeout"):
        send(calls, "us-central1")
    assert calls.out_of_time and calls.sweep_deferred == 0  # the requests' refusals are not the sweep's

    calls.sweeping = True
    send(calls, "us-central1")  # the sweep's call timeout
