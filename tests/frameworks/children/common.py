"""Shared by the framework test scripts (run by the framework venv's python): the plan, the step
record the test counts, and the points where a script waits for the test's SIGTERM (at a step,
or inside a save) so it lands exactly there however loaded the machine is."""

import atexit
import gc
import os
import threading
import time

# Garbage collection, which costs these short processes a good part of their CPU and does nothing
# for them (their memory goes back at exit). Every script imports this module before its framework:
# no collection runs during the framework's imports (millions of objects, a full collection after
# every few hundred thousand), then imports_done() freezes what they made (kept, as imported
# modules are anyway) and collects as usual from there. At exit, once the exit handlers registered
# after this one have run (the kit's, a framework's at run time), the same for what the run made:
# the interpreter's teardown would otherwise walk it all in several full collections. What is not
# collected is garbage in reference cycles, which CPython does not promise to collect at exit: every
# exit status, kit line, file and exit handler is as before.
gc.disable()
atexit.register(gc.freeze)


def imports_done():
    """Called by each script once its imports are done (see above)."""
    gc.freeze()
    gc.enable()


STEPS = int(os.environ["KIT_TEST_STEPS"])
EVERY = int(os.environ["KIT_TEST_EVERY"])
PAUSE_AT_STEP = int(os.environ.get("KIT_TEST_PAUSE_AT_STEP") or 0)
PAUSE_IN_SAVE = os.environ.get("KIT_TEST_PAUSE_IN_SAVE") == "1"
HANDSHAKE = os.environ.get("KIT_TEST_HANDSHAKE", "")  # the test creates it right after its SIGTERM
# A floor on a step's time: a test that preempts on a line of the output (the Vertex emulator's
# plans keyed to progress) then meets the run where the line was, not steps later, however fast.
STEP_SECONDS = float(os.environ.get("KIT_TEST_STEP_SECONDS") or 0)
_paused_in_save = []
save_paused = threading.Event()  # the first save is waiting for the SIGTERM (in whichever thread)


def wait_for_sigterm():
    """Until the test says it sent SIGTERM (by then the signal is pending: the kit's handler runs
    before this returns); at most 240 s, within the 300 s the test waits for the process (60 s
    ran out under a load average of 20, with two processes saving together)."""
    deadline = time.monotonic() + 240
    while not os.path.exists(HANDSHAKE) and time.monotonic() < deadline:
        time.sleep(0.02)


def record_step(step):
    """One line per training step computed (a log per process): the test sums them over runs."""
    with open(os.environ["KIT_TEST_STEPS_LOG"] + os.environ.get("RANK", "0"), "a") as log:
        log.write(f"{step}\n")
    print(f"STEP {step}", flush=True)
    if STEP_SECONDS:
        time.sleep(STEP_SECONDS)
    if step == PAUSE_AT_STEP:
        wait_for_sigterm()


def slow_saves():
    """Every torch.save (and DCP file write) announces itself; with PAUSE_IN_SAVE the first one
    waits for the SIGTERM first (the framework's save has begun: HF has written the model)."""
    import torch
    import torch.distributed.checkpoint.filesystem as dcp_files

    def slowly(save):
        def wrapper(*args, **kwargs):
            print("SAVING", flush=True)
            pause_in_save()
            return save(*args, **kwargs)

        return wrapper

    torch.save = slowly(torch.save)
    dcp_files.FileSystemWriter.write_data = slowly(dcp_files.FileSystemWriter.write_data)


def tiny_regression(torch):
    """A tiny model and a fixed data set, the same in every run."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 4, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True)
    return inputs, targets


def pause_in_save():
    """Call at the start of a save after printing SAVING: with PAUSE_IN_SAVE, the first save of
    the process waits there for the test's SIGTERM."""
    if PAUSE_IN_SAVE and not _paused_in_save:
        _paused_in_save.append(True)
        save_paused.set()
        wait_for_sigterm()
