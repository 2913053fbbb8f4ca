# A transformers Trainer on a tiny GPT-2 built from its config (no hub download); docs/kit.md's
# snippet is appended below by the test.
import common
import torch
from common import EVERY, STEPS, record_step, slow_saves
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

slow_saves()
common.imports_done()  # slow_saves() imported DCP
torch.manual_seed(0)
config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
model = GPT2LMHeadModel(config)
ids = torch.randint(0, 64, (64, 16), generator=torch.Generator().manual_seed(0))
dataset = [{"input_ids": row, "labels": row} for row in ids]


class RecordSteps(TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        record_step(state.global_step)


args = TrainingArguments(
    output_dir="unused-the-kit-sets-it",
    max_steps=STEPS,
    save_steps=EVERY,
    save_total_limit=1,
    per_device_train_batch_size=4,
    report_to=[],
    use_cpu=True,
    disable_tqdm=True,
    logging_steps=1000,
    enable_jit_checkpoint=True,  # the handler it installs replaces any earlier one: the kit re-asserts
)
trainer = Trainer(model=model, args=args, train_dataset=dataset, callbacks=[RecordSteps()])
