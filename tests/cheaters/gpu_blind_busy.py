"""GPU cheater: honest numbers and honest timing of itself, but after each of its timing samples it
leaves a burst of matmuls queued on a side stream, to run while the original is timed (and make the
original look slow), with the worker's own check blinded."""
import gc

import torch

from skel.kernels.kda_decode.kernel import kda_decode

_sync = torch.cuda.Event.synchronize
_side = []


def _sync_then_load(self):
    _sync(self)
    if not _side:
        _side.append((torch.cuda.Stream(), torch.randn(4096, 4096, device="cuda")))
    stream, a = _side[0]
    with torch.cuda.stream(stream):
        for _ in range(40):  # ~5-10 ms of work the sample does not wait for
            a = (a @ a).clamp_(-1, 1)


torch.cuda.Event.synchronize = _sync_then_load


def _blind():
    from skel.validate import conduct

    for obj in gc.get_objects():
        if isinstance(obj, conduct.Watch):
            obj.baseline = conduct.snapshot()


_blind()
__all__ = ["kda_decode"]
