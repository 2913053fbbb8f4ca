"""The kit's multi-node rules that need no torch: which failures mean a lost peer, the knobs'
values, and how a run preempted by a peer reports and exits. (Real processes:
tests/frameworks/test_multinode.py.)"""

from __future__ import annotations

import io
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from spotjobs_kit import KitError, Run, parse_kit_line
from spotjobs_kit.distributed import (
    DEFAULT_COLLECTIVE_TIMEOUT_SECONDS,
    PEER_EXIT_STATUS,
    collective_timeout_seconds,
    is_lost_peer_error,
    peer_exit_status,
)


def named(name: str, base: type[BaseException] = RuntimeError) -> type[BaseException]:
    """An exception class of torch's name (torch is not imported here)."""
    return type(name, (base,), {})


def checkpoint_exception(*failures: BaseException) -> BaseException:
    """DCP's CheckpointException (a BaseException): rank -> (exception, traceback)."""
    error = named("CheckpointException", BaseException)("save failed")
    error.failures = {rank: (failure, None) for rank, failure in enumerate(failures)}  # type: ignore[attr-defined]
    return error


GLOO_CLOSED = RuntimeError(
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:40133."
)
GLOO_TIMEOUT = RuntimeError(
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation"
)


@pytest.mark.parametrize(
    "error",
    [
        GLOO_CLOSED,
        GLOO_TIMEOUT,
        named("DistBackendError")("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5)"),
        named("DistBackendError")("NCCL error: remote process exited or there was a network error"),
        named("DistNetworkError")("Connection refused"),
        named("DistStoreError")("wait timeout after 120000ms"),
        checkpoint_exception(GLOO_TIMEOUT, GLOO_CLOSED),
    ],
)
def test_a_peer_gone_is_recognised(error: BaseException) -> None:
    assert is_lost_peer_error(error)


@pytest.mark.parametrize(
    "error",
    [
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (8x4 and 3x1)"),
        named("DistBackendError")("NCCL error: invalid usage"),
        ValueError("timed out"),  # not a collective's error, whatever it says
        OSError("No space left on device"),
        checkpoint_exception(GLOO_TIMEOUT, OSError("No space left on device")),  # a rank's own failure
        checkpoint_exception(),
    ],
)
def test_a_code_or_disk_failure_is_no_lost_peer(error: BaseException) -> None:
    assert not is_lost_peer_error(error)


def test_the_collective_timeout_and_the_peer_exit_status_are_switchable() -> None:
    assert collective_timeout_seconds({}) == DEFAULT_COLLECTIVE_TIMEOUT_SECONDS == 120
    assert collective_timeout_seconds({"SPOTJOBS_KIT_COLLECTIVE_TIMEOUT_SECONDS": "7.5"}) == 7.5
    assert peer_exit_status({}) == PEER_EXIT_STATUS == 134
    assert peer_exit_status({"SPOTJOBS_KIT_PEER_EXIT_STATUS": "143"}) == 143
    for wrong in ("0", "-3", "soon", "nan"):
        with pytest.raises(KitError):
            collective_timeout_seconds({"SPOTJOBS_KIT_COLLECTIVE_TIMEOUT_SECONDS": wrong})
    for wrong in ("0", "256", "abort"):
        with pytest.raises(KitError):
            peer_exit_status({"SPOTJOBS_KIT_PEER_EXIT_STATUS": wrong})


def start(root: Path, environ: dict[str, str] | None = None) -> tuple[Run, io.StringIO]:
    out = io.StringIO()
    return Run.start(str(root), environ=environ or {}, handle_sigterm=False, stream=out), out


def preempted_lines(out: io.StringIO) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    return [line["spotjobs_kit"] for line in lines if line["spotjobs_kit"]["event"] == "preempted"]


def test_a_run_stopped_by_a_peer_says_preempted_and_exits_with_the_peer_status(tmp_path: Path) -> None:
    run, out = start(tmp_path)
    run.step = 7
    run.peer_preempted(1)
    run.peer_preempted(1)  # the next agreement: still one preemption
    assert run.preempted and not run.sigterm_received
    (line,) = preempted_lines(out)
    assert (line["step"], line["reason"], line["rank"]) == (7, "peer_sigterm", 1)
    assert parse_kit_line(out.getvalue().splitlines()[-1]) is not None
    with pytest.raises(SystemExit) as leaving:
        run.exit_preempted()
    assert leaving.value.code == 134


def test_the_process_that_got_sigterm_exits_143_and_a_peer_stop_changes_nothing(tmp_path: Path) -> None:
    out = io.StringIO()
    environ = {"SPOTJOBS_KIT_PEER_EXIT_STATUS": "135"}
    with Run.start(str(tmp_path), environ=environ, stream=out) as run:
        run.on_preemption(None, exit_code=None)
        os.kill(os.getpid(), signal.SIGTERM)
        run.peer_preempted(0)
        assert run.sigterm_received and run.exit_status == 143
        (line,) = preempted_lines(out)
        assert "reason" not in line  # the line of a single process, as before
    run, _ = start(tmp_path / "other", environ)
    run.peer_preempted(0)
    assert run.exit_status == 135
