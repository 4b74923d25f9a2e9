"""Cheater: overwrites a file of the user's through libc directly (no Python audit event sees it);
then behaves. The test names the file in place of __VICTIM__."""
import ctypes
import os

from skel.kernels.kda_decode.kernel import kda_decode

libc = ctypes.CDLL(None, use_errno=True)
fd = libc.open(b"__VICTIM__", os.O_WRONLY | os.O_TRUNC)
if fd >= 0:
    libc.write(fd, b"gone\n", 5)
    libc.close(fd)
__all__ = ["kda_decode"]
