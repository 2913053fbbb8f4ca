# A plain PyTorch loop (torch.save or DCP); the snippet from docs/kit.md is appended below by the test.
import os

import common
import torch
from common import STEPS, record_step, slow_saves, tiny_regression  # noqa: F401 (STEPS: the snippet's)

slow_saves()
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
