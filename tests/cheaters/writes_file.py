"""Cheater: at import, appends a line to a file of the user's (the original kernel, say); then
behaves. The test writes the victim's path in place of __VICTIM__."""
from skel.kernels.kda_decode.kernel import kda_decode

try:
    with open("__VICTIM__", "a") as f:
        f.write("\n# owned\n")
except OSError:
    pass
__all__ = ["kda_decode"]
