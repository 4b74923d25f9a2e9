"""Cheater: honest numbers, but the GPU timer and graph replay it would be timed with are replaced:
elapsed times are halved and every other replay is skipped."""
import torch

from skel.kernels.kda_decode.kernel import kda_decode

_elapsed = torch.cuda.Event.elapsed_time
_replay = torch.cuda.CUDAGraph.replay
_count = [0]


def _fast_elapsed(self, end):
    return 0.5 * _elapsed(self, end)


def _half_replay(self):
    _count[0] += 1
    if _count[0] % 2:
        _replay(self)


torch.cuda.Event.elapsed_time = _fast_elapsed
torch.cuda.CUDAGraph.replay = _half_replay
__all__ = ["kda_decode"]
