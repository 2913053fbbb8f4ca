"""Shared by the framework test scripts (run by the framework venv's python): the plan, the step
record the test counts, and slow saves so a SIGTERM can land in the middle of one."""

import os
import time

STEPS = int(os.environ["KIT_TEST_STEPS"])
EVERY = int(os.environ["KIT_TEST_EVERY"])
SAVE_DELAY = float(os.environ.get("KIT_TEST_SAVE_DELAY", "0.3"))


def record_step(step):
    """One line per training step computed (a log per process): the test sums them over runs."""
    with open(os.environ["KIT_TEST_STEPS_LOG"] + os.environ.get("RANK", "0"), "a") as log:
        log.write(f"{step}\n")
    print(f"STEP {step}", flush=True)


def slow_saves():
    """Every torch.save (and DCP file write) announces itself and takes SAVE_DELAY longer."""
    import torch
    import torch.distributed.checkpoint.filesystem as dcp_files

    def slowly(save):
        def wrapper(*args, **kwargs):
            print("SAVING", flush=True)
            time.sleep(SAVE_DELAY / 2)
            result = save(*args, **kwargs)
            time.sleep(SAVE_DELAY / 2)
            return result

        return wrapper

    torch.save = slowly(torch.save)
    dcp_files.FileSystemWriter.write_data = slowly(dcp_files.FileSystemWriter.write_data)


def tiny_regression(torch):
    """A tiny model and a fixed data set, the same in every run."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 4, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True)
    return inputs, targets
