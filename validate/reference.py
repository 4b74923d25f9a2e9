"""A reference implementation from the target's own project, named by path in a spec
(``cross_reference=ProjectReference(...)``): loaded lazily, in the oracle worker only, on first call;
run on float64 copies of the judged inputs as a second oracle beside the original (``judge``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

_LOADED: dict[tuple[str, str], Any] = {}


@dataclass(frozen=True)
class ProjectReference:
    path: str
    name: str
    label: str = ""

    def __call__(self, **inputs: Any) -> Any:
        key = (self.path, self.name)
        if key not in _LOADED:
            from skel.validate.load import load_module

            _LOADED[key] = getattr(load_module(self.path, "reference"), self.name)
        return _LOADED[key](**inputs)


def float64(inputs: dict[str, Any]) -> dict[str, Any]:
    """A copy with every floating tensor in float64 (the reference's inputs)."""
    import torch

    return {k: (v.detach().to(torch.float64) if v.is_floating_point() else v.clone())
            if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def named_outputs(result: Any, outputs: tuple[str, ...]) -> dict[str, Any]:
    """The reference's return value by the launcher's output names: a dict by key, a tuple by position,
    a bare tensor as the first output; None and passed-over names dropped."""
    import torch

    if isinstance(result, dict):
        pairs = result.items()
    elif isinstance(result, (tuple, list)):
        pairs = zip(outputs, result)
    else:
        pairs = zip(outputs[:1], (result,))
    return {k: v for k, v in pairs if isinstance(v, torch.Tensor) and not k.startswith("_")}
