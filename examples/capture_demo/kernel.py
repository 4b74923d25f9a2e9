"""A decode-style recurrent step, the kind of kernel a model calls once per layer and token.

Per (batch row, head): the state s [D] decays towards the token's x by a sigmoid gate, is written back
in place, and the output is the new state RMS-normalised:

    a = sigmoid(g);  s <- a * s + (1 - a) * x;  o = s / sqrt(mean(s^2) + eps)

x, o [B, H, D]; g [B, H]; state [B, H, D] float32, updated in place.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _decay_step_kernel(x_ptr, g_ptr, state_ptr, o_ptr, eps, D: tl.constexpr, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)  # one program per (batch row, head)
    offs = tl.arange(0, BLOCK_D)
    mask = offs < D
    x = tl.load(x_ptr + row * D + offs, mask=mask, other=0.0).to(tl.float32)
    a = tl.sigmoid(tl.load(g_ptr + row).to(tl.float32))
    s = tl.load(state_ptr + row * D + offs, mask=mask, other=0.0)
    s = a * s + (1 - a) * x
    tl.store(state_ptr + row * D + offs, s, mask=mask)
    o = s / tl.sqrt(tl.sum(s * s, axis=0) / D + eps)
    tl.store(o_ptr + row * D + offs, o.to(o_ptr.dtype.element_ty), mask=mask)


def decay_step(x: torch.Tensor, g: torch.Tensor, state: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """One token: returns o [B, H, D]; ``state`` [B, H, D] (float32) is updated in place."""
    B, H, D = x.shape
    o = torch.empty_like(x)
    _decay_step_kernel[(B * H,)](x, g, state, o, eps, D=D, BLOCK_D=triton.next_power_of_2(D))
    return o
