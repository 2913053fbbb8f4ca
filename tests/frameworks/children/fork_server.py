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
# (negative: the signal that killed it, as subprocess says). A client that closes its connection
# before that (killed) has its child killed, and every process the child started.
import contextlib
import gc
import json
import os
import select
import signal
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
        sys.excepthook(*sys.exc_info())  # as the interpreter does: a hook the script set (the kit's) runs
        code = 1
    # The interpreter's shutdown: non-daemon threads first, then the exit handlers.
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def kill_tree(pid):
    """SIGKILL a child and its descendants, whatever their session (torchrun starts each worker in
    a session of its own): as a container's end takes every process in it. A descendant that is
    itself a fork client takes its own child along when its connection closes."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):  # gone meanwhile
                continue
    doomed, frontier = [pid], [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, its_parent in parents.items() if its_parent == parent]
        doomed += children
        frontier += children
    for victim in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)


def serve(path):
    """Single-threaded (a fork of a threaded process may inherit a held lock): accept, fork, and
    reap the ended children between accepts, until the process that started it is gone. A client
    gone before its child ended (killed: its connection reads end-of-file) takes the child and the
    child's descendants with it, as a killed container would (fork_client.py). A child's end wakes the loop (SIGCHLD, through
    a wake-up pipe), so its client ends with it, not a poll later: a client alive after its child
    ended is a job whose worker still runs, which the Vertex emulator may yet preempt."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    waiting = {}  # pid -> the connection that asked for it
    killed = set()  # children whose client went away
    ended, wake = os.pipe()
    os.set_blocking(wake, False)
    signal.set_wakeup_fd(wake)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    parent = os.getppid()
    while os.getppid() == parent:  # the test process gone (killed, say): so is the server
        watched = [connection for pid, connection in waiting.items() if pid not in killed]
        for ready in select.select([listener, ended, *watched], [], [], 0.05)[0]:
            if ready is ended:
                os.read(ended, 4096)  # a child ended: reaped below
                continue
            if ready is not listener:
                if not ready.recv(1):
                    pid = next(pid for pid, connection in waiting.items() if connection is ready)
                    kill_tree(pid)
                    killed.add(pid)
                continue
            connection, _ = listener.accept()
            message, descriptors, _, _ = socket.recv_fds(connection, 1 << 16, 2)
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                for descriptor in (ended, wake):
                    os.close(descriptor)
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
            killed.discard(pid)
            with waiting.pop(pid) as connection, contextlib.suppress(OSError):  # OSError: the client is gone
                connection.sendall(json.dumps({"returncode": returncode}).encode() + b"\n")


if __name__ == "__main__":
    serve(sys.argv[1])
