# JAX with Orbax on a tiny regression, after jax.distributed.initialize (whose preemption notifier
# takes SIGTERM from Python natively); the README's snippet is appended below by the test.
import asyncio
import socket
import time

import jax
import jax.numpy as jnp
import numpy as np
from common import SAVE_DELAY, STEPS, record_step  # noqa: F401 (STEPS: the snippet's)
from orbax.checkpoint._src.path import atomicity

with socket.socket() as probe:  # a free port on this machine for the one-process coordinator
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1, process_id=0)

finalize = atomicity.AtomicRenameTemporaryPath.finalize


async def slow_finalize(self):
    """Every Orbax save announces itself and takes SAVE_DELAY longer before its rename."""
    print("SAVING", flush=True)
    await asyncio.sleep(SAVE_DELAY)
    await finalize(self)


atomicity.AtomicRenameTemporaryPath.finalize = slow_finalize
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
    time.sleep(0.03)  # a step takes a while, so a SIGTERM during an async save lands mid-training
    record_step(step)
    return state
