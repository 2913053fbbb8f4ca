# A plain loop under accelerate; the snippet from docs/kit.md is appended below by the test.
import os

import common
import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration
from common import STEPS, record_step, slow_saves, tiny_regression  # noqa: F401 (STEPS: the snippet's)

slow_saves()
common.imports_done()  # slow_saves() imported DCP
torch.manual_seed(0)
inputs, targets = tiny_regression(torch)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
project = ProjectConfiguration(
    project_dir=os.environ["AIP_CHECKPOINT_DIR"], automatic_checkpoint_naming=True, total_limit=1
)
accelerator = Accelerator(cpu=True, project_config=project)
model, optimizer = accelerator.prepare(model, optimizer)


def train_step(step):
    batch = slice((step * 8) % 64, (step * 8) % 64 + 8)
    loss = torch.nn.functional.mse_loss(model(inputs[batch]), targets[batch])
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    record_step(step)
