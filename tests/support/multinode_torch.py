"""A two-replica torch.distributed request for the embedded stack: the kit's multi-node script
(tests/frameworks/children/torch_ddp.py with docs/kit.md's `torch-ddp` snippet, or the Lightning
DDP or Accelerate one in theirs) in worker pools 0 and 1, gloo on the CPU, one process per replica
or several under torchrun (`processes`).

Each replica's command is `fork_client.py`: the script runs in a child of the test's fork server,
which has torch imported (tests/support/fork_server.py), so a replica's start costs a fork, not two
to three seconds of imports. The replica is still a process of its own for the Vertex emulator:
its signals, its exit status, its output.

The script is a custom container's (`containerSpec`): Vertex documents only CLUSTER_SPEC for those
("you must parse CLUSTER_SPEC", https://cloud.google.com/vertex-ai/docs/training/distributed-training),
so it derives torch's variables from it first: the primary's address as the rendezvous, RANK 0 for
the primary and 1 + index for pool 1's replicas.

Under torchrun (`processes` > 1) the replica's command is torchrun itself (TORCHRUN_REPLICA, in the
fork server's child too), its node rank and rendezvous taken from CLUSTER_SPEC the same way; it
starts each worker process with `--no-python` as `fork_client.py SOCKET SCRIPT`, so the workers
skip torch's import as well, and sets RANK (node rank x processes + local rank), WORLD_SIZE and the
rest itself. torchrun's agent forwards a SIGTERM to its workers (30 s before SIGKILL) and exits 1
whenever a worker did not exit 0, so the replica's status is 1, not the kit's 134 or 143
(docs/kit.md, "Exit statuses").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spotjobs_kit.lines import KitRecord, parse_kit_line

from devstack.samples import custom_job
from tests.support.fork_server import IMPORT_TIME_ENV, fork_server
from tests.support.frameworks import CHILDREN, framework_python, kit_snippet

PRIMARY = "workerpool0-0"
WORKER = "workerpool1-0"

CLUSTER_SPEC_TO_TORCH = """\
# CLUSTER_SPEC -> MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (a custom container's own job), unless
# torchrun started this process (it set them).
import json as _json
import os as _os

if "LOCAL_RANK" not in _os.environ:
    _spec = _json.loads(_os.environ["CLUSTER_SPEC"])
    _ranked = _spec["cluster"]["workerpool0"] + _spec["cluster"].get("workerpool1", [])
    _os.environ["MASTER_ADDR"], _os.environ["MASTER_PORT"] = _ranked[0].rsplit(":", 1)
    _os.environ["WORLD_SIZE"] = str(len(_ranked))
    _os.environ["RANK"] = str(_spec["task"]["index"] + (1 if _spec["task"]["type"] == "workerpool1" else 0))

# KIT_TEST_SAVE_SECONDS: each DCP file write into the checkpoint folder KIT_TEST_SLOW_SAVE names
# takes that long more (after its SAVING line), so a replica reclaimed on that line dies in the
# middle of the save, however fast the machine; the other saves keep their pace.
if _os.environ.get("KIT_TEST_SAVE_SECONDS"):
    import time as _time

    import torch.distributed.checkpoint.filesystem as _dcp_files

    _write_data = _dcp_files.FileSystemWriter.write_data

    def _slow_write_data(self, *args, **kwargs):
        if _os.path.basename(_os.fspath(self.path).rstrip("/")) == _os.environ["KIT_TEST_SLOW_SAVE"]:
            _time.sleep(float(_os.environ["KIT_TEST_SAVE_SECONDS"]))
        return _write_data(self, *args, **kwargs)

    _dcp_files.FileSystemWriter.write_data = _slow_write_data
"""

# A replica's torchrun: `python torchrun_replica.py PROCESSES COMMAND...`, each of its PROCESSES
# worker processes running COMMAND (`--no-python`); nodes, node rank and rendezvous from
# CLUSTER_SPEC (torchrun's static rendezvous: the primary's agent holds the store at its address).
TORCHRUN_REPLICA = """\
import json
import os
import sys

from torch.distributed.run import main

spec = json.loads(os.environ["CLUSTER_SPEC"])
nodes = spec["cluster"]["workerpool0"] + spec["cluster"].get("workerpool1", [])
address, port = nodes[0].rsplit(":", 1)
node_rank = spec["task"]["index"] + (1 if spec["task"]["type"] == "workerpool1" else 0)
processes, command = sys.argv[1], sys.argv[2:]
main([
    f"--nnodes={len(nodes)}",
    f"--nproc-per-node={processes}",
    f"--node-rank={node_rank}",
    f"--master-addr={address}",
    f"--master-port={port}",
    "--no-python",
    *command,
])
"""

# Once training is done: each rank's final weights, as raw bytes.
FINAL_WEIGHTS = """
with open(f"{os.environ['KIT_TEST_WEIGHTS']}-{os.environ['RANK']}.bin", "wb") as weights:
    weights.write(b"".join(t.detach().numpy().tobytes() for t in model.state_dict().values()))
"""
# The multi-node snippets of docs/kit.md, and the script each is appended to.
SCRIPTS = {"torch-ddp": "torch_ddp.py", "lightning-ddp": "lightning_ddp.py", "hf-accelerate": "hf_accelerate.py"}


def write_script(folder: Path, snippet: str = "torch-ddp") -> Path:
    """The script every process runs (`snippet` appended to its script), the module it imports
    and the torchrun launcher, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "torchrun_replica.py").write_text(TORCHRUN_REPLICA)
    script = folder / SCRIPTS[snippet]
    script.write_text(
        CLUSTER_SPEC_TO_TORCH + (CHILDREN / script.name).read_text() + "\n" + kit_snippet(snippet) + FINAL_WEIGHTS
    )
    (folder / "common.py").write_text((CHILDREN / "common.py").read_text())
    return script


def two_replica_request(
    request_id: str,
    folder: Path,
    env: Mapping[str, str],
    *,
    worker_env: Mapping[str, str] | None = None,
    scheduling: Mapping[str, Any] | None = None,
    processes: int = 1,
    snippet: str = "torch-ddp",
) -> bytes:
    """The envelope a user would publish: pool 0 (the primary) and pool 1 (one replica) run the
    script with `env` (pool 1 with `worker_env` on top), in `processes` processes each (more than
    one: under torchrun); `scheduling` as given (none: the API's default, no
    `restartJobOnWorkerRestart`); the script is docs/kit.md's `snippet` in its framework's."""
    script = write_script(folder, snippet)
    forked = [framework_python(), str(CHILDREN / "fork_client.py"), fork_server().socket_path]
    command = [*forked, str(script)]
    if processes > 1:
        command = [*forked, str(folder / "torchrun_replica.py"), str(processes), *command]
    job = custom_job(request_id, command, scheduling=scheduling)
    common_env = {
        **env,
        "KIT_TEST_STEPS_LOG": str(folder / "steps.log"),
        "KIT_TEST_WEIGHTS": str(folder / "weights"),
        **IMPORT_TIME_ENV,  # the values the fork server imported torch with
    }
    [primary] = job["jobSpec"]["workerPoolSpecs"]
    worker = json.loads(json.dumps(primary))
    primary["containerSpec"]["env"] = _env_list(common_env)
    worker["containerSpec"]["env"] = _env_list({**common_env, **(worker_env or {})})
    job["jobSpec"]["workerPoolSpecs"].append(worker)
    return json.dumps({"request_id": request_id, "custom_job": job}).encode()


def _env_list(env: Mapping[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in env.items()]


def final_weights(folder: Path, rank: int = 0) -> bytes:
    return (folder / f"weights-{rank}.bin").read_bytes()


def primary_runs(emulated: Mapping[str, Any]) -> list[list[KitRecord]]:
    """The kit's lines of each of the primary's runs (only the primary prints them), in order."""
    runs: dict[int, list[KitRecord]] = {}
    for item in emulated["output"]:
        if item["replica"] != PRIMARY or item["stream"] != "stdout":
            continue
        record = parse_kit_line(item["line"])
        if record is not None:
            runs.setdefault(int(item["run"]), []).append(record)
    return [runs[number] for number in sorted(runs)]
