"""The two-node scenario's worker replica (worker pool 1): a stand-in that trains nothing.

The demo trainer is plain Python in one process, and the kit's multi-node coordination (one stop
step, rank 0's resume point) runs over torch.distributed, which the demo does not install. So the
second node only holds its place in the job as a VM would: it says who it is (the rank and
cluster the emulator gave it), waits, and leaves on SIGTERM like a process reclaimed with its VM.
Its VM is still billed, and its reclaim still restarts the whole job (the request sets
`restartJobOnWorkerRestart`), so the primary saves on its own SIGTERM and resumes from there.
The report labels this replica a stand-in.

    python -m devstack.demo.worker
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


def emit(event: str, message: str, **fields: object) -> None:
    line = {"severity": "INFO", "message": message, "event": event, **fields}
    sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main() -> int:
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stopped.set())
    task = json.loads(os.environ.get("CLUSTER_SPEC") or "{}").get("task", {})
    emit(
        "ready",
        "stand-in worker ready (trains nothing)",
        task=task,
        rank=os.environ.get("RANK"),
        world_size=os.environ.get("WORLD_SIZE"),
        master=f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}",
    )
    while not stopped.wait(timeout=1.0):
        pass
    emit("stopping", "SIGTERM received; the stand-in worker leaves")
    return SIGTERM_EXIT_STATUS


if __name__ == "__main__":
    sys.exit(main())
