"""What each framework writes into a checkpoints folder, file by file in the order it writes them,
copied from real saves with tiny models (transformers 5.24 Trainer, pytorch-lightning 2.6.6
ModelCheckpoint, torch 2.13 DCP save and async_save, orbax-checkpoint 0.12.8 CheckpointManager on
a local path, Keras 3.15 BackupAndRestore and ModelCheckpoint) and, for DeepSpeed, from its
engine's save_checkpoint (tag folder, then the `latest` file). A save cut after k files is a torn
checkpoint. No tests here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from tests.support.prune_store import NOW, MemoryStore, folder

ORBAX_ITEM = [
    "default/_METADATA",
    "default/_sharding",
    "default/array_metadatas/process_0",
    "default/d/b5fd349c00055bd2b1cd5ade027fd811",
    "default/manifest.ocdbt",
    "default/ocdbt.process_0/d/3e73d032c5a7f5895398f5f9755ef317",
    "default/ocdbt.process_0/manifest.ocdbt",
    "default/commit_success.txt",
]


def orbax_metadata(committed: bool) -> str:
    body: dict[str, object] = {"item_handlers": {"default": "StandardCheckpointHandler"}, "init_timestamp_nsecs": 1}
    body["commit_timestamp_nsecs"] = 2 if committed else None
    return json.dumps(body)


@dataclass(frozen=True)
class Save:
    """One framework save: the objects it writes, in order (name relative to the checkpoints
    folder, text or None), the unit the layout rules should find, and after how many writes its
    framework's own evidence says it is complete (None: never; DeepSpeed: only while `latest`
    still names it)."""

    framework: str
    step: int
    unit: str
    writes: tuple[tuple[str, str | None], ...]
    complete_after: int | None = None

    def objects(self, cut: int | None = None) -> tuple[tuple[str, str | None], ...]:
        return self.writes if cut is None else self.writes[:cut]


def hf_trainer(step: int) -> Save:
    """Trainer._save_checkpoint: save_model (config, generation config, weights, training args),
    optimizer, scheduler, RNG, then trainer_state.json."""
    unit = f"checkpoint-{step}/"
    files = [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "training_args.bin",
        "optimizer.pt",
        "scheduler.pt",
        "rng_state.pth",
    ]
    state = json.dumps({"global_step": step, "max_steps": 6, "log_history": [{"step": step, "loss": 3.4}]})
    writes = [(unit + f, None) for f in files] + [(unit + "trainer_state.json", state)]
    return Save("hf", step, unit, tuple(writes), len(writes))


def hf_trainer_sharded(step: int, shards: int = 3) -> Save:
    unit = f"checkpoint-{step}/"
    names = ["config.json", *(f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1))]
    names += ["model.safetensors.index.json", "optimizer.pt", "scheduler.pt", "rng_state.pth"]
    writes = [(unit + n, None) for n in names] + [(unit + "trainer_state.json", json.dumps({"global_step": step}))]
    return Save("hf", step, unit, tuple(writes), len(writes))


def deepspeed(step: int) -> Save:
    """DeepSpeedEngine.save_checkpoint(save_dir): the tag folder's files, then `latest` (the tag)."""
    unit = f"global_step{step}/"
    writes = [
        (unit + "mp_rank_00_model_states.pt", None),
        (unit + "zero_pp_rank_0_mp_rank_00_optim_states.pt", None),
        (unit + "zero_pp_rank_1_mp_rank_00_optim_states.pt", None),
        ("latest", f"global_step{step}"),
    ]
    return Save("deepspeed", step, unit, tuple(writes), len(writes))


def lightning(step: int, epoch: int = 0) -> Save:
    """ModelCheckpoint(every_n_train_steps, save_last=True): one file per save (written through a
    temporary file), and last.ckpt."""
    unit = f"epoch={epoch}-step={step}"
    return Save("lightning", step, unit, ((f"{unit}.ckpt", None), ("last.ckpt", None)), 1)


def dcp(step: int) -> Save:
    """torch.distributed.checkpoint.save / async_save: the shards, then .metadata."""
    unit = f"step-{step:06d}/"
    return Save("dcp", step, unit, ((unit + "__0_0.distcp", None), (unit + ".metadata", None)), 2)


def orbax_gcs(step: int) -> Save:
    """Orbax on gs://: in place, `_CHECKPOINT_METADATA` first, commit_success.txt last."""
    unit = f"{step}/"
    writes = [(unit + "_CHECKPOINT_METADATA", orbax_metadata(False))]
    writes += [(unit + f, None) for f in ORBAX_ITEM]
    writes += [(unit + "_CHECKPOINT_METADATA", orbax_metadata(True)), (unit + "commit_success.txt", "ok")]
    # The commit timestamp lands just before commit_success.txt, once every write is done.
    return Save("orbax", step, unit, tuple(writes), len(writes) - 1)


def orbax_tmp(step: int) -> Save:
    """Orbax 0.12 on any other path, caught before its rename: the same files in `N.orbax-checkpoint-tmp/`
    (commit_success.txt included: 0.12 writes it just before renaming)."""
    unit = f"{step}.orbax-checkpoint-tmp/"
    writes = tuple((unit + name[len(f"{step}/") :], text) for name, text in orbax_gcs(step).writes)
    return Save("orbax_tmp", step, unit, writes)


def orbax_renamed_legacy(step: int) -> Save:
    """An older Orbax's rename: the final folder has no commit_success.txt; its metadata carries
    the commit timestamp."""
    unit = f"{step}/"
    writes = [(unit + f, None) for f in ORBAX_ITEM] + [(unit + "_CHECKPOINT_METADATA", orbax_metadata(True))]
    return Save("orbax_legacy", step, unit, tuple(writes), len(writes))


def keras_model_checkpoint(epoch: int) -> Save:
    """ModelCheckpoint("ckpt-{epoch:04d}.keras") and a weights-only one beside it."""
    unit = f"ckpt-{epoch:04d}"
    return Save("keras", epoch, unit, ((f"{unit}.keras", None),), 1)


def keras_weights(epoch: int) -> Save:
    unit = f"weights-epoch{epoch}"
    return Save("keras_weights", epoch, unit, ((f"{unit}.weights.h5", None),), 1)


SAVES = {
    "orbax_tmp": orbax_tmp,
    "hf": hf_trainer,
    "hf_sharded": hf_trainer_sharded,
    "deepspeed": deepspeed,
    "lightning": lightning,
    "dcp": dcp,
    "orbax_gcs": orbax_gcs,
    "orbax_legacy": orbax_renamed_legacy,
    "keras": keras_model_checkpoint,
    "keras_weights": keras_weights,
}

# Written beside checkpoints, never a checkpoint, never deleted: BackupAndRestore's folder, metrics
# and logs with steps in their names, DeepSpeed's recovery script.
NEVER_CHECKPOINTS = (
    "backup/latest.weights.h5",
    "backup/training_metadata.json",
    "eval_step_1100.json",
    "eval_step_1200.json",
    "metrics-step-300.csv",
    "train_step_5.log",
    "zero_to_fp32.py",
)


def write_save(store: MemoryStore, rid: str, save: Save, *, cut: int | None = None, at: datetime = NOW) -> list[str]:
    """Write `save` (its first `cut` objects: torn), a second apart; returns the full names."""
    names = []
    for i, (name, text) in enumerate(save.objects(cut)):
        names.append(store.put(f"{folder(rid)}{name}", at=at + timedelta(seconds=i), text=text).name)
    return names
