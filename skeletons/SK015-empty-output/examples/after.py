"""SK015 before: the output is zero-filled on the host, then overwritten by the kernel."""
import torch
import triton
import triton.language as tl


@triton.jit
def scale_rows_kernel(x, w, o, D: tl.constexpr, BD: tl.constexpr):
    i = tl.program_id(0)
    r = tl.arange(0, BD)
    m = r < D
    b_x = tl.load(x + i * D + r, mask=m, other=0.0)
    b_w = tl.load(w + r, mask=m, other=0.0)
    tl.store(o + i * D + r, b_x * b_w * tl.rsqrt(tl.sum(b_x * b_x) / D + 1e-6), mask=m)


def launch(x, w):
    N, D = x.shape
    o = torch.empty_like(x)
    scale_rows_kernel[(N,)](x, w, o, D=D, BD=triton.next_power_of_2(D))
    return o


def example_inputs(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(5, 24, generator=gen), torch.randn(24, generator=gen)
