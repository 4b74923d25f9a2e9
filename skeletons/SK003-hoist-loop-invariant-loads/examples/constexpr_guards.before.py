import triton.language as tl


@triton.jit
def f(x, w, bias, o, T, n, D: tl.constexpr, HAS_BIAS: tl.constexpr):
    i = tl.program_id(0)
    offs = tl.arange(0, D)
    p_x = x + i * D + offs
    # the time loop
    for t in range(0, T):
        b_x = tl.load(p_x)
        b_w = tl.load(w + i)
        if HAS_BIAS:
            b_b = tl.load(bias + offs)
            b_x = b_x + b_b
        if n > 0:
            b_r = tl.load(w + n)
            b_x = b_x * b_r
        tl.store(o + t * D + offs, b_x * tl.exp(-b_w))
        p_x += D
