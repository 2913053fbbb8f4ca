"""SIGTERM after `jax.distributed.initialize`, in real processes (the framework venv's python):
JAX's preemption notifier replaces Python's SIGTERM handler natively, so without the kit putting
its own back the kit never hears of the preemption; with it, the kit does and JAX's notifier
still does too (chained: it logs "SIGTERM caught")."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from spotjobs_kit import parse_kit_line

from tests.support.frameworks import framework_env, framework_python

INITIALIZE = """
import socket
import jax
with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=1, process_id=0)
"""
# Each scenario: what the script does before it SIGTERMs itself, and whether the kit must see it.
SCENARIOS = {
    "initialize, then Checkpoints": (
        INITIALIZE + "from spotjobs_kit.orbax import Checkpoints\nrun = Checkpoints().run\n",
        True,
    ),
    "a Run, then initialize and reassert_sigterm": (
        "from spotjobs_kit import Run\nfrom spotjobs_kit.orbax import reassert_sigterm\nrun = Run.start()\n"
        + INITIALIZE
        + "reassert_sigterm(run)\n",
        True,
    ),
    "a plain Run, then initialize (nothing put back)": (
        "from spotjobs_kit import Run\nrun = Run.start()\n" + INITIALIZE,
        False,
    ),
}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_kit_hears_sigterm_after_jax_distributed_initialize(scenario: str, tmp_path: Path) -> None:
    setup, kit_hears = SCENARIOS[scenario]
    stderr = tmp_path / "stderr"
    script = setup + textwrap.dedent(
        f"""
        import os, signal, sys, time
        os.kill(os.getpid(), signal.SIGTERM)
        # The kit's handler runs between bytecodes; JAX's notifier logs on its own thread, so wait
        # for its line (in this process's stderr, a file) rather than for a time: once it was
        # still silent after a second on a loaded machine.
        deadline = time.monotonic() + 300
        while "SIGTERM caught" not in open({str(stderr)!r}).read() and time.monotonic() < deadline:
            time.sleep(0.05)
        print("PREEMPTED", run.preempted, flush=True)
        run.finish()  # a clean exit, so the status says nothing: the lines do
        # Out without the interpreter's teardown: JAX's distributed client, told of a preemption,
        # once held the exit for over 11 minutes after `run_finished` (a quiet CI machine). What
        # is tested ends here; a preempted VM is stopped anyway.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
        """
    )
    env = {**framework_env(tmp_path), "AIP_CHECKPOINT_DIR": str(tmp_path / "checkpoints")}
    # The bound is for a loaded machine, not a quiet one (JAX's initialize and the wait for its line).
    with stderr.open("w") as stderr_file:
        done = subprocess.run(
            [framework_python(), "-c", script],
            stdout=subprocess.PIPE,
            stderr=stderr_file,
            text=True,
            env=env,
            timeout=700,
            cwd=tmp_path,
        )
    errors = stderr.read_text()
    assert done.returncode == 0, errors[-3000:]
    events = [r.event for r in map(parse_kit_line, done.stdout.splitlines()) if r is not None]
    assert (f"PREEMPTED {kit_hears}" in done.stdout) and (("preempted" in events) is kit_hears), done.stdout
    assert "SIGTERM caught" in errors, errors[-3000:]  # JAX's notifier heard it either way
