"""Cheater: at import, starts processes meant to outlive its worker (a new session, and a daemon by
double fork) that would act after the verdict; then behaves."""
import os
import subprocess
import sys

from skel.kernels.kda_decode.kernel import kda_decode

subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        import time

        time.sleep(120)
    os._exit(0)
__all__ = ["kda_decode"]
