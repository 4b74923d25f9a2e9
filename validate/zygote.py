"""The gate's fork server and each worker's supervisor.

``python -m skel.validate.zygote FD`` is started once per judging process: it imports torch (no
CUDA context) and waits on the socket FD, an anonymous socket pair only the judge holds (nothing
in the filesystem a worker could connect to). For each worker the judge sends the worker's
configuration with two sockets attached (the worker's channel and a status socket); the zygote
forks a **supervisor**, which becomes a child subreaper and forks the **worker** proper. The worker
contains itself (``sandbox.contain``) and serves the judge over its channel; the supervisor never
runs kernel code: it waits for the worker, then kills every process the worker left behind (they
are re-parented to it) and reports the worker's exit status and those survivors on the status
socket. The zygote exits when the judge goes away; supervisors die with the zygote and workers
with their supervisor.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import time


def main(fd: int) -> None:
    from skel.validate import channel

    from skel.validate import sandbox

    sock = socket.socket(fileno=fd)
    sandbox.prctl(sandbox.PR_SET_DUMPABLE, 0)  # no same-uid process may read or ptrace the fork server
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # supervisors are reaped by the kernel
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C goes to the judge, which stops us by closing the socket
    import torch  # noqa: F401  (preloaded: each worker costs a fork, not an interpreter start)

    import skel.validate.worker  # noqa: F401

    channel.send(sock, {"ready": True, "pid": os.getpid()})
    while True:
        try:
            message, fds = channel.receive(sock, accept_fds=True)
        except (channel.ChannelClosed, OSError):
            os._exit(0)
        if message.get("op") != "fork" or len(fds) != 2:
            for extra in fds:
                os.close(extra)
            channel.send(sock, {"error": "expected a fork request with two sockets"})
            continue
        pid = os.fork()
        if pid == 0:
            sock.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            supervise(message["config"], fds[0], fds[1])
        for extra in fds:
            os.close(extra)
        channel.send(sock, {"pid": pid})


def supervise(config: dict, chan_fd: int, status_fd: int) -> None:
    """The supervisor: fork the worker, wait for it, kill what it left, report. Never returns."""
    from skel.validate import channel, sandbox

    status = socket.socket(fileno=status_fd)
    sandbox.die_with_parent(signal.SIGTERM)
    sandbox.become_subreaper()
    child = os.fork()
    if child == 0:
        status.close()
        from skel.validate.worker import run

        try:
            run(config, chan_fd)
        finally:
            os._exit(0)
    os.close(chan_fd)

    def stop(_signum, _frame):  # the zygote died (judge gone): take the worker and its descendants along
        try:
            os.killpg(child, signal.SIGKILL)
        except OSError:
            pass
        sandbox.kill_descendants()
        os._exit(0)

    signal.signal(signal.SIGTERM, stop)
    channel.send(status, {"worker": child})
    _, wait_status = os.waitpid(child, 0)
    survivors = _survivors(grace=float(config.get("grace_s", 1.0)))
    report = {"exit": os.waitstatus_to_exitcode(wait_status), "survivors": survivors}
    try:
        channel.send(status, report)
    except OSError:
        pass
    os._exit(0)


def _survivors(grace: float) -> list[str]:
    """Processes the worker left running that do not end on their own within ``grace`` seconds, killed."""
    from skel.validate import sandbox

    deadline = time.monotonic() + grace
    while sandbox.children(os.getpid()) and time.monotonic() < deadline:
        sandbox._reap()
        time.sleep(0.02)
    sandbox._reap()
    return sandbox.kill_descendants()


if __name__ == "__main__":
    main(int(sys.argv[1]))
