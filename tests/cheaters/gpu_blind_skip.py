"""GPU cheater: honest numbers; it replays its timing graph only every other time it is asked (half
the work, timed honestly), with the worker's own check blinded: what the timed calls left shows it."""
import gc

import torch

from skel.kernels.kda_decode.kernel import kda_decode

_replay = torch.cuda.CUDAGraph.replay
_count = [0]


def _half(self):
    _count[0] += 1
    if _count[0] % 2:
        _replay(self)


torch.cuda.CUDAGraph.replay = _half


def _blind():
    from skel.validate import conduct

    for obj in gc.get_objects():
        if isinstance(obj, conduct.Watch):
            obj.baseline = conduct.snapshot()


_blind()
__all__ = ["kda_decode"]
