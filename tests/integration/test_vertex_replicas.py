"""The Vertex emulator runs every replica of every worker pool: through its REST surface, with tiny
plain-Python replicas that record what they got and did, and follow a per-replica playbook.

Each test waits for what the design guarantees (a replica's start, a line, an exit), never for a
duration: a loaded machine only makes it slower.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from google.cloud import aiplatform_v1
from spotjobs_kit.lines import CHECKPOINT_COMMITTED, TAG, format_line

from devstack.vertex.emulator import VertexEmulator
from tests.support.vertex_emulator import (
    PROJECT,
    TERMINAL,
    EventsTopic,
    State,
    client_for,
    control,
    create,
    details,
    job_id,
    wait_for,
    wait_for_state,
)

PRIMARY = "workerpool0-0"
# A replica: names itself from CLUSTER_SPEC's task, appends one JSON line per event to
# REPLICA_RECORD (start, sigterm, exit, or a playbook's note), writes its environment to
# REPLICA_ENV_DIR/<name>-<start>.json, then runs its playbook's steps for this start ("1", "2",
# ..., or "*"): print a line, note an event, wait until a replica has noted an event n times, exit
# with a code, or print a line again and again. Then it sleeps until stopped; SIGTERM is noted
# and exits 143.
REPLICA_SOURCE = r"""
import json, os, signal, sys, time

spec = json.loads(os.environ["CLUSTER_SPEC"])
NAME = "%s-%d" % (spec["task"]["type"], spec["task"]["index"])
RECORD = os.environ["REPLICA_RECORD"]

def events():
    try:
        with open(RECORD) as handle:
            return [json.loads(line) for line in handle.read().splitlines() if line]
    except FileNotFoundError:
        return []

def count(replica, event):
    return sum(1 for item in events() if item["replica"] == replica and item["event"] == event)

def note(event):
    fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (json.dumps({"event": event, "replica": NAME, "pid": os.getpid()}) + "\n").encode())
    os.close(fd)

def on_sigterm(signum, frame):
    note("sigterm")
    sys.exit(143)

signal.signal(signal.SIGTERM, on_sigterm)
start = count(NAME, "start") + 1
note("start")
if os.environ.get("REPLICA_ENV_DIR"):
    with open(os.path.join(os.environ["REPLICA_ENV_DIR"], "%s-%d.json" % (NAME, start)), "w") as out:
        json.dump(dict(os.environ), out)
book = json.loads(os.environ.get("REPLICA_PLAYBOOK", "{}")).get(NAME, {})
for step in book.get(str(start), book.get("*", [])):
    if step[0] == "print":
        print(step[1], flush=True)
    elif step[0] == "note":
        note(step[1])
    elif step[0] == "wait":
        while count(step[1], step[2]) < step[3]:
            time.sleep(0.02)
    elif step[0] == "exit":
        note("exit")
        sys.exit(step[1])
    elif step[0] == "repeat":
        while True:
            print(step[1], flush=True)
            time.sleep(0.05)
while True:
    time.sleep(0.05)
"""


class Replicas:
    """The replicas' shared script, record and environment dumps for one test."""

    def __init__(self, directory: Path) -> None:
        self.script = directory / "replica.py"
        self.script.write_text(REPLICA_SOURCE)
        self.record = directory / "record.jsonl"
        self.env_dir = directory / "env"
        self.env_dir.mkdir()

    def events(self) -> list[tuple[str, str]]:
        """(replica, event) in the order they happened."""
        if not self.record.exists():
            return []
        return [(item["replica"], item["event"]) for item in map(json.loads, self.record.read_text().splitlines())]

    def of(self, replica: str) -> list[str]:
        return [event for name, event in self.events() if name == replica]

    def wait_for_starts(self, replica: str, starts: int) -> None:
        wait_for(lambda: self.of(replica).count("start") == starts, what=f"{replica}'s start {starts}")

    def env(self, replica: str, start: int = 1) -> dict[str, str]:
        return dict(json.loads((self.env_dir / f"{replica}-{start}.json").read_text()))

    def job(
        self,
        replica_counts: list[int],
        playbook: dict[str, Any],
        *,
        labels: dict[str, str] | None = None,
        scheduling: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A SPOT CustomJob whose pool P holds replica_counts[P] replicas of the script."""
        env = {
            "REPLICA_RECORD": str(self.record),
            "REPLICA_ENV_DIR": str(self.env_dir),
            "REPLICA_PLAYBOOK": json.dumps(playbook),
        }
        pools = [
            {
                "machineSpec": {"machineType": "a2-highgpu-1g"},
                "replicaCount": count,
                "containerSpec": {
                    "imageUri": "us-docker.pkg.dev/spotjobs/trainer:latest",
                    # -S: the replica installs its SIGTERM handler before any line a plan waits for.
                    "command": [sys.executable, "-S", str(self.script)],
                    "env": [{"name": name, "value": value} for name, value in env.items()],
                },
            }
            if count
            else {}
            for count in replica_counts
        ]
        return {
            "displayName": "replicas-test",
            "labels": labels or {},
            "jobSpec": {"workerPoolSpecs": pools, "scheduling": {"strategy": "SPOT", **(scheduling or {})}},
        }


@pytest.fixture
def replicas(tmp_path: Path) -> Replicas:
    return Replicas(tmp_path)


# Each test polls its job until it ends, however long a loaded machine takes: no request quota.
NO_QUOTA = {"quota_crud_per_minute": 0}


@pytest.fixture
def emulator(make_emulator: Callable[..., VertexEmulator]) -> VertexEmulator:
    return make_emulator(**NO_QUOTA)


def run_to_end(emulator: VertexEmulator, body: dict[str, Any]) -> tuple[aiplatform_v1.CustomJob, dict[str, Any]]:
    client = client_for(emulator)
    job = create(client, body)
    done = wait_for_state(client, job.name, TERMINAL, timeout=60)
    return done, details(emulator, done.name)


def exit_when(replica: str, event: str, times: int) -> list[list[Any]]:
    return [["wait", replica, event, times], ["exit", 0]]


# ---- what each replica gets ----


def test_two_worker_pools_of_two_replicas_each_get_their_own_specs_and_the_job_ends_with_the_primary(
    emulator: VertexEmulator, replicas: Replicas
) -> None:
    names = [PRIMARY, "workerpool1-0", "workerpool1-1", "workerpool2-0", "workerpool2-1"]
    # The primary exits 0 once every other replica has started: the job succeeds then, and the
    # others, still running, are stopped.
    primary_book = [*(["wait", name, "start", 1] for name in names[1:]), ["exit", 0]]

    done, seen = run_to_end(emulator, replicas.job([1, 2, 2], {PRIMARY: {"1": primary_book}}))

    assert done.state == State.JOB_STATE_SUCCEEDED
    specs = {name: json.loads(replicas.env(name)["CLUSTER_SPEC"]) for name in names}
    for name, spec in specs.items():
        pool, index = name.removeprefix("workerpool").split("-")
        assert spec["task"] == {"type": f"workerpool{pool}", "index": int(index)}
        assert spec["cluster"] == specs[PRIMARY]["cluster"]
        assert spec["environment"] == "cloud"
    cluster = specs[PRIMARY]["cluster"]
    assert {pool: len(addresses) for pool, addresses in cluster.items()} == {
        "workerpool0": 1,
        "workerpool1": 2,
        "workerpool2": 2,
    }
    addresses = [address for pool in cluster.values() for address in pool]
    assert all(address.startswith("127.0.0.1:") for address in addresses)
    assert len(set(addresses)) == 5  # one loopback port per replica
    tf_tasks = {name: json.loads(replicas.env(name)["TF_CONFIG"])["task"] for name in names}
    assert tf_tasks == {
        PRIMARY: {"type": "chief", "index": 0},
        "workerpool1-0": {"type": "worker", "index": 0},
        "workerpool1-1": {"type": "worker", "index": 1},
        "workerpool2-0": {"type": "ps", "index": 0},
        "workerpool2-1": {"type": "ps", "index": 1},
    }
    assert json.loads(replicas.env(PRIMARY)["TF_CONFIG"])["cluster"] == {
        "chief": cluster["workerpool0"],
        "worker": cluster["workerpool1"],
        "ps": cluster["workerpool2"],
    }
    # A containerSpec job gets no PyTorch variables (Vertex: "parse CLUSTER_SPEC").
    assert not {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"} & set(replicas.env("workerpool1-0"))
    # Success when the primary exited 0; every other replica was then stopped.
    assert replicas.of(PRIMARY) == ["start", "exit"]
    for name in names[1:]:
        assert replicas.of(name) == ["start", "sigterm"], replicas.events()
        assert seen["replicas"][name]["signals"] == [{"run": 1, "signal": "SIGTERM"}]
    assert seen["exit_statuses"] == [0] and seen["signals"] == []  # the primary's, as before
    assert sorted(seen["replicas"]) == sorted(names)


# The primary is a rendezvous: it listens on MASTER_ADDR:MASTER_PORT, collects every other rank
# over loopback, and exits 0; each worker connects and sends its RANK.
RENDEZVOUS_TASK = r"""
import json, os, socket, time

out = os.environ["RENDEZVOUS_OUT"]
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
spec = json.loads(os.environ["CLUSTER_SPEC"])
name = "%s-%d" % (spec["task"]["type"], spec["task"]["index"])
with open(os.path.join(out, name + ".json"), "w") as handle:
    json.dump({key: os.environ[key] for key in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "CLUSTER_SPEC")}, handle)
if rank == 0:
    server = socket.create_server(address)
    ranks = []
    while len(ranks) < world - 1:
        connection, _ = server.accept()
        ranks.append(int(connection.recv(16).decode()))
        connection.close()
    with open(os.path.join(out, "ranks.json"), "w") as handle:
        json.dump(sorted(ranks), handle)
else:
    while True:
        try:
            with socket.create_connection(address, timeout=5) as connection:
                connection.sendall(str(rank).encode())
            break
        except OSError:
            time.sleep(0.05)
    time.sleep(60)
"""


def test_a_python_package_job_gets_master_world_size_and_rank_and_its_replicas_meet_on_loopback(
    emulator: VertexEmulator, tmp_path: Path
) -> None:
    (tmp_path / "rendezvous_task.py").write_text(RENDEZVOUS_TASK)
    package = {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest",
        "packageUris": ["gs://bucket/trainer.tar.gz"],
        "pythonModule": "rendezvous_task",
        "env": [
            {"name": "PYTHONPATH", "value": str(tmp_path)},
            {"name": "RENDEZVOUS_OUT", "value": str(tmp_path)},
        ],
    }
    pools = [
        {"machineSpec": {"machineType": "a2-highgpu-1g"}, "replicaCount": count, "pythonPackageSpec": package}
        for count in (1, 2)
    ]
    body = {"displayName": "rendezvous", "jobSpec": {"workerPoolSpecs": pools}}

    done, _ = run_to_end(emulator, body)

    assert done.state == State.JOB_STATE_SUCCEEDED
    assert json.loads((tmp_path / "ranks.json").read_text()) == [1, 2]
    seen = {name: json.loads((tmp_path / f"{name}.json").read_text()) for name in ("workerpool0-0", "workerpool1-0")}
    primary_address = json.loads(seen["workerpool0-0"]["CLUSTER_SPEC"])["cluster"]["workerpool0"][0]
    for name, env in seen.items():
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == tuple(primary_address.split(":"))
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == {"workerpool0-0": "0", "workerpool1-0": "1"}[name]


def test_each_replica_logs_under_its_own_task_name(
    pubsub_emulator: str,
    make_emulator: Callable[..., VertexEmulator],
    replicas: Replicas,
) -> None:
    events = EventsTopic()
    emulator = make_emulator(events_topic=events.topic, **NO_QUOTA)
    # A line with the kit's tag passes the job-events sink's filter.
    book = {"*": [["print", f"{TAG} probe"], ["note", "probed"]]}
    playbook = {
        PRIMARY: {
            "1": [
                ["print", f"{TAG} probe"],
                ["wait", "workerpool1-0", "probed", 1],
                ["wait", "workerpool1-1", "probed", 1],
                ["exit", 0],
            ]
        },
        "workerpool1-0": book,
        "workerpool1-1": book,
    }

    done, _ = run_to_end(emulator, replicas.job([1, 2], playbook))

    assert done.state == State.JOB_STATE_SUCCEEDED

    def probes() -> dict[str, int]:
        found: dict[str, int] = {}
        for entry in events.entries_for(done.name):
            if entry.get("textPayload") == f"{TAG} probe":
                task = entry["resource"]["labels"]["task_name"]
                found[task] = found.get(task, 0) + 1
        return found

    events.pull_for(20, until=lambda: len(probes()) == 3)
    assert probes() == {PRIMARY: 1, "workerpool1-0": 1, "workerpool1-1": 1}
    assert {entry["resource"]["labels"]["job_id"] for entry in events.entries_for(done.name)} == {job_id(done.name)}
    assert all(entry["logName"].startswith(f"projects/{PROJECT}/logs/") for entry in events.entries_for(done.name))


# ---- preemptions ----


def test_a_named_replica_is_reclaimed_and_restarts_alone_by_default(
    emulator: VertexEmulator, replicas: Replicas
) -> None:
    control(
        emulator,
        "preemption-plans",
        {"labels": {"run": "alone"}, "replica": "workerpool1-0", "preemptions": 1, "after_output": "ready"},
    )
    playbook = {
        PRIMARY: {"1": [["wait", "workerpool1-1", "start", 1], *exit_when("workerpool1-0", "start", 2)]},
        "workerpool1-0": {"*": [["print", "ready"]]},
    }

    done, seen = run_to_end(emulator, replicas.job([1, 2], playbook, labels={"run": "alone"}))

    assert done.state == State.JOB_STATE_SUCCEEDED
    assert replicas.of("workerpool1-0") == ["start", "sigterm", "start", "sigterm"]
    assert replicas.of(PRIMARY) == ["start", "exit"]  # never restarted, never signalled
    assert replicas.of("workerpool1-1") == ["start", "sigterm"]  # stopped at the end only
    assert seen["preemptions"] == 1 and seen["spot_restarts"] == 1
    assert seen["replicas"]["workerpool1-0"]["starts"] == 2
    assert seen["replicas"]["workerpool1-0"]["preemptions"] == 1
    assert seen["state_history"] == [
        "JOB_STATE_QUEUED",
        "JOB_STATE_PENDING",
        "JOB_STATE_RUNNING",
        "JOB_STATE_SUCCEEDED",
    ]
    # The restarted replica keeps its address and spec (Vertex: "with the same hostname").
    assert replicas.env("workerpool1-0", 2)["CLUSTER_SPEC"] == replicas.env("workerpool1-0", 1)["CLUSTER_SPEC"]


@pytest.mark.parametrize(
    ("scheduling", "modes", "survivor_events"),
    [
        ({"restartJobOnWorkerRestart": True}, {}, ["start", "sigterm", "start"]),
        ({}, {"preemption_restarts": "job"}, ["start", "sigterm", "start"]),
        ({"restartJobOnWorkerRestart": True}, {"survivor_stop": "sigkill"}, ["start", "start"]),
        # disableRetries overrides restartJobOnWorkerRestart to false, as documented.
        ({"restartJobOnWorkerRestart": True, "disableRetries": True}, {}, ["start"]),
    ],
    ids=["restartJobOnWorkerRestart", "mode-job", "survivors-sigkill", "disableRetries"],
)
def test_a_replica_restart_restarts_every_replica_with_the_flag_or_the_job_mode(
    emulator: VertexEmulator,
    replicas: Replicas,
    scheduling: dict[str, Any],
    modes: dict[str, str],
    survivor_events: list[str],
) -> None:
    control(emulator, "replica-modes", modes)
    control(
        emulator,
        "preemption-plans",
        {"labels": {"run": "whole"}, "replica": "workerpool1-0", "preemptions": 1, "after_output": "ready"},
    )
    playbook = {
        # The primary ends the job once workerpool1-0 is back, whoever else restarted.
        PRIMARY: {"*": exit_when("workerpool1-0", "start", 2)},
        # Reclaimed once every replica runs (and handles SIGTERM).
        "workerpool1-0": {
            "1": [["wait", PRIMARY, "start", 1], ["wait", "workerpool1-1", "start", 1], ["print", "ready"]]
        },
    }

    done, seen = run_to_end(emulator, replicas.job([1, 2], playbook, labels={"run": "whole"}, scheduling=scheduling))

    assert done.state == State.JOB_STATE_SUCCEEDED
    assert seen["preemptions"] == 1
    assert replicas.of("workerpool1-0")[:3] == ["start", "sigterm", "start"]
    assert replicas.of(PRIMARY) == [*survivor_events, "exit"], replicas.events()
    # The survivor's stop comes after the reclaimed replica's notice.
    history = replicas.events()
    if survivor_events == ["start", "sigterm", "start"]:
        assert history.index(("workerpool1-0", "sigterm")) < history.index((PRIMARY, "sigterm"))
    if modes.get("survivor_stop") == "sigkill":
        assert seen["signals"] == [{"run": 1, "signal": "SIGKILL"}]  # the primary's, no notice


@pytest.mark.parametrize(
    ("counting", "job_count"),
    [("per_event", 1), ("per_vm", 3), ("per_replica", 0)],
)
def test_every_replica_at_once_restarts_the_job_and_counts_as_the_mode_says(
    emulator: VertexEmulator, replicas: Replicas, counting: str, job_count: int
) -> None:
    control(emulator, "replica-modes", {"spot_restart_count": counting})
    control(
        emulator,
        "preemption-plans",
        {"labels": {"run": "all"}, "replica": "all", "preemptions": 1, "after_output": "all ready"},
    )
    playbook = {
        # The line comes from a worker once all three run; for "all", any replica's line counts.
        "workerpool1-1": {
            "1": [["wait", PRIMARY, "start", 1], ["wait", "workerpool1-0", "start", 1], ["print", "all ready"]]
        },
        # Then the primary ends the job once every replica is back (each noted its start).
        PRIMARY: {"2": [["wait", "workerpool1-0", "start", 2], *exit_when("workerpool1-1", "start", 2)]},
    }

    done, seen = run_to_end(emulator, replicas.job([1, 2], playbook, labels={"run": "all"}))

    assert done.state == State.JOB_STATE_SUCCEEDED
    for name in (PRIMARY, "workerpool1-0", "workerpool1-1"):
        assert replicas.of(name)[:3] == ["start", "sigterm", "start"], replicas.events()
        assert seen["replicas"][name]["preemptions"] == 1
    assert seen["preemptions"] == 3  # reclaimed VMs
    assert seen["spot_restarts"] == job_count
    assert seen["replica_modes"]["spot_restart_count"] == counting


def test_a_replica_reclaimed_during_a_save_is_killed_mid_write(emulator: VertexEmulator, replicas: Replicas) -> None:
    committed = format_line(CHECKPOINT_COMMITTED, {"step": 1, "checkpoint": "ckpt-1"})
    control(
        emulator,
        "preemption-plans",
        {
            "labels": {"run": "save"},
            "replica": "workerpool1-0",
            "preemptions": 1,
            "after_checkpoints": 1,
            "after_output": "saving",
            "grace_seconds": 0,
        },
    )
    playbook = {
        # The primary commits once the worker has begun its first save (which must not count:
        # it precedes the commit), then ends the job when the worker is back.
        PRIMARY: {
            "1": [
                ["wait", "workerpool1-0", "saving-1", 1],
                ["print", committed],
                ["note", "committed"],
                *exit_when("workerpool1-0", "start", 2),
            ]
        },
        "workerpool1-0": {
            "1": [
                ["print", "saving step 1"],
                ["note", "saving-1"],
                ["wait", PRIMARY, "committed", 1],
                ["note", "saving-2"],
                # A save in progress: its lines go on until it is killed (whichever the emulator
                # reads first after the commit line, the primary's, is the moment).
                ["repeat", "saving step 2"],
            ],
            "2": [],
        },
    }

    done, seen = run_to_end(emulator, replicas.job([1, 1], playbook, labels={"run": "save"}))

    assert done.state == State.JOB_STATE_SUCCEEDED
    # Killed without notice at its second save; the first, before the commit, did not count.
    assert replicas.of("workerpool1-0") == ["start", "saving-1", "saving-2", "start", "sigterm"], replicas.events()
    assert seen["replicas"]["workerpool1-0"]["signals"] == [
        {"run": 1, "signal": "SIGKILL"},
        {"run": 2, "signal": "SIGTERM"},
    ]
    assert seen["replicas"]["workerpool1-0"]["exit_statuses"][0] == 137


def test_a_plan_without_replica_reclaims_the_primary_alone(emulator: VertexEmulator, replicas: Replicas) -> None:
    control(
        emulator,
        "preemption-plans",
        {"labels": {"run": "primary"}, "preemptions": 1, "after_output": "primary ready"},
    )
    playbook = {PRIMARY: {"1": [["wait", "workerpool1-0", "start", 1], ["print", "primary ready"]], "2": [["exit", 0]]}}

    done, seen = run_to_end(emulator, replicas.job([1, 1], playbook, labels={"run": "primary"}))

    assert done.state == State.JOB_STATE_SUCCEEDED
    assert replicas.of(PRIMARY) == ["start", "sigterm", "start", "exit"]
    assert replicas.of("workerpool1-0") == ["start", "sigterm"]  # ran on, stopped at the end
    assert seen["runs"] == 2 and seen["preemptions"] == 1
    assert seen["signals"] == [{"run": 1, "signal": "SIGTERM"}]


def test_a_non_primary_replica_exiting_non_zero_fails_the_job_naming_it(
    emulator: VertexEmulator, replicas: Replicas
) -> None:
    playbook = {"workerpool1-0": {"1": [["wait", PRIMARY, "start", 1], ["exit", 3]]}}

    done, _ = run_to_end(emulator, replicas.job([1, 1], playbook))

    assert done.state == State.JOB_STATE_FAILED
    error = wait_for(lambda: client_for(emulator).get_custom_job(name=done.name).error.message, what="the error")
    assert error == "The replica workerpool1-0 exited with a non-zero status of 3. Termination reason: Error."
    assert replicas.of(PRIMARY) == ["start", "sigterm"]


def test_a_replica_can_be_preempted_on_demand(emulator: VertexEmulator, replicas: Replicas) -> None:
    client = client_for(emulator)
    playbook = {PRIMARY: {"1": exit_when("workerpool1-0", "start", 2)}}
    job = create(client, replicas.job([1, 1], playbook))
    replicas.wait_for_starts("workerpool1-0", 1)

    answer = control(emulator, f"{job.name}:preempt", {"replica": "workerpool1-0"})

    assert answer["replica"] == "workerpool1-0"
    assert wait_for_state(client, job.name, TERMINAL).state == State.JOB_STATE_SUCCEEDED
    assert replicas.of("workerpool1-0")[:3] == ["start", "sigterm", "start"]


@pytest.mark.parametrize(
    ("counting", "final_state"),
    [("per_event", State.JOB_STATE_FAILED), ("per_replica", State.JOB_STATE_SUCCEEDED)],
)
def test_seven_preemptions_over_two_replicas_fail_the_job_only_when_counted_per_event(
    emulator: VertexEmulator, replicas: Replicas, counting: str, final_state: State
) -> None:
    control(emulator, "replica-modes", {"spot_restart_count": counting})
    client = client_for(emulator)
    # The primary ends the job when the test notes "finish" in the record.
    job = create(client, replicas.job([1, 1], {PRIMARY: {"*": exit_when("test", "finish", 1)}}))
    reclaimed = ["workerpool1-0", PRIMARY] * 3 + ["workerpool1-0"]  # four and three: seven preemptions
    for number, name in enumerate(reclaimed, start=1):
        starts = reclaimed[:number].count(name)
        replicas.wait_for_starts(name, starts)
        control(emulator, f"{job.name}:preempt", {"replica": name})
        if number < len(reclaimed):
            replicas.wait_for_starts(name, starts + 1)

    if final_state == State.JOB_STATE_SUCCEEDED:
        replicas.wait_for_starts("workerpool1-0", 5)
        with replicas.record.open("a") as record:
            record.write(json.dumps({"replica": "test", "event": "finish", "pid": 0}) + "\n")
    done = wait_for_state(client, job.name, TERMINAL, timeout=60)

    assert done.state == final_state
    seen = details(emulator, job.name)
    assert seen["preemptions"] == 7
    assert [seen["replicas"][name]["preemptions"] for name in (PRIMARY, "workerpool1-0")] == [3, 4]
    if final_state == State.JOB_STATE_FAILED:
        assert "STOCKOUT" in done.error.message


# ---- exits Vertex documents as potentially transient ----


@pytest.mark.parametrize(
    ("status", "mode", "primary_events"),
    [
        (134, "job", ["start", "sigterm", "start", "exit"]),
        (139, "job", ["start", "sigterm", "start", "exit"]),
        (134, "replica", ["start", "exit"]),
    ],
    ids=["sigabrt-job", "sigsegv-job", "sigabrt-replica"],
)
def test_a_replica_exiting_with_a_transient_status_is_restarted_not_failed(
    emulator: VertexEmulator, replicas: Replicas, status: int, mode: str, primary_events: list[str]
) -> None:
    # A survivor that lost its peer leaves with SIGABRT's status (the kit's 134, NCCL's watchdog).
    control(emulator, "replica-modes", {"transient_exit_restarts": mode})
    playbook = {
        PRIMARY: {"*": exit_when("workerpool1-0", "start", 2)},
        "workerpool1-0": {"1": [["wait", PRIMARY, "start", 1], ["exit", status]]},
    }

    done, seen = run_to_end(emulator, replicas.job([1, 1], playbook))

    assert done.state == State.JOB_STATE_SUCCEEDED, seen["replicas"]
    assert replicas.of("workerpool1-0")[:3] == ["start", "exit", "start"], replicas.events()
    assert replicas.of(PRIMARY) == primary_events, replicas.events()
    assert seen["replicas"]["workerpool1-0"]["exit_statuses"][0] == status
    assert seen["transient_restarts"] == 1 and seen["preemptions"] == 0
    assert seen["replica_modes"]["transient_exit_restarts"] == mode


def test_a_fourth_transient_exit_fails_the_job_naming_the_replica(emulator: VertexEmulator, replicas: Replicas) -> None:
    playbook = {"workerpool1-0": {"*": [["wait", PRIMARY, "start", 1], ["exit", 134]]}}

    done, seen = run_to_end(emulator, replicas.job([1, 1], playbook))

    assert done.state == State.JOB_STATE_FAILED
    error = wait_for(lambda: client_for(emulator).get_custom_job(name=done.name).error.message, what="the error")
    assert error == "The replica workerpool1-0 exited with a non-zero status of 134. Termination reason: Error."
    assert replicas.of("workerpool1-0").count("start") == 4  # restarted three times
    assert seen["transient_restarts"] == 3
