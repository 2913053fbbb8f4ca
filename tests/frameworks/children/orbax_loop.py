# JAX with Orbax on a tiny regression, after jax.distributed.initialize (whose preemption notifier
# takes SIGTERM from Python natively); the snippet from docs/kit.md is appended below by the test.
import socket

import common
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
from common import STEPS, record_step  # noqa: F401 (STEPS: the snippet's)
from orbax.checkpoint._src.path import atomicity

common.imports_done()
with socket.socket() as probe:  # a free port on this machine for the one-process coordinator
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1, process_id=0)

finalize = atomicity.AtomicRenameTemporaryPath.finalize
save = ocp.AsyncCheckpointer.save


async def announced_finalize(self):
    """Every Orbax save announces itself before its rename; with PAUSE_IN_SAVE the first one
    waits there for the SIGTERM."""
    print("SAVING", flush=True)
    common.pause_in_save()
    await finalize(self)


def save_then_hold_training(self, *args, **kwargs):
    """With PAUSE_IN_SAVE, training waits once the first save is paused in flight, so the
    SIGTERM finds it there (not a finished run)."""
    result = save(self, *args, **kwargs)
    if common.PAUSE_IN_SAVE and common.save_paused.wait(60):
        common.wait_for_sigterm()
    return result


atomicity.AtomicRenameTemporaryPath.finalize = announced_finalize
ocp.AsyncCheckpointer.save = save_then_hold_training
generator = np.random.default_rng(0)
inputs = jnp.asarray(generator.normal(size=(64, 4)), dtype=jnp.float32)
targets = inputs.sum(axis=1, keepdims=True)
state = {"w": jnp.zeros((4, 1)), "b": jnp.zeros((1,))}


@jax.jit
def update(params, x, y):
    grads = jax.grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)
    return jax.tree_util.tree_map(lambda p, g: p - 0.01 * g, params, grads)


def train_step(state, step):
    start = (step * 8) % 64
    state = update(state, inputs[start : start + 8], targets[start : start + 8])
    record_step(step)
    return state
