"""Cheater: at import, renames a file of the user's (the test names it in place of __VICTIM__); then behaves."""
import os

from skel.kernels.kda_decode.kernel import kda_decode

try:
    os.rename("__VICTIM__", "__VICTIM__.gone")
except OSError:
    pass
__all__ = ["kda_decode"]
