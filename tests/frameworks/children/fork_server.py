# A fork server for the framework scripts (tests/support/fork_server.py starts it with the
# framework venv's python): it imports the frameworks once, then forks a child per script, so a
# run does not pay their imports again (two to three seconds of CPU a process, most of a framework
# test's). A child is a process of its own, as a fresh interpreter's would be: its own pid, its
# signals, its exit status; it runs the script as `python SCRIPT` would and ends the way the
# interpreter's shutdown does (non-daemon threads joined, then the exit handlers).
#
# Protocol, on a Unix socket whose path is argv[1], one connection per child: the client sends a
# JSON line {"argv", "env", "cwd"} with the child's stdout and stderr as SCM_RIGHTS descriptors;
# the server answers a line {"pid"}, then a line {"returncode"} when the child has ended
# (negative: the signal that killed it, as subprocess says).
import gc
import json
import os
import select
import socket
import sys

gc.disable()  # as common.py does: no collection during the imports, then frozen
import accelerate  # noqa: E402, F401
import pytorch_lightning  # noqa: E402, F401
import torch  # noqa: E402, F401
import torch.distributed.checkpoint  # noqa: E402, F401
import torch.distributed.checkpoint.filesystem  # noqa: E402, F401
import transformers  # noqa: E402, F401
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments  # noqa: E402, F401

gc.freeze()
gc.enable()


def run_child(request, stdout, stderr):
    """In the forked child: become `python SCRIPT` and never return."""
    import atexit
    import runpy
    import threading
    import traceback

    os.dup2(stdout, 1)
    os.dup2(stderr, 2)
    os.close(stdout)
    os.close(stderr)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    paths = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[0:1] = [os.path.dirname(os.path.abspath(script)), *paths]  # for the server's own folder
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
        if code == 1 and not isinstance(exit.code, int):
            print(exit.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    # The interpreter's shutdown: non-daemon threads first, then the exit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve(path):
    """Single-threaded (a fork of a threaded process may inherit a held lock): accept, fork, and
    reap the ended children between accepts, until the process that started it is gone."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    waiting = {}  # pid -> the connection that asked for it
    parent = os.getppid()
    while os.getppid() == parent:  # the test process gone (killed, say): so is the server
        if select.select([listener], [], [], 0.05)[0]:
            connection, _ = listener.accept()
            message, descriptors, _, _ = socket.recv_fds(connection, 1 << 16, 2)
            pid = os.fork()
            if pid == 0:
                listener.close()
                connection.close()
                run_child(json.loads(message), *descriptors)
            for descriptor in descriptors:
                os.close(descriptor)
            connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            waiting[pid] = connection
        while waiting:
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            with waiting.pop(pid) as connection:
                connection.sendall(json.dumps({"returncode": returncode}).encode() + b"\n")


if __name__ == "__main__":
    serve(sys.argv[1])
