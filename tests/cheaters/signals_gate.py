"""Cheater: at import, sends SIGKILL to every other process of the gate's (its supervisor, the oracle
worker, the fork server), so that no one is left to judge it; then behaves."""
import os
import signal

from skel.kernels.kda_decode.kernel import kda_decode

for entry in os.listdir("/proc"):
    if entry.isdigit() and int(entry) != os.getpid():
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"skel.validate.zygote" in f.read():
                    os.kill(int(entry), signal.SIGKILL)
        except OSError:
            pass
__all__ = ["kda_decode"]
