import triton
import triton.language as tl


@triton.jit
def norm(x_ptr, y_ptr, s, D: tl.constexpr):
    offs = tl.arange(0, D)
    # load a row
    x = tl.load(x_ptr + offs).to(tl.float32)
    x = x * (tl.rsqrt(tl.sum(x * x, axis=0) + 1e-6) * s)
    r = tl.rsqrt(tl.sum(x * x))
    y = x/tl.sqrt(x + 1.0)
    tl.store(y_ptr + offs, x * r + y)
