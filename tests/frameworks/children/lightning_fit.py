# A LightningModule on a tiny regression; the snippet from docs/kit.md is appended below by the test.
import common
import pytorch_lightning as pl
import torch
from common import STEPS, record_step, slow_saves, tiny_regression

slow_saves()
common.imports_done()  # slow_saves() imported DCP
torch.manual_seed(0)
inputs, targets = tiny_regression(torch)


class Regression(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

    def on_train_batch_end(self, outputs, batch, batch_idx):
        record_step(self.trainer.global_step)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


model = Regression()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(inputs, targets), batch_size=8)
trainer = pl.Trainer(
    max_steps=STEPS,
    accelerator="cpu",
    devices=1,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=False,
    enable_model_summary=False,
)
