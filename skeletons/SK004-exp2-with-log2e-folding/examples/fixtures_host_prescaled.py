"""SK004 fixture: log2(e) folded upstream, by the host code that prepares the gate.

Kept in its own file because the evidence is file-level (host code that pre-scales a tensor
by log2(e) before the launch). Profiled statically, never run.
"""
import torch
import triton
import triton.language as tl

RCP_LN2 = 1.4426950216


@triton.jit
def decay_with_prescaled_gate(x, g, y, T, D: tl.constexpr):
    i = tl.program_id(0)
    o = tl.arange(0, D)
    b_h = tl.zeros([D], dtype=tl.float32)
    for t in range(0, T):
        b_g = tl.load(g + (i * T + t) * D + o).to(tl.float32)
        # skel: SK004 instance
        b_h = b_h * tl.exp2(b_g) + tl.load(x + (i * T + t) * D + o)
        tl.store(y + (i * T + t) * D + o, b_h)


def decay(x, g):
    N, T, D = x.shape
    y = torch.empty_like(x)
    g = torch.nn.functional.logsigmoid(g) * RCP_LN2
    decay_with_prescaled_gate[(N,)](x, g, y, T, D=D)
    return y
