"""Child processes that die with their parent.

A worker that outlives the process that started it (``kill -9`` of ``skel mine``) waits
forever on a queue nobody writes, holding whatever it inherited (the catalog's file and its
deleted WAL). ``die_with_parent(parent_pid)`` is called first thing in such a child (a pool
initializer, a ``preexec_fn``, or the child's own start-up):

- Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so the kernel kills the child when its parent
  goes. A parent that died between the fork and the ``prctl`` has already handed the child to
  init (or a subreaper), so the parent's pid is checked right after, which closes that race.
  The signal follows the parent *thread* that forked: fork from a thread that lives as long as
  the children do (``skel mine`` forks its pool from the thread that waits for it).
- elsewhere: a daemon thread polls ``os.getppid()`` and exits the process when it changes.

Children that ``exec`` keep ``PDEATHSIG`` (the kernel clears it only for set-user-ID programs).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
POLL_S = 0.5
PARENT_ENV = "SKEL_PARENT_PID"  # a skel child started by skel: its CLI calls die_with_parent(pid)


def die_with_parent(parent_pid: int | None = None) -> None:
    """Arrange for this process to be killed when ``parent_pid`` (default: the current parent) exits.

    Exits at once (status 1) when the parent is already gone.
    """
    expected = parent_pid if parent_pid is not None else os.getppid()
    if not (sys.platform.startswith("linux") and _pdeathsig(signal.SIGKILL)):
        _watch(expected)
    if os.getppid() != expected:  # the parent died before the arrangement took effect
        os._exit(1)


def die_with_parent_from_env() -> None:
    """In a skel process started by another skel process (``SKEL_PARENT_PID`` set): die with it.

    The variable is removed so that processes this one starts do not inherit a pid that is
    not their parent's.
    """
    raw = os.environ.pop(PARENT_ENV, "")
    if raw.strip().isdigit():
        die_with_parent(int(raw))


def child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """An environment for a skel child process that should die with this one."""
    out = dict(os.environ if env is None else env)
    out[PARENT_ENV] = str(os.getpid())
    return out


def _pdeathsig(sig: int) -> bool:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc symbol (musl without prctl?): fall back to polling
        return False


def _watch(expected: int) -> None:
    def poll() -> None:
        while True:
            if os.getppid() != expected:
                os._exit(1)
            time.sleep(POLL_S)

    threading.Thread(target=poll, name="skel-die-with-parent", daemon=True).start()
