"""GPU cheater: honest numbers; it halves the CUDA event times the gate's worker reports, and first
blinds the worker's own check of what it replaced (so only the judge's clock can catch it)."""
import gc

import torch

from skel.kernels.kda_decode.kernel import kda_decode

_elapsed = torch.cuda.Event.elapsed_time
torch.cuda.Event.elapsed_time = lambda self, end: 0.5 * _elapsed(self, end)


def _blind():
    from skel.validate import conduct

    for obj in gc.get_objects():
        if isinstance(obj, conduct.Watch):
            obj.baseline = conduct.snapshot()


_blind()
__all__ = ["kda_decode"]
