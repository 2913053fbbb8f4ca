"""spotjobs_kit.keras with several batches per epoch, in real processes: a SIGTERM inside an epoch
saves at the end of that batch as the epochs done before it, exits 143, and the restart runs that
epoch again from its first batch, then finishes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from spotjobs_kit import parse_kit_line

from tests.support.frameworks import framework_env, framework_python

SCRIPT = """
import os, signal
os.environ.setdefault("KERAS_BACKEND", "jax")
import keras
import numpy as np
from spotjobs_kit import keras as kit_keras

keras.utils.set_random_seed(0)
x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")


class Batches(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        print("BATCH", self.epoch, batch, flush=True)
        if (self.epoch, batch) == (3, 1) and os.environ.get("KILL"):
            os.kill(os.getpid(), signal.SIGTERM)


kit_keras.fit(model, x, y, epochs=6, every=2, batch_size=16, callbacks=[Batches()], verbose=0)
"""


def run(tmp_path: Path, *, kill: bool) -> tuple[int, list, list[tuple[int, int]]]:
    env = {**framework_env(tmp_path), "AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    if kill:
        env["KILL"] = "1"
    done = subprocess.run(
        [framework_python(), "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    records = [r for r in map(parse_kit_line, done.stdout.splitlines()) if r is not None]
    batches = [tuple(map(int, line.split()[1:])) for line in done.stdout.splitlines() if line.startswith("BATCH ")]
    return done.returncode, records, batches  # type: ignore[return-value]


def test_a_sigterm_inside_an_epoch_resumes_at_the_start_of_that_epoch(tmp_path: Path) -> None:
    code, records, batches = run(tmp_path, kill=True)
    assert code == 143
    committed = [r.step for r in records if r.event == "checkpoint_committed"]
    assert committed == [2, 3]  # every 2 epochs, then at SIGTERM: the 3 epochs done before epoch 3
    assert batches[-1] == (3, 1)  # stopped at the end of the batch the SIGTERM landed in

    code, records, batches = run(tmp_path, kill=False)
    assert code == 0
    started = next(r for r in records if r.event == "run_started")
    assert (started.resumed_step, started.total_steps) == (3, 6)
    assert batches[0] == (3, 0) and batches[-1] == (5, 3)  # epoch 3 again from its first batch
    assert [r.step for r in records if r.event == "checkpoint_committed"] == [4, 6]
    assert [r.step for r in records if r.event == "run_finished"] == [6]
