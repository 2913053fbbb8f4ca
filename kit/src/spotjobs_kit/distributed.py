"""The kit across the processes of a torch.distributed job (several replicas, each with one or more
processes). Standard library only: torch is used only once the training code has imported it and
started a process group of two or more processes; before that every function here is the
single-process behaviour.

What multi-node Spot needs (docs/kit.md, "Multi-node"):
- one stop step: a Spot VM gets SIGTERM while the others train on; every process all-reduces the
  flag at each step (`agree_on_stop`), so all save the same step, and the primary says
  `preempted` whichever process got the signal;
- one resume point: each process lists the checkpoint folder itself, and two views can differ
  (a node's FUSE metadata cache, a save committed between two listings): the process of rank 0
  decides, the others follow (`rank0_choice`);
- a short wait for a lost peer: torch waits 10 min (NCCL) or 30 min (gloo) in a collective whose
  peer is gone; the kit sets COLLECTIVE_TIMEOUT_ENV's seconds (`set_collective_timeout`), and a
  process whose collective fails that way (`is_lost_peer_error`) leaves with the peer exit status.

Exit statuses: a process that got SIGTERM itself exits 143, as a single process does. A process
that stops because a peer did (an agreed stop, or a lost peer) exits PEER_EXIT_STATUS, 134 by
default: Vertex's training-service page lists SIGABRT ("6, or 134 in custom containers") as
potentially transient, the job restarted, where an unknown non-zero status is a user code error
that fails the job (https://cloud.google.com/vertex-ai/docs/training/understanding-training-service).
It is also what a survivor killed by NCCL's watchdog exits with. How Vertex treats 143 on a
replica is not documented. PEER_EXIT_STATUS_ENV overrides it.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spotjobs_kit.storage import KitError

if TYPE_CHECKING:
    from spotjobs_kit.run import Run

COLLECTIVE_TIMEOUT_ENV = "SPOTJOBS_KIT_COLLECTIVE_TIMEOUT_SECONDS"
# Long enough for a step's imbalance between ranks and a synchronous save's slowest writer, short
# next to torch's defaults: survivors of a reclaimed VM bill their GPUs while they wait.
DEFAULT_COLLECTIVE_TIMEOUT_SECONDS = 120.0
PEER_EXIT_STATUS_ENV = "SPOTJOBS_KIT_PEER_EXIT_STATUS"
PEER_EXIT_STATUS = 128 + int(signal.SIGABRT)
# Reasons of a `preempted` line printed by a primary that did not get SIGTERM itself.
PEER_SIGTERM = "peer_sigterm"  # another process got it: every process saved the agreed step
PEER_LOST = "peer_lost"  # a collective failed: a peer is gone (its VM reclaimed without a word, say)

# torch.distributed's errors for a network or store failure, whatever their text.
_NETWORK_ERRORS = frozenset({"DistNetworkError", "DistStoreError"})
# What gloo (a RuntimeError) and NCCL (DistBackendError) say when a peer died or stopped
# answering (torch 2.13): a crash closes its connections, a VM gone leaves them open until the
# timeout. Other backend errors (a shape mismatch, an invalid argument) are the code's.
_LOST_PEER_TEXT = re.compile(
    r"closed by peer|reset by peer|broken pipe|timed out|timeout|remote process exited|network error"
    r"|communicator was aborted",
    re.IGNORECASE,
)


def process_group() -> Any | None:
    """torch.distributed, when the training code started a process group of two or more
    processes; else None (torch not imported, no group, or one process)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return None
    return dist


def collective_timeout_seconds(environ: Mapping[str, str]) -> float:
    """COLLECTIVE_TIMEOUT_ENV's seconds, else the default."""
    raw = (environ.get(COLLECTIVE_TIMEOUT_ENV) or "").strip()
    if not raw:
        return DEFAULT_COLLECTIVE_TIMEOUT_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds > 0:
        raise KitError(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r}: a number of seconds above 0")
    return seconds


def peer_exit_status(environ: Mapping[str, str]) -> int:
    """PEER_EXIT_STATUS_ENV's status, else PEER_EXIT_STATUS."""
    raw = (environ.get(PEER_EXIT_STATUS_ENV) or "").strip()
    if not raw:
        return PEER_EXIT_STATUS
    if not raw.isdigit() or not 1 <= int(raw) <= 255:
        raise KitError(f"{PEER_EXIT_STATUS_ENV}={raw!r}: an exit status from 1 to 255")
    return int(raw)


def is_lost_peer_error(error: BaseException) -> bool:
    """Whether a collective failed because a peer is gone (dead or not answering), not because
    of the code: torch.distributed's network and store errors, a backend error or gloo's
    RuntimeError saying so, and DCP's CheckpointException when every rank's failure is one."""
    names = {kind.__name__ for kind in type(error).__mro__}
    if "CheckpointException" in names:
        failures = getattr(error, "failures", None)
        if not isinstance(failures, Mapping) or not failures:
            return False
        return all(
            isinstance(failure, BaseException) and is_lost_peer_error(failure)
            for wrapped in failures.values()
            for failure in [wrapped[0] if isinstance(wrapped, tuple) else wrapped]
        )
    if names & _NETWORK_ERRORS:
        return True
    if "DistBackendError" in names or type(error) is RuntimeError:
        return _LOST_PEER_TEXT.search(str(error)) is not None
    return False


def agree_on_stop(run: Run) -> bool:
    """Whether any process got SIGTERM (`run.preempted` on any of them): all-reduced when a
    process group is up, so every process saves the same step (a collective save on some
    processes only would hang). A process that learns it from a peer is marked preempted by that
    peer (`Run.peer_preempted`: the primary prints `preempted`). Uses the group's device."""
    dist = process_group()
    if dist is None:
        return run.preempted
    torch = sys.modules["torch"]
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    flag = torch.tensor([dist.get_rank() + 1 if run.preempted else 0], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    stopped_by = int(flag.item()) - 1
    if stopped_by < 0:
        return False
    if not run.preempted:
        run.peer_preempted(stopped_by)
    return True


def rank0_choice(value: Any) -> Any:
    """Rank 0's `value` on every process (a broadcast of a small picklable object), so that a
    decision every process makes from its own view of the checkpoint folder is one decision."""
    dist = process_group()
    if dist is None:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]
