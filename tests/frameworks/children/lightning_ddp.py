# PyTorch Lightning DDP on the CPU (gloo), one process per node; docs/kit.md's `lightning-ddp`
# snippet (the Trainer and the kit's fit) is appended below by the test. Each rank trains on a
# slice of a fixed data set chosen by the step and the rank alone (the loader only paces the
# steps), so a run resumed at any step computes what an uninterrupted one does.
import os

import common
import pytorch_lightning as pl
import torch
from common import STEPS, record_step, slow_saves, tiny_regression  # noqa: F401 (STEPS: the snippet's)

slow_saves()
common.imports_done()  # slow_saves() imported DCP
RANK = int(os.environ["RANK"])
# One process per node: the node's rank is the process's (Lightning reads NODE_RANK).
NODES = int(os.environ["WORLD_SIZE"])
os.environ.setdefault("NODE_RANK", os.environ["RANK"])
# The Trainer's test settings, as Lightning's PL_TRAINER_* defaults (the snippet's arguments win).
os.environ.update(
    {
        "PL_TRAINER_ACCELERATOR": "cpu",
        "PL_TRAINER_LOGGER": "False",
        "PL_TRAINER_ENABLE_PROGRESS_BAR": "False",
        "PL_TRAINER_ENABLE_MODEL_SUMMARY": "False",
    }
)
inputs, targets = tiny_regression(torch)


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        step = self.trainer.global_step + 1
        start = ((2 * step + RANK) * 8) % 64
        loss = torch.nn.functional.mse_loss(self.layer(inputs[start : start + 8]), targets[start : start + 8])
        # Here, not in on_train_batch_end: the module's hook runs after the callbacks' (the kit's
        # stop flag), and a SIGTERM the test sends at this line must stop this step.
        record_step(step)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


torch.manual_seed(0)  # every rank starts from the same weights (DDP would copy rank 0's anyway)
model = Regression()
# Enough batches on every rank for all the steps, whatever the sampler hands each.
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4 * STEPS, 1)), batch_size=1)
