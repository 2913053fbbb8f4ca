# PyTorch on the CPU (gloo), one process per rank; a multi-node snippet from docs/kit.md (DDP, or
# FSDP around build_model()) is appended below by the test. Each rank trains on its own slice of a
# fixed data set, chosen by the step and the rank alone, so a run resumed at any step computes what
# an uninterrupted one does.
import os

import common
import torch
from common import STEPS, record_step, slow_saves, tiny_regression  # noqa: F401 (STEPS: the snippet's)

slow_saves()
common.imports_done()  # slow_saves() imported DCP
RANK = int(os.environ["RANK"])
inputs, targets = tiny_regression(torch)


def build_model():
    torch.manual_seed(0)  # every rank starts from the same weights (DDP would copy rank 0's anyway)
    return torch.nn.Linear(4, 1)


def train_step(model, optimizer, step):
    start = ((2 * step + RANK) * 8) % 64
    loss = torch.nn.functional.mse_loss(model(inputs[start : start + 8]), targets[start : start + 8])
    loss.backward()  # DDP all-reduces the gradients here (FSDP reduce-scatters them)
    optimizer.step()
    optimizer.zero_grad()
    record_step(step)
