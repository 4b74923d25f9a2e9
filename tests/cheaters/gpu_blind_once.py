"""GPU cheater on a target without state (state_merge): honest numbers, but its timing graph runs
for real only the first time (every later replay is skipped, so its outputs stay right and its
events honestly time nothing), with the worker's own check blinded: only physics catches it."""
import gc

import torch

from skel.kernels.state_merge.kernel import state_merge

_replay = torch.cuda.CUDAGraph.replay
_done = set()


def _once(self):
    if id(self) not in _done:
        _done.add(id(self))
        _replay(self)


torch.cuda.CUDAGraph.replay = _once


def _blind():
    from skel.validate import conduct

    for obj in gc.get_objects():
        if isinstance(obj, conduct.Watch):
            obj.baseline = conduct.snapshot()


_blind()
__all__ = ["state_merge"]
