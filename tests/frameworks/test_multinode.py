"""Multi-node PyTorch under the kit: docs/kit.md's `torch-ddp` and `torch-fsdp` snippets in two torch.distributed
processes (gloo, CPU), given the variables a prebuilt container sets (MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK) and forked from the server that imported torch once.

One job's life, each run a restart of the same script in the same checkpoint folder:
1. rank 1 alone gets SIGTERM at a random step (its VM is reclaimed, rank 0's is not): both ranks
   save that step through DCP, rank 0 commits it and says `preempted`; rank 1 exits 143, rank 0
   the peer status (134, which Vertex documents as transient);
2. rank 1 freezes in the middle of the next save (a VM gone without a word: its connections stay
   open, nothing answers): rank 0 leaves after the kit's collective timeout, not torch's 30 min,
   with the peer status, and the step it was saving stays torn (no `.metadata`), though an earlier
   committed save of that step, one of its files deleted since, had left its markers there;
3. rank 1 sees the checkpoint folder otherwise than rank 0 (its commit markers differ: a stand-in
   for a node whose view of the bucket lags, a FUSE metadata cache, say): both resume from the step
   rank 0 chose, skip the torn one, and finish.

The final weights, on both ranks, are bit-equal to those of an uninterrupted run of the same
script. What makes that hold: every step's data depends on the step and the rank only; the
optimizer (SGD without momentum) has no state besides the weights, which the checkpoint holds;
one thread per process (OMP_NUM_THREADS=1), so each CPU kernel adds in one order; and gloo's
all-reduce of two ranks adds two numbers per element, which floating point does alike in either
order (with more ranks, gloo's ring still adds in an order fixed by the ranks and the buckets,
which DDP builds alike in every run of the same model). FSDP's reduce-scatter of the gradients
adds the same two numbers per element; its shards are gathered whole for the comparison.
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from spotjobs_kit import parse_kit_line
from spotjobs_kit.layout import KIT_MARKER

from tests.support.fork_server import ForkedProcess, fork_server
from tests.support.frameworks import CHILDREN, Outcome, framework_env, free_port, kit_snippet

pytestmark = pytest.mark.timeout(600)

STEPS = 20
EVERY = 5
RANKS = 2
# Seconds: SPOTJOBS_KIT_COLLECTIVE_TIMEOUT_SECONDS for the run whose peer freezes. The other runs keep
# the kit's default (120 s): a loaded CI machine can hold one rank back for more than 5 s between two
# collectives (a failed CI run's rank 0 left run 2 before its first save, about as fast as that).
COLLECTIVE_TIMEOUT = 15
PEER_EXIT = 134  # spotjobs_kit's PEER_EXIT_STATUS: 128 + SIGABRT
# Writes each rank's final weights, as raw bytes, once training is done (FSDP's shards gathered whole).
FINAL_WEIGHTS = """
whole = [getattr(t, "full_tensor", lambda t=t: t)() for t in model.state_dict().values()]
with open(f"weights-{RANK}.bin", "wb") as weights:
    weights.write(b"".join(t.detach().numpy().tobytes() for t in whole))
"""

# What the test does at a line of rank 0's output: given the line and the processes (by rank),
# whether it acted (then the handshake file the scripts wait for is created).
Reaction = Callable[[str, list[ForkedProcess]], bool]


def prepare(folder: Path, snippet: str = "torch-ddp") -> tuple[Path, dict[str, str]]:
    folder.mkdir()
    script = folder / "torch_ddp.py"
    script.write_text((CHILDREN / "torch_ddp.py").read_text() + "\n" + kit_snippet(snippet) + FINAL_WEIGHTS)
    (folder / "common.py").write_text((CHILDREN / "common.py").read_text())
    env = {
        **framework_env(folder),
        "AIP_CHECKPOINT_DIR": str(folder / "checkpoints"),
        "KIT_TEST_STEPS": str(STEPS),
        "KIT_TEST_EVERY": str(EVERY),
        "KIT_TEST_STEPS_LOG": str(folder / "steps.log"),
        "KIT_TEST_HANDSHAKE": str(folder / "handshake"),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    return script, env


def run_ranks(
    script: Path,
    env: dict[str, str],
    react: Reaction | None = None,
    *,
    rank_env: dict[int, dict[str, str]] | None = None,
    primary_within: float = 300,
    frozen: tuple[int, ...] = (),
) -> Outcome:
    """Run the script as RANKS processes until each exits, rank 0 killed after `primary_within` seconds;
    `react` sees each line of rank 0's; the `frozen` ranks (which `react` stops) are killed once
    rank 0 has exited."""
    port = str(free_port())
    handshake = Path(env["KIT_TEST_HANDSHAKE"])
    handshake.unlink(missing_ok=True)
    processes = []
    for rank in range(RANKS):
        ranked = {
            **env,
            **(rank_env or {}).get(rank, {}),
            "RANK": str(rank),
            "WORLD_SIZE": str(RANKS),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
        }
        with (
            open(script.parent / f"stderr-{rank}.txt", "w") as stderr,
            open(script.parent / f"stdout-{rank}.txt", "w") as stdout,
        ):
            output = subprocess.PIPE if rank == 0 else stdout
            processes.append(fork_server().start(script, ranked, script.parent, output, stderr))
    primary = processes[0]
    assert primary.stdout is not None
    # A rank 0 still there at its deadline (waiting on a frozen peer) is killed: its output ends.
    deadline = threading.Timer(primary_within, primary.send_signal, (signal.SIGKILL,))
    deadline.start()
    records, steps, lines, acted = [], [], [], False
    try:
        for line in primary.stdout:
            lines.append(line)
            record = parse_kit_line(line) if "spotjobs" in line else None
            if record is not None:
                records.append(record)
            elif line.startswith("STEP "):
                steps.append(int(line.split()[1]))
            if react is not None and not acted and react(line, processes):
                handshake.touch()
                acted = True
    finally:
        deadline.cancel()
    primary.wait(timeout=60)
    for process in (processes[rank] for rank in frozen):
        process.send_signal(signal.SIGKILL)  # its VM is gone
    for process in processes[1:]:
        process.wait(timeout=60)
    stderr = "".join((script.parent / f"stderr-{rank}.txt").read_text()[-3000:] for rank in range(RANKS))
    return Outcome([p.returncode or 0 for p in processes], records, steps, lines, stderr)


def final_weights(folder: Path) -> list[bytes]:
    return [(folder / f"weights-{rank}.bin").read_bytes() for rank in range(RANKS)]


@pytest.mark.parametrize("snippet", ["torch-ddp", "torch-fsdp"])
def test_a_preempted_rank_stops_every_rank_at_one_step_and_the_resumed_weights_are_bit_equal(
    snippet: str, tmp_path: Path
) -> None:
    reference, reference_env = prepare(tmp_path / "reference", snippet)
    uninterrupted = run_ranks(reference, reference_env)
    assert uninterrupted.returncodes == [0] * RANKS, uninterrupted.stderr
    expected = final_weights(reference.parent)
    assert expected[0] == expected[1]

    script, env = prepare(tmp_path / "interrupted", snippet)
    checkpoints = Path(env["AIP_CHECKPOINT_DIR"])
    seed = random.randrange(1 << 30)
    at_step = random.Random(seed).randint(2, 2 * EVERY - 2)
    context = f"{snippet}, seed {seed}, SIGTERM on rank 1 at step {at_step}"

    # 1. One rank's VM reclaimed: every rank saves the step it reached, rank 0 commits it.
    def sigterm_rank_1(line: str, processes: list[ForkedProcess]) -> bool:
        if line.strip() != f"STEP {at_step}":
            return False
        processes[1].send_signal(signal.SIGTERM)
        return True

    first = run_ranks(script, {**env, "KIT_TEST_PAUSE_AT_STEP": str(at_step)}, sigterm_rank_1)
    where = f"{context}, run 1: {[(r.event, r.step, r.reason) for r in first.records]} {first.stderr}"
    assert first.returncodes == [PEER_EXIT, 143], where
    (preempted,) = first.events("preempted")
    assert preempted.reason == "peer_sigterm" and preempted.fields.get("rank") == 1, where
    assert first.committed == at_step == max(first.steps), where
    assert (checkpoints / f"step-{at_step:06d}" / ".metadata").exists(), where

    # 2. A peer frozen mid-save: rank 0 gives up after the collective timeout; that save stays torn,
    # even in a folder a committed save of the same step left (a file of it deleted since: saved again).
    torn = checkpoints / f"step-{(at_step // EVERY + 1) * EVERY:06d}"
    shutil.copytree(checkpoints / f"step-{at_step:06d}", torn)
    (torn / "__0_0.distcp").unlink()
    frozen_at: list[float] = []

    def freeze_rank_1(line: str, processes: list[ForkedProcess]) -> bool:
        if line.strip() != "SAVING":
            return False
        processes[1].send_signal(signal.SIGSTOP)
        frozen_at.append(time.monotonic())
        return True

    in_a_save = {
        **env,
        "KIT_TEST_PAUSE_IN_SAVE": "1",
        "SPOTJOBS_KIT_COLLECTIVE_TIMEOUT_SECONDS": str(COLLECTIVE_TIMEOUT),
    }
    second = run_ranks(script, in_a_save, freeze_rank_1, primary_within=COLLECTIVE_TIMEOUT + 120, frozen=(1,))
    where = f"{context}, run 2: {[(r.event, r.step, r.reason) for r in second.records]} {second.stderr}"
    assert frozen_at, f"rank 0 never said SAVING: {where} {second.returncodes} {second.stdout}"
    waited = time.monotonic() - frozen_at[0]
    assert second.started.resumed_step == at_step, where
    assert second.returncodes[0] == PEER_EXIT, where
    assert waited < COLLECTIVE_TIMEOUT + 60, where  # the timeout, and a loaded machine's slack
    assert [r.reason for r in second.events("preempted")] == ["peer_lost"], where
    assert not second.events("checkpoint_committed") and not second.events("run_failed"), where
    assert torn.is_dir() and not (torn / ".metadata").exists() and not (torn / KIT_MARKER).exists(), where

    # 3. A rank that sees the folder otherwise resumes from rank 0's choice; the torn step is skipped.
    blind = {1: {"SPOTJOBS_COMMIT_MARKERS": "no-such-marker"}}
    last = run_ranks(script, env, rank_env=blind)
    where = f"{context}, run 3: {[(r.event, r.step, r.reason) for r in last.records]} {last.stderr}"
    assert last.returncodes == [0] * RANKS, where
    assert last.started.resumed_step == at_step, where
    assert [r.checkpoint for r in last.events("checkpoint_torn")] == [f"{torn.name}/"], where
    assert [r.step for r in last.events("run_finished")] == [STEPS], where
    for rank in range(RANKS):  # every rank computed the same steps, from where rank 0 resumed
        computed = [int(s) for s in (script.parent / f"steps.log{rank}").read_text().split()]
        assert computed[-(STEPS - at_step) :] == list(range(at_step + 1, STEPS + 1)), (where, rank)
    assert final_weights(script.parent) == expected, where


def another_view(checkpoints: Path) -> Path:
    """Another view of the checkpoint folder (a stand-in for a node whose view of the bucket
    differs): links to everything in it, and room for what only this view holds."""
    view = checkpoints.parent / "another-view"
    view.mkdir()
    for entry in checkpoints.iterdir():
        (view / entry.name).symlink_to(entry)
    return view


def a_view_with_an_earlier_save_renamed(checkpoints: Path, first_step: int) -> Path:
    """Another view holding `step-STEPS/`: the kit's first save (its marker and all, complete)
    under the last step's name. A process resuming from it would train from that first step."""
    view = another_view(checkpoints)
    shutil.copytree(checkpoints / f"step-{first_step:06d}", view / f"step-{STEPS:06d}")
    return view


def a_view_with_a_later_checkpoint(checkpoints: Path, at_step: int) -> Path:
    """Another view holding `checkpoint-STEPS/`: the Trainer's save at `at_step` dated to the last
    step, without the kit's marker (complete by the Trainer's own rule). A process resuming from it
    would find nothing left to train."""
    view = another_view(checkpoints)
    planted = view / f"checkpoint-{STEPS}"
    shutil.copytree(checkpoints / f"checkpoint-{at_step}", planted)
    (planted / "COMMITTED").unlink()
    state = json.loads((planted / "trainer_state.json").read_text())
    (planted / "trainer_state.json").write_text(json.dumps({**state, "global_step": STEPS}))
    return view


# Each framework's multi-process snippet, the script it is appended to, and how often it saves.
FRAMEWORK_SNIPPETS = {
    "hf-accelerate": ("hf_accelerate.py", 10),
    "hf-trainer": ("hf_trainer.py", 10),
    "lightning-ddp": ("lightning_ddp.py", 5),
}


@pytest.mark.parametrize("snippet", FRAMEWORK_SNIPPETS)
def test_a_framework_across_two_processes_stops_every_rank_at_one_step_and_resumes_from_rank_0s_choice(
    snippet: str, tmp_path: Path
) -> None:
    """docs/kit.md's Hugging Face or Lightning snippet, unchanged, in two processes (Accelerate,
    the Trainer through it, or Lightning's DDP starts the gloo group from the same variables):
    rank 1 alone SIGTERMed, then a restart in which rank 1 sees the folder otherwise (its commit
    markers differ, and its view holds a later complete checkpoint that rank 0's does not); both
    ranks compute the same steps from rank 0's resume point."""
    folder = tmp_path / "framework"
    _, env = prepare(folder)
    name, every = FRAMEWORK_SNIPPETS[snippet]
    script = folder / name
    script.write_text((CHILDREN / name).read_text() + "\n" + kit_snippet(snippet))
    env = {**env, "KIT_TEST_EVERY": str(every)}
    # Lightning's later checkpoint in rank 1's view is its first save (step 5) renamed: after it.
    at_step = random.Random().randint(every + 1 if snippet == "lightning-ddp" else 2, 18)

    def sigterm_rank_1(line: str, processes: list[ForkedProcess]) -> bool:
        if line.strip() != f"STEP {at_step}":
            return False
        processes[1].send_signal(signal.SIGTERM)
        return True

    first = run_ranks(script, {**env, "KIT_TEST_PAUSE_AT_STEP": str(at_step)}, sigterm_rank_1)
    where = (
        f"SIGTERM on rank 1 at step {at_step}: {[(r.event, r.step, r.reason) for r in first.records]} {first.stderr}"
    )
    assert first.returncodes == [PEER_EXIT, 143], where
    assert [r.reason for r in first.events("preempted")] == ["peer_sigterm"], where
    assert first.committed == at_step == max(first.steps), where

    other_view = {"SPOTJOBS_COMMIT_MARKERS": "no-such-marker"}
    if snippet == "hf-trainer":
        other_view["AIP_CHECKPOINT_DIR"] = str(a_view_with_a_later_checkpoint(Path(env["AIP_CHECKPOINT_DIR"]), at_step))
    if snippet == "lightning-ddp":
        other_view["AIP_CHECKPOINT_DIR"] = str(
            a_view_with_an_earlier_save_renamed(Path(env["AIP_CHECKPOINT_DIR"]), every)
        )
    last = run_ranks(script, env, rank_env={1: other_view})
    where = f"the restart: {[(r.event, r.step, r.reason) for r in last.records]} {last.stderr}"
    assert last.returncodes == [0] * RANKS and last.started.resumed_step == at_step, where
    assert [r.step for r in last.events("run_finished")] == [STEPS], where
    for rank in range(RANKS):
        computed = [int(s) for s in (folder / f"steps.log{rank}").read_text().split()]
        assert computed == list(range(1, at_step + 1)) + list(range(at_step + 1, STEPS + 1)), (where, rank)
