# A Keras model (JAX backend) on a tiny regression, one batch per epoch so an epoch is a step;
# the snippet from docs/kit.md is appended below by the test.
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
import common
import keras
import numpy as np
from common import STEPS, record_step  # noqa: F401 (STEPS: the snippet's)

common.imports_done()
save_weights = keras.Model.save_weights


def announced_save_weights(self, *args, **kwargs):
    """Every save announces itself; with PAUSE_IN_SAVE the first one waits for the SIGTERM."""
    print("SAVING", flush=True)
    common.pause_in_save()
    save_weights(self, *args, **kwargs)


keras.Model.save_weights = announced_save_weights
keras.utils.set_random_seed(0)
generator = np.random.default_rng(0)
x = generator.normal(size=(64, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")


class RecordSteps(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        record_step(epoch + 1)
