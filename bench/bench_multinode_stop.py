"""The time from SIGTERM on one node to the committed checkpoint, for the two-process torch script,
against the 30 s a Spot VM gets between its SIGTERM and its stop.

The script is the multi-node test's (tests/frameworks/children/torch_ddp.py with docs/kit.md's
`torch-ddp` snippet: DistributedDataParallel, gloo, CPU, the kit's DistributedCheckpoints saving
synchronously through DCP), with a model of `--megabytes` of float32 weights instead of the test's
tiny one. Two processes (RANK 0 and 1, MASTER_ADDR on loopback, as a prebuilt container sets
them) train; at step `--at-step` rank 1 alone gets SIGTERM (its VM reclaimed). Measured from the
signal: until rank 0 prints `checkpoint_committed` for that step (every rank agreed on it, saved
its part, and rank 0 wrote the marker), and until both processes have exited, with their exit
statuses (134 and 143: a process killed by gloo's teardown would show -6). Each repeat starts
from an empty checkpoint folder. Needs `.venv-frameworks` (`make .venv-frameworks`).

    python -m bench.bench_multinode_stop [--megabytes 200] [--at-step 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.report import Figure, emit

REPO = Path(__file__).resolve().parents[1]
CHILDREN = REPO / "tests" / "frameworks" / "children"
FRAMEWORK_PYTHON = REPO / ".venv-frameworks" / "bin" / "python"
SPOT_NOTICE_SECONDS = 30.0
STEPS = 1000  # never reached: the SIGTERM stops the run
# Rank 0 stopped by its peer (spotjobs_kit.distributed.PEER_EXIT_STATUS), rank 1 by its SIGTERM.
EXPECTED_STATUSES = [134, 143]
# Replaces the child's tiny model: Linear(4, width) then Linear(width, 1), `width` from the size.
MODEL = """
def build_model():
    torch.manual_seed(0)
    width = max(1, int(float(os.environ["BENCH_MEGABYTES"]) * 2**20 / 4 / 6))
    return torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.Linear(width, 1))
"""


def kit_snippet(name: str) -> str:
    """The code block under `<!-- snippet: NAME -->` in docs/kit.md (as the tests take it)."""
    page = (REPO / "docs" / "kit.md").read_text()
    found = re.search(rf"<!-- snippet: {re.escape(name)} -->\n```python\n(.*?)```\n", page, re.S)
    if found is None:
        raise SystemExit(f"docs/kit.md has no snippet {name!r}")
    return found.group(1)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def one_stop(folder: Path, megabytes: float, at_step: int) -> tuple[float, float, float, list[int]]:
    """(SIGTERM to commit, the kit's own save seconds, SIGTERM to both exited, exit statuses)."""
    script = folder / "torch_ddp.py"
    script.write_text((CHILDREN / "torch_ddp.py").read_text() + MODEL + kit_snippet("torch-ddp"))
    (folder / "common.py").write_text((CHILDREN / "common.py").read_text())
    handshake = folder / "handshake"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "PYTHONPATH": str(REPO / "kit" / "src"),
        "AIP_CHECKPOINT_DIR": str(folder / "checkpoints"),
        "KIT_TEST_STEPS": str(STEPS),
        "KIT_TEST_EVERY": str(STEPS),  # no periodic save: the emergency one alone
        "KIT_TEST_STEPS_LOG": str(folder / "steps.log"),
        "KIT_TEST_HANDSHAKE": str(handshake),
        "KIT_TEST_PAUSE_AT_STEP": str(at_step),
        "OMP_NUM_THREADS": "1",
        "BENCH_MEGABYTES": str(megabytes),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
    }
    processes = []
    for rank in (0, 1):
        with open(folder / f"stderr-{rank}.txt", "w") as stderr:
            processes.append(
                subprocess.Popen(
                    [str(FRAMEWORK_PYTHON), str(script)],
                    env={**env, "RANK": str(rank)},
                    cwd=folder,
                    stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                    stderr=stderr,
                    text=True,
                )
            )
    primary = processes[0]
    assert primary.stdout is not None
    signalled = committed = None
    saved = float("nan")
    for line in primary.stdout:
        if signalled is None and line.strip() == f"STEP {at_step}":
            signalled = time.monotonic()
            processes[1].send_signal(signal.SIGTERM)
            handshake.touch()
        elif signalled is not None and committed is None and '"event":"checkpoint_committed"' in line:
            committed = time.monotonic()
            found = re.search(r'"seconds":([0-9.]+)', line)
            saved = float(found.group(1)) if found else saved
    statuses = [process.wait(timeout=600) for process in processes]
    exited = time.monotonic()
    if signalled is None or committed is None:
        tail = (folder / "stderr-0.txt").read_text()[-2000:]
        raise SystemExit(f"no committed checkpoint after the SIGTERM (exit statuses {statuses}): {tail}")
    return committed - signalled, saved, exited - signalled, statuses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=float, default=200.0, help="the model's float32 weights")
    parser.add_argument("--at-step", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if not FRAMEWORK_PYTHON.exists():
        raise SystemExit(f"{FRAMEWORK_PYTHON.relative_to(REPO)} is missing: `make .venv-frameworks`")
    to_commit, saves, to_exit, unexpected = [], [], [], 0
    for number in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-multinode-") as folder:
            commit, save, exit_, statuses = one_stop(Path(folder), args.megabytes, args.at_step)
        print(
            f"run {number + 1}: SIGTERM to commit {commit:.2f} s (save {save:.2f} s), "
            f"to both exited {exit_:.2f} s, exit statuses {statuses}",
            flush=True,
        )
        unexpected += statuses != EXPECTED_STATUSES
        to_commit.append(commit)
        saves.append(save)
        to_exit.append(exit_)
    worst = max(to_commit)
    emit(
        "multinode_stop",
        [
            Figure(
                f"SIGTERM on rank 1 to committed checkpoint, {args.megabytes:g} MB, median",
                statistics.median(to_commit),
                "s",
            ),
            Figure(
                "the same, worst of the runs", worst, "s", f"<= {SPOT_NOTICE_SECONDS:g}", worst <= SPOT_NOTICE_SECONDS
            ),
            Figure("of which the DCP save (kit's seconds), median", statistics.median(saves), "s"),
            Figure("SIGTERM to both processes exited, median", statistics.median(to_exit), "s"),
            Figure(f"runs not exiting {EXPECTED_STATUSES}", unexpected, "", "= 0", unexpected == 0),
        ],
    )
    return 0 if worst <= SPOT_NOTICE_SECONDS and not unexpected else 1


if __name__ == "__main__":
    sys.exit(main())
