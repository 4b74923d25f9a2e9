"""``map_parts(work, items, parts)``: one file's kernels shared with forked children.

A file of thousands of kernels is one job, and with one job the other cores are idle. Once the
file is parsed (the part that cannot be shared), its kernels are cut into ``parts`` contiguous
slices: this process works on the first, a forked child on each other one. A child inherits the
parsed file (copy-on-write, nothing is sent to it) and sends back only its result, pickled
through a pipe; ``work(slice)`` must therefore depend on its slice and inherited state only.

A child that fails for any reason (killed, out of memory, an exception, a result that does not
pickle) has its slice done again here, so the answer is always ``[work(s) for s in slices]``,
exceptions included. Children die with this process (``skel.procs.die_with_parent``) and never
run this process's exit handlers (``os._exit``). Only a single-threaded process forks.
"""
from __future__ import annotations

import os
import pickle
import signal
import threading
from typing import Callable, Sequence, TypeVar

from skel.procs import die_with_parent

T = TypeVar("T")
R = TypeVar("R")


def slices(items: Sequence[T], parts: int) -> list[Sequence[T]]:
    """``items`` cut into ``parts`` contiguous slices of nearly equal length, in order."""
    n = len(items)
    return [items[n * k // parts: n * (k + 1) // parts] for k in range(parts)]


def map_parts(work: Callable[[Sequence[T]], R], items: Sequence[T], parts: int) -> list[R]:
    """``[work(s) for s in slices(items, parts)]``, all slices but the first in forked children."""
    # Another thread may hold a lock at the fork (the import lock, a logger's) that the child then
    # waits on forever: a process with threads (the MCP server) does its work itself.
    cut = slices(items, max(1, parts))
    if len(cut) == 1 or not hasattr(os, "fork") or threading.active_count() > 1:
        return [work(part) for part in cut]
    children: list[tuple[int, int]] = []
    try:
        for part in cut[1:]:
            children.append(_start(work, part))
        results = [work(cut[0])]
        while children:
            got = _collect(*children.pop(0))
            results.append(got[0] if got else work(cut[len(results)]))
        return results
    finally:
        for pid, fd in children:  # this process failed first: stop the children still running
            _stop(pid, fd)


def _start(work: Callable[[Sequence[T]], R], part: Sequence[T]) -> tuple[int, int]:
    parent = os.getpid()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 1
        try:
            os.close(read_fd)
            die_with_parent(parent)
            payload = pickle.dumps(work(part), protocol=pickle.HIGHEST_PROTOCOL)
            with os.fdopen(write_fd, "wb") as out:
                out.write(payload)
            status = 0
        except BaseException:  # the parent does this slice itself
            pass
        os._exit(status)
    os.close(write_fd)
    return pid, read_fd


def _collect(pid: int, fd: int) -> tuple[R] | None:
    """(the child's result,) or None when it failed; the child is reaped whatever happens."""
    payload, code = b"", 1
    try:
        with os.fdopen(fd, "rb") as src:
            payload = src.read()
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        pid = 0
    finally:
        if pid:  # interrupted while reading
            _stop(pid)
    if code != 0 or not payload:
        return None
    try:
        return (pickle.loads(payload),)
    except Exception:
        return None


def _stop(pid: int, fd: int | None = None) -> None:
    if fd is not None:
        os.close(fd)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
