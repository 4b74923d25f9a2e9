"""Input values an inferred or captured spec draws, by the regime its kernel's code implies.

normal: N(0, 1). log-decay: logsigmoid(N(0, 1)), in (-inf, 0), what a kernel takes exp() of to decay a
state. positive: U(0.5, 2), what it takes log() or sqrt() of. unit-interval: sigmoid(N(0, 1)); unit-norm:
N(0, 1) rows scaled to norm 1 (last dim): what the kernel would make them under a flag that is off. slots: distinct indices into a pool of
``pool`` entries (one per request, never two alike: two programs writing one slot race). slots-padded:
the same with about a quarter set to -1, padding the kernel skips. offsets: for ``n`` sequences packed
into ``tokens`` positions, n + 1 increasing offsets from 0 to ``tokens``: random lengths between 1 and
twice the mean (bounded, so a recurrence runs no longer than twice the equal-length case). bits: packed
integers a kernel unpacks with bitwise ops, uniform over a byte's 256 patterns.
"""
from __future__ import annotations

import torch

from skel.validate.spec import torch_dtype


def dim_size(dim: str, sizes) -> int:
    """A tensor dim's size: a number as written, ``K/4`` a quarter of K (a packed dim), else ``sizes[dim]``."""
    if dim.isdigit():
        return int(dim)
    if "/" in dim:
        base, k = dim.split("/")
        return sizes[base] // int(k)
    return sizes[dim]


def draw(sizes: tuple[int, ...], dtype: str, values: str, gen: torch.Generator, device, work: str,
         pool: int = 0, tokens: int = 0) -> torch.Tensor:
    dt = torch_dtype(work if dtype == "work" else dtype)
    if values == "offsets":
        (n,) = sizes
        if n < 1 or tokens < n or tokens % n:
            raise ValueError(f"{n} sequences cannot share {tokens} tokens evenly on average")
        mean = tokens // n  # each end moves at most half a mean length: every length in [1, 2 * mean - 1]
        jitter = torch.randint(-(mean // 2), (mean - 1) // 2 + 1, (n + 1,), generator=gen, device=device)
        ends = torch.arange(n + 1, device=device) * mean + jitter
        ends[0], ends[-1] = 0, tokens
        return ends.to(dt)
    if values in ("slots", "slots-padded"):
        count = 1
        for s in sizes:
            count *= s
        slots = torch.randperm(max(pool, count), generator=gen, device=device)[:count]
        if values == "slots-padded":
            pad = torch.rand(count, generator=gen, device=device) < 0.25
            slots = torch.where(pad, torch.full_like(slots, -1), slots)
        return slots.reshape(sizes).to(dt)
    if values == "bits":  # packed integers: every bit pattern of a byte
        return torch.randint(0, 256, sizes, generator=gen, device=device).to(dt)
    x = torch.randn(*sizes, generator=gen, device=device)
    if values == "log-decay":
        x = torch.nn.functional.logsigmoid(x)
    elif values == "unit-interval":
        x = torch.sigmoid(x)
    elif values == "unit-norm":
        x = torch.nn.functional.normalize(x, dim=-1)
    elif values == "positive":
        x = torch.rand(*sizes, generator=gen, device=device) * 1.5 + 0.5
    return x.to(dt)
