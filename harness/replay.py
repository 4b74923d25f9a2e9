"""Inputs for a captured spec: the recorded calls replayed, and scaled along their batch dim.

A spec ``skel capture`` writes lists its calls as ``ReplayCall`` values and asks a ``Replay`` for the
launcher's keyword arguments at a shape ``call<i>`` (the recorded batch) or ``call<i>-N<n>`` (batch n):

- seed 0: the tensors exactly as the call received them (read from its safetensors file), each on the
  device with its recorded strides; other seeds: every float tensor's elements drawn afresh from its own
  recorded values (the same distribution, range and sign; a new arrangement); integer and bool tensors
  are kept exactly (slot indices, lengths, masks carry structure).
- batch n other than the recorded one: the tensors in ``batched`` take n rows along dim 0 (the recorded
  rows cycled: row i is recorded row i % batch), the plain arguments in ``batched`` become n, all else is
  kept. A scaled tensor keeps its recorded dim order, densely packed.

Needs only torch, safetensors and skel: the user's package is not imported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from skel.validate.spec import Shape, generator, torch_dtype


@dataclass(frozen=True)
class ReplayCall:
    """One recorded call of the launcher, as the spec replays it.

    tensors: name -> (shape, dtype) of each tensor argument as recorded; strides: the recorded strides of
    those that were not contiguous; plain: the other arguments as passed; args: the order they were passed
    in. batch: the recorded batch size (None: the call has no batch dim); batched: the tensors (dim 0) and
    plain ints that are that batch. inplace: the tensors the call changed; outputs: name -> (shape, dtype)
    of the fresh tensors it returned (for the roofline).
    """

    file: str
    args: tuple[str, ...]
    tensors: Mapping[str, tuple[tuple[int, ...], str]]
    plain: Mapping[str, Any] = field(default_factory=dict)
    strides: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    batch: int | None = None
    batched: tuple[str, ...] = ()
    inplace: tuple[str, ...] = ()
    outputs: Mapping[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)

    def shape_of(self, name: str, n: int | None) -> tuple[int, ...]:
        shape = tuple(self.tensors[name][0])
        return (n, *shape[1:]) if n is not None and name in self.batched and shape else shape

    def output_shape(self, name: str, n: int | None) -> tuple[int, ...]:
        shape = tuple(self.outputs[name][0])
        scaled = n is not None and bool(self.batched) and bool(shape) and shape[0] == self.batch
        return (n, *shape[1:]) if scaled else shape


class Replay:
    """The recorded calls of one launcher (by index) in ``folder``; tensors read once and kept on the CPU."""

    def __init__(self, folder: Path, calls: Mapping[int, ReplayCall], dtype: str):
        self.folder, self.calls, self.dtype = Path(folder), dict(calls), dtype
        self._loaded: dict[str, dict[str, torch.Tensor]] = {}

    def call(self, shape: Shape) -> tuple[ReplayCall, int | None]:
        call = self.calls[shape["call"]]
        n = shape.get("N", call.batch)
        if n != call.batch and not call.batched:
            raise ValueError(f"shape {shape.label}: call{shape['call']} has no batch dim to scale")
        return call, (None if n == call.batch else n)

    def inputs(self, shape: Shape, dtype: str, seed: int, device: Any) -> dict[str, Any]:
        if dtype != self.dtype:
            raise ValueError(f"captured inputs are {self.dtype}; asked for {dtype}")
        call, n = self.call(shape)
        recorded = self._tensors(call.file)
        gen = generator(shape, seed, "cpu")
        out: dict[str, Any] = {}
        for name in call.args:
            if name not in call.tensors:
                value = call.plain[name]
                out[name] = n if n is not None and name in call.batched else value
                continue
            data = recorded[name]
            if n is not None and name in call.batched:
                data = data[torch.arange(n) % data.shape[0]]
            if seed != 0 and data.is_floating_point() and data.numel():
                flat = data.reshape(-1)
                data = flat[torch.randint(0, flat.numel(), data.shape, generator=gen)]
            out[name] = _placed(data, call.shape_of(name, n), call.strides.get(name) if n is None else None,
                                call.strides.get(name), device)
        return out

    def bytes(self, shape: Shape) -> int:
        """What the call must move at least: every tensor input read once, the fresh outputs and the
        in-place inputs written once."""
        call, n = self.call(shape)

        def size(shape_: tuple[int, ...], dtype: str) -> int:
            count = 1
            for s in shape_:
                count *= s
            return count * torch_dtype(dtype).itemsize

        read = sum(size(call.shape_of(t, n), dt) for t, (_, dt) in call.tensors.items())
        written = sum(size(call.shape_of(t, n), call.tensors[t][1]) for t in call.inplace)
        written += sum(size(call.output_shape(o, n), dt) for o, (_, dt) in call.outputs.items())
        return read + written

    def _tensors(self, file: str) -> dict[str, torch.Tensor]:
        if file not in self._loaded:
            from safetensors.torch import load_file

            self._loaded[file] = load_file(str(self.folder / file))
        return self._loaded[file]


def _placed(data: torch.Tensor, shape: tuple[int, ...], stride: tuple[int, ...] | None,
            recorded_stride: tuple[int, ...] | None, device: Any) -> torch.Tensor:
    """``data`` (the tensor's values, broadcast dims stored once) on ``device`` as a tensor of ``shape``:
    with ``stride`` when given (the recorded layout), else dense in the recorded dim order."""
    if stride is not None:
        base = torch.empty_strided(tuple(data.shape), stride, dtype=data.dtype, device=device)
        base.copy_(data)
        return base.as_strided(shape, stride)
    data = data.expand(shape) if tuple(data.shape) != shape else data
    if recorded_stride is None:
        return data.to(device).contiguous()
    order = sorted(range(len(shape)), key=lambda d: -recorded_stride[d])  # outermost dim first
    dense = torch.empty([shape[d] for d in order], dtype=data.dtype, device=device)
    out = dense.permute([order.index(d) for d in range(len(shape))])
    out.copy_(data)
    return out
