# A plain PyTorch loop (torch.save or DCP); the snippet from docs/kit.md is appended below by the test.
import os

import common
import torch
from common import STEPS, record_step, slow_saves, tiny_regression  # noqa: F401 (STEPS: the snippet's)

slow_saves()


def hold_training_in_a_paused_save(async_save):
    """With PAUSE_IN_SAVE, training waits once the first asynchronous save is paused in its writer
    thread, so the SIGTERM finds it there, not at the last step of a loop that ran on (as
    orbax_loop.py does for Orbax's)."""

    def wrapper(*args, **kwargs):
        future = async_save(*args, **kwargs)
        if common.PAUSE_IN_SAVE and common.save_paused.wait(60):
            common.wait_for_sigterm()
        return future

    return wrapper


torch.distributed.checkpoint.async_save = hold_training_in_a_paused_save(torch.distributed.checkpoint.async_save)
common.imports_done()  # slow_saves() imported DCP
if "WORLD_SIZE" in os.environ:  # started as one of several processes (RANK, MASTER_ADDR, ...)
    torch.distributed.init_process_group("gloo")
torch.manual_seed(0)
inputs, targets = tiny_regression(torch)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)


def train_step(step):
    batch = slice((step * 8) % 64, (step * 8) % 64 + 8)
    loss = torch.nn.functional.mse_loss(model(inputs[batch]), targets[batch])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    record_step(step)
