"""The demo trainer: a small but real training loop that survives Spot preemption.

It follows Google's advice for training on Spot VMs:

- it reads `AIP_CHECKPOINT_DIR` and resumes from the newest *complete* checkpoint there, so loss
  and step continue where the last run stopped instead of restarting from zero;
- it checkpoints every `--checkpoint-every` steps. A checkpoint is a prefix `step-000400/` holding
  its shards, then a `COMMITTED` marker written last: a run killed mid-write leaves a prefix
  without a marker, which the next run skips;
- on SIGTERM (what a Spot VM gets before it is reclaimed) it finishes the step in progress,
  writes a checkpoint and exits 143, well inside the grace period;

All of that goes through the trainer kit (`spotjobs_kit.Run`, kit/): which checkpoint is the
newest complete one (the same rules the pruner uses), the SIGTERM hook, the commit (shards, then
the marker naming them), and the kit's `spotjobs_kit` lines (run_started, preempted,
checkpoint_committed, run_finished). The kit reaches GCS through the FUSE mount when Vertex
provides one, else through google-cloud-storage (so fake-gcs-server works through
STORAGE_EMULATOR_HOST). On top, the trainer checks each shard's size against the marker's file
list before resuming, so a checkpoint with torn shards is skipped too;
- when done it writes the model to `AIP_MODEL_DIR` and prints the final metrics.

`--exit-zero-after-sigterm` (invented for tests, opt-in) makes it exit 0 after its SIGTERM
checkpoint instead of 143, as Lightning 2.6 does: the process a Vertex job may record SUCCEEDED
with its training unfinished (docs/signals.md).

The model is logistic regression trained with SGD + momentum on a synthetic, seeded dataset, in
pure Python. The mini-batch of step s is a function of (seed, s), so a run resumed from a
checkpoint computes exactly what an uninterrupted run would have.

Every line on stdout is one JSON object: the trainer's own with `message` and `event` (`resume`,
`checkpoint`, `stopping`, `final`, `error`) and the `step`, and the kit's (a `spotjobs_kit` object). The Vertex emulator (and Cloud Logging) turns such
lines into structured `jsonPayload` entries, so the demo and tests can see where each run started.

    python -m devstack.trainer --steps 600 --checkpoint-every 50 --step-seconds 0.01
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spotjobs_kit import Checkpoint, Run, checkpoint_name
from spotjobs_kit.layout import KIT_MARKER as COMMIT_MARKER

CHECKPOINT_NAME = re.compile(r"^step-(\d{6,})/$")
SHARDS = ("model.json", "optimizer.json", "trainer_state.json")
SIGTERM_EXIT_STATUS = 128 + signal.SIGTERM


@dataclass(frozen=True)
class TrainerConfig:
    steps: int
    checkpoint_every: int
    step_seconds: float
    checkpoint_dir: str
    model_dir: str
    fail_at_step: int | None = None
    exit_zero_after_sigterm: bool = False
    seed: int = 0
    features: int = 16
    samples: int = 2048
    batch_size: int = 64
    learning_rate: float = 0.02
    momentum: float = 0.9


def parse_args(argv: Sequence[str] | None = None) -> TrainerConfig:
    parser = argparse.ArgumentParser(prog="python -m devstack.trainer", description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600, help="total training steps")
    parser.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints")
    parser.add_argument(
        "--step-seconds",
        type=float,
        default=0.01,
        help="minimum wall time of one step (stands in for an accelerator's step time)",
    )
    parser.add_argument("--fail-at-step", type=int, default=None, help="raise an error at this step (exit 1)")
    parser.add_argument(
        "--exit-zero-after-sigterm",
        action="store_true",
        help="exit 0 after the SIGTERM checkpoint, as Lightning 2.6 does (invented for tests)",
    )
    parser.add_argument("--seed", type=int, default=0, help="dataset and initialisation seed")
    parser.add_argument("--checkpoint-dir", default=os.environ.get("AIP_CHECKPOINT_DIR"))
    parser.add_argument("--model-dir", default=os.environ.get("AIP_MODEL_DIR"))
    args = parser.parse_args(argv)
    if not args.checkpoint_dir or not args.model_dir:
        parser.error("AIP_CHECKPOINT_DIR and AIP_MODEL_DIR (or --checkpoint-dir/--model-dir) are required")
    if args.steps < 1 or args.checkpoint_every < 1 or args.step_seconds < 0:
        parser.error("--steps and --checkpoint-every must be >= 1, --step-seconds >= 0")
    return TrainerConfig(
        steps=args.steps,
        checkpoint_every=args.checkpoint_every,
        step_seconds=args.step_seconds,
        checkpoint_dir=args.checkpoint_dir,
        model_dir=args.model_dir,
        fail_at_step=args.fail_at_step,
        exit_zero_after_sigterm=args.exit_zero_after_sigterm,
        seed=args.seed,
    )


# The data and the model: pure Python, deterministic.


@dataclass(frozen=True)
class Dataset:
    rows: list[list[float]]
    labels: list[float]


def make_dataset(seed: int, samples: int, features: int) -> tuple[Dataset, Dataset]:
    """A linearly separable-ish binary problem (with label noise): (train, held-out eval)."""
    rng = random.Random(f"data:{seed}")
    true_weights = [rng.gauss(0.0, 1.0) for _ in range(features)]
    rows, labels = [], []
    for _ in range(samples + samples // 4):
        row = [rng.gauss(0.0, 1.0) for _ in range(features)]
        margin = sum(w * x for w, x in zip(true_weights, row)) + rng.gauss(0.0, 0.5)
        rows.append(row)
        labels.append(1.0 if margin > 0 else 0.0)
    return Dataset(rows[:samples], labels[:samples]), Dataset(rows[samples:], labels[samples:])


@dataclass
class Model:
    weights: list[float]
    bias: float = 0.0
    velocity: list[float] = field(default_factory=list)  # momentum, weights then bias
    step: int = 0
    last_loss: float | None = None  # the last mini-batch's loss
    eval_loss: float | None = None  # on the held-out set, as of the last checkpoint

    @classmethod
    def initial(cls, seed: int, features: int) -> Model:
        rng = random.Random(f"init:{seed}")
        return cls(
            weights=[rng.gauss(0.0, 0.01) for _ in range(features)],
            velocity=[0.0] * (features + 1),
        )

    def predict(self, row: list[float]) -> float:
        z = sum(w * x for w, x in zip(self.weights, row)) + self.bias
        return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))

    def train_step(self, batch: list[int], data: Dataset, learning_rate: float, momentum: float) -> float:
        """One SGD + momentum step on the rows in `batch`; returns the batch's mean log loss."""
        gradient = [0.0] * (len(self.weights) + 1)
        loss = 0.0
        for index in batch:
            row, label = data.rows[index], data.labels[index]
            p = self.predict(row)
            loss -= math.log(max(p, 1e-12)) if label else math.log(max(1.0 - p, 1e-12))
            error = p - label
            for j, x in enumerate(row):
                gradient[j] += error * x
            gradient[-1] += error
        scale = 1.0 / len(batch)
        self.velocity = [momentum * v + g * scale for v, g in zip(self.velocity, gradient)]
        self.weights = [w - learning_rate * v for w, v in zip(self.weights, self.velocity)]
        self.bias -= learning_rate * self.velocity[-1]
        self.step += 1
        self.last_loss = loss * scale
        return self.last_loss

    def evaluate(self, data: Dataset) -> dict[str, float]:
        loss, correct = 0.0, 0
        for row, label in zip(data.rows, data.labels):
            p = self.predict(row)
            loss -= math.log(max(p, 1e-12)) if label else math.log(max(1.0 - p, 1e-12))
            correct += (p >= 0.5) == bool(label)
        return {"eval_loss": round(loss / len(data.rows), 6), "accuracy": round(correct / len(data.rows), 4)}

    def shards(self) -> dict[str, bytes]:
        """The checkpoint's shards. JSON floats round-trip exactly, so resuming is bit-exact."""
        return {
            "model.json": _json_bytes({"weights": self.weights, "bias": self.bias}),
            "optimizer.json": _json_bytes({"velocity": self.velocity}),
            "trainer_state.json": _json_bytes(
                {"step": self.step, "last_loss": self.last_loss, "eval_loss": self.eval_loss}
            ),
        }

    @classmethod
    def from_shards(cls, shards: dict[str, bytes]) -> Model:
        model, optimizer, state = (json.loads(shards[name]) for name in SHARDS)
        return cls(
            weights=model["weights"],
            bias=model["bias"],
            velocity=optimizer["velocity"],
            step=state["step"],
            last_loss=state["last_loss"],
            eval_loss=state.get("eval_loss"),
        )


def batch_for_step(seed: int, step: int, samples: int, batch_size: int) -> list[int]:
    """The rows of step `step`: a function of (seed, step) only, so a resumed run repeats nothing."""
    return random.Random(f"batch:{seed}:{step}").sample(range(samples), batch_size)


def _json_bytes(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# Checkpoints in GCS.


def split_gcs_uri(uri: str) -> tuple[str, str]:
    """'gs://bucket/a/b/' -> ('bucket', 'a/b/'); the prefix always ends with '/' (or is empty)."""
    if not uri.startswith("gs://"):
        raise ValueError(f"{uri!r} is not a gs:// URI")
    bucket, _, prefix = uri[len("gs://") :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, (prefix.rstrip("/") + "/") if prefix.strip("/") else ""


def checkpoint_step(name: str) -> int | None:
    """The step of a checkpoint prefix name (relative to the checkpoint dir), or None."""
    match = CHECKPOINT_NAME.match(name)
    return int(match.group(1)) if match else None


def load_latest_complete(run: Run) -> tuple[Checkpoint, Model] | None:
    """The newest complete checkpoint (the kit's rules) of this trainer's layout whose shards
    match the sizes its marker lists."""
    for checkpoint in run.complete_checkpoints():
        if checkpoint_step(checkpoint.name) is None:
            continue  # complete, but not one this trainer writes
        folder = Path(run.resume_path(checkpoint, local=True) or "")
        try:
            manifest = json.loads((folder / COMMIT_MARKER).read_bytes())
            shards = {shard: (folder / shard).read_bytes() for shard in SHARDS}
        except (OSError, ValueError):
            continue
        sizes = manifest.get("files") or manifest.get("shards") or {}
        if all(len(shards[shard]) == sizes.get(shard) for shard in SHARDS):
            return checkpoint, Model.from_shards(shards)
    return None


def save(run: Run, model: Model) -> tuple[str, int]:
    """Write the shards, then (the kit) the marker naming them; returns (name, bytes written)."""
    with run.checkpoint(model.step) as folder:
        for shard, data in model.shards().items():
            (Path(folder) / shard).write_bytes(data)
    name = checkpoint_name(model.step)
    marker = run.store.stat(name + COMMIT_MARKER)
    return name, sum(len(d) for d in model.shards().values()) + (marker.size if marker else 0)


def write_model(client: Any, uri: str, model: Model, metrics: dict[str, float]) -> str:
    from google.cloud.storage.retry import DEFAULT_RETRY

    bucket_name, prefix = split_gcs_uri(uri)
    path = f"{prefix}model.json"
    payload = {"weights": model.weights, "bias": model.bias, "step": model.step, "metrics": metrics}
    client.bucket(bucket_name).blob(path).upload_from_string(
        _json_bytes(payload), content_type="application/json", retry=DEFAULT_RETRY
    )
    return f"gs://{bucket_name}/{path}"


# The loop.


class StopRequested:
    """Set by SIGTERM; the loop checks it between steps, so a step and a checkpoint are never torn."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self, signum: int, frame: object) -> None:
        if self.at is None:
            self.at = time.monotonic()

    @property
    def requested(self) -> bool:
        return self.at is not None


def emit(event: str, message: str, *, severity: str = "INFO", **fields: Any) -> None:
    line = {"severity": severity, "message": message, "event": event, **fields}
    sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def train(config: TrainerConfig, client: Any, stop: StopRequested) -> int:
    """Run (or resume) training; returns the process exit status. From here on SIGTERM reaches
    the kit's hook (`run.preempted`); `stop` still counts (a signal before the kit was started,
    or a test's stand-in)."""
    with Run.start(config.checkpoint_dir, announce=False, gcs_client=client) as run:
        return _train(config, client, stop, run)


def _train(config: TrainerConfig, client: Any, stop: StopRequested, run: Run) -> int:
    train_data, eval_data = make_dataset(config.seed, config.samples, config.features)
    restored = load_latest_complete(run)
    run.announce(restored[0] if restored else None)
    if restored is None:
        model = Model.initial(config.seed, config.features)
        emit("resume", "no complete checkpoint; starting at step 0", step=0, checkpoint=None)
    else:
        checkpoint, model = restored
        emit(
            "resume",
            f"resuming from checkpoint {checkpoint.name}",
            step=model.step,
            checkpoint=checkpoint.name,
            eval_loss=model.eval_loss,
        )
    last_saved = model.step
    while model.step < config.steps:
        run.step = model.step
        if run.preempted or stop.requested:
            _stop(run, model, last_saved, run.preempted_at or stop.at, eval_data)
            return 0 if config.exit_zero_after_sigterm else SIGTERM_EXIT_STATUS
        if config.fail_at_step is not None and model.step == config.fail_at_step:
            emit("error", f"training failed at step {model.step}", severity="ERROR", step=model.step)
            raise RuntimeError(f"simulated bug in the training code at step {model.step}")
        started = time.monotonic()
        batch = batch_for_step(config.seed, model.step, config.samples, config.batch_size)
        model.train_step(batch, train_data, config.learning_rate, config.momentum)
        if model.step % config.checkpoint_every == 0 or model.step == config.steps:
            model.eval_loss = model.evaluate(eval_data)["eval_loss"]
            name, size = save(run, model)
            last_saved = model.step
            emit(
                "checkpoint",
                f"checkpoint {name} committed",
                step=model.step,
                checkpoint=name,
                bytes=size,
                eval_loss=model.eval_loss,
            )
        remaining = config.step_seconds - (time.monotonic() - started)
        if remaining > 0:
            time.sleep(remaining)
    metrics = model.evaluate(eval_data)
    uri = write_model(client, config.model_dir, model, metrics)
    emit(
        "final",
        f"training finished at step {model.step}: accuracy {metrics['accuracy']}",
        step=model.step,
        model=uri,
        eval_loss=metrics["eval_loss"],
        accuracy=metrics["accuracy"],
    )
    run.finish(model.step)
    return 0


def _stop(run: Run, model: Model, last_saved: int, signalled_at: float | None, eval_data: Dataset) -> None:
    # Announce the step first: should the grace period run out mid-write, the work is still counted.
    emit("stopping", f"SIGTERM received; checkpointing step {model.step} before exit", step=model.step)
    if model.step > last_saved:
        model.eval_loss = model.evaluate(eval_data)["eval_loss"]
        name, size = save(run, model)
        seconds = time.monotonic() - (signalled_at or time.monotonic())
        emit(
            "checkpoint",
            f"checkpoint {name} committed on SIGTERM",
            step=model.step,
            checkpoint=name,
            bytes=size,
            eval_loss=model.eval_loss,
            reason="sigterm",
            seconds_after_sigterm=round(seconds, 3),
        )


def storage_client() -> Any:
    from google.cloud import storage

    # With STORAGE_EMULATOR_HOST set the client targets the emulator with anonymous credentials.
    return storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT") or None)


def main(argv: Sequence[str] | None = None) -> int:
    stop = StopRequested()
    # Installed first: a reclaim can come while the libraries are still importing. The kit's
    # hook replaces it once training starts.
    signal.signal(signal.SIGTERM, stop)
    config = parse_args(argv)
    return train(config, storage_client(), stop)


if __name__ == "__main__":
    sys.exit(main())
