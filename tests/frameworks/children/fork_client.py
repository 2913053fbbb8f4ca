# `python fork_client.py SOCKET SCRIPT [ARG ...]`: what `python SCRIPT [ARG ...]` does, with the
# script run by the fork server listening on SOCKET (fork_server.py, which has the frameworks
# imported) in a child that gets this process's environment, folder, stdout and stderr. For a
# command another program starts, signals and waits for (the Vertex emulator's job command): a
# SIGTERM or SIGINT sent here goes on to the child, this process ends when the child does, with its
# exit status, and if this process is killed the server kills the child. Standard library only.
import json
import os
import signal
import socket
import sys


def main(path, argv):
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
    socket.send_fds(connection, [json.dumps(request).encode()], [sys.stdout.fileno(), sys.stderr.fileno()])
    answers = connection.makefile("r")
    pid = int(json.loads(answers.readline())["pid"])
    for forwarded in (signal.SIGTERM, signal.SIGINT):
        signal.signal(forwarded, lambda signum, frame: os.kill(pid, signum))
    returncode = int(json.loads(answers.readline())["returncode"])
    if returncode < 0:  # killed by a signal: end the same way
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    sys.exit(returncode)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
