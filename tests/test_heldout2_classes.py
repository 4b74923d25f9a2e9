"""Defects found by the second held-out set (benchmarks/mining_labels/heldout2.csv: unsloth, flag-gems,
nvidia-cutlass), each on a small kernel of our own written the way those packages write it. Static."""
from __future__ import annotations

from conftest import finding_kinds as kinds, mine_text as mine

from skel.miner.detect import evaluate
from skel.rewriter.base import SKIPPED, RewriteOptions
from skel.skeletons.library import load_library


RMS_TYPED_EPS = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rms_kernel(Y, X, stride, n_cols: tl.constexpr, eps: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < n_cols, other=0).to(tl.float32)
    var = tl.sum(x * x, axis=0) * (1.0 / n_cols)
    eps32 = tl.full((), eps, tl.float32)
    tl.store(Y + row * stride + cols, x * tl.math.rsqrt(var + eps32), mask=cols < n_cols)


@triton.jit
def div_kernel(Y, X, stride, n_cols: tl.constexpr, eps: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + cols, mask=cols < n_cols, other=0).to(tl.float32)
    tl.store(Y + row * stride + cols, x / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + tl.full((), eps, tl.float32)),
             mask=cols < n_cols)


@triton.jit
def vec_kernel(Y, X, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    x = tl.load(X + cols, mask=cols < n_cols, other=0).to(tl.float32)
    tl.store(Y + cols, x * tl.math.rsqrt(x + tl.full((BLOCK,), 1.0, tl.float32)), mask=cols < n_cols)
'''


def test_an_eps_made_by_tl_full_of_an_empty_shape_is_a_scalar():
    _, fs = mine(RMS_TYPED_EPS)
    assert kinds(fs, "rms_kernel", "SK001") == {"instance"}
    assert kinds(fs, "div_kernel", "SK001") == {"opportunity"}
    assert not kinds(fs, "vec_kernel", "SK001"), "tl.full of a block shape is a vector: no norm"


RNG_AND_ELEMENTWISE = '''
import torch
import triton
import triton.language as tl


@triton.jit(do_not_specialize=["seed", "offset"])
def rand_kernel(out_ptr, N, seed, offset, BLOCK: tl.constexpr):
    c0 = (offset & 0xFFFFFFFF).to(tl.uint32) + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    r0, _, _, _ = tl.philox(seed, c0, c0 * 0, c0 * 0, c0 * 0)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, r0, mask=offs < N)


@triton.jit
def add_kernel(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n_elements) + 1, mask=offs < n_elements)


@triton.jit(do_not_specialize=["out_w"])
def frame_kernel(x_ptr, y_ptr, total, out_w, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    col = offs % out_w
    tl.store(y_ptr + offs, tl.load(x_ptr + col, mask=offs < total), mask=offs < total)


def run(x, seed, offset):
    out = torch.empty_like(x)
    n = x.numel()
    rand_kernel[(triton.cdiv(n, 1024),)](out, n, seed, offset, BLOCK=1024)
    add_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
    frame_kernel[(triton.cdiv(n, 1024),)](x, out, n, x.shape[-1], BLOCK=1024)
    return out
'''


def test_do_not_specialize_of_a_seed_is_no_instance_and_leaves_the_size_an_opportunity():
    _, fs = mine(RNG_AND_ELEMENTWISE)
    assert kinds(fs, "rand_kernel", "SK008") == {"opportunity"}


def test_an_element_count_is_a_per_call_size():
    _, fs = mine(RNG_AND_ELEMENTWISE)
    assert kinds(fs, "add_kernel", "SK008") == {"opportunity"}


def test_do_not_specialize_of_an_index_divisor_is_an_instance():
    _, fs = mine(RNG_AND_ELEMENTWISE)
    assert "instance" in kinds(fs, "frame_kernel", "SK008")


GQA_OFFSET_NAMES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def attn_kernel(Q, K, O, H, G, S, D: tl.constexpr, BLOCK: tl.constexpr):
    start_m = tl.program_id(0)
    off_bh = tl.program_id(1)
    off_b = (off_bh // H).to(tl.int64)
    off_h = (off_bh % H).to(tl.int64)
    off_hk = off_h // G
    offs_m = start_m * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    q = tl.load(Q + ((off_b * H + off_h) * S + offs_m[:, None]) * D + offs_d[None, :], mask=offs_m[:, None] < S)
    k = tl.load(K + ((off_b * (H // G) + off_hk) * S + offs_m[:, None]) * D + offs_d[None, :], mask=offs_m[:, None] < S)
    tl.store(O + ((off_b * H + off_h) * S + offs_m[:, None]) * D + offs_d[None, :], q * k, mask=offs_m[:, None] < S)


def attn(q, k):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    attn_kernel[(triton.cdiv(S, 64), B * H)](q, k, o, H, H // k.shape[1], S, D=D, BLOCK=64)
    return o
'''


def test_a_head_index_named_off_h_divided_by_the_group_is_the_gqa_mapping():
    _, fs = mine(GQA_OFFSET_NAMES)
    assert kinds(fs, "attn_kernel", "SK010") == {"instance"}


HOST_FOLDED_ALIAS = '''
import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
_HALF = 0.5


@triton.jit
def softmax_kernel(X, Y, qk_scale, N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, N)
    s = tl.load(X + row * N + cols).to(tl.float32) * qk_scale
    p = tl.exp2(s - tl.max(s, 0))
    tl.store(Y + row * N + cols, p / tl.sum(p, 0))


@triton.jit
def base2_kernel(X, Y, scale, N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, N)
    tl.store(Y + row * N + cols, tl.exp2(tl.load(X + row * N + cols).to(tl.float32) * scale))


def softmax(x, scale):
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, scale * _LOG2E, N=x.shape[1])
    return y


def base2(x):
    y = torch.empty_like(x)
    base2_kernel[(x.shape[0],)](x, y, _HALF, N=x.shape[1])
    return y
'''


def test_a_module_constant_holding_log2e_is_a_log2e_factor_whatever_its_name():
    _, fs = mine(HOST_FOLDED_ALIAS)
    assert kinds(fs, "softmax_kernel", "SK004") == {"instance"}


def test_another_kernels_host_prescale_does_not_make_an_exp2_folded():
    _, fs = mine(HOST_FOLDED_ALIAS)
    assert not kinds(fs, "base2_kernel", "SK004"), "base2_kernel is launched with _HALF, not a log2(e) scale"


DEAD_WIDENING = '''
import torch
import triton
import triton.language as tl


@triton.jit
def up_kernel(ptr_o, ptr_i, N, C, OL, BLOCK: tl.constexpr, SMALL: tl.constexpr):
    if SMALL:
        pid = tl.program_id(axis=0)
    else:
        pid = tl.program_id(axis=0).to(tl.int64)
    nc = tl.program_id(axis=1)
    pid = tl.program_id(axis=0)
    ol = (pid * BLOCK + tl.arange(0, BLOCK)) % OL
    off = nc * OL + ol
    tl.store(ptr_o + off, tl.load(ptr_i + off))


def up(x, OL):
    N, C, _ = x.shape
    y = torch.empty((N, C, OL), device=x.device, dtype=x.dtype)
    up_kernel[(triton.cdiv(OL, 256), N * C)](y, x, N, C, OL, BLOCK=256, SMALL=False)
    return y
'''


def test_a_widening_overwritten_by_a_plain_program_id_is_no_widening():
    _, fs = mine(DEAD_WIDENING)
    assert kinds(fs, "up_kernel", "SK009") == {"opportunity"}


CUDA_POINTER_ADVANCE = '''
__global__ void pool_kernel(float* output, const float* input, const int N, const int H, const int W, const int C) {
  const int n_idx = blockIdx.x;
  input += n_idx * H * W * C;
  output += n_idx * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < H * W; i++) acc += input[i * C + c];
    output[c] = acc;
  }
}

__global__ void mean_kernel(float* output, const float* input, const int HW, const int C) {
  const int c_idx = blockIdx.x;
  const int n_idx = blockIdx.y;
  const size_t input_offset = n_idx * HW * C + c_idx;
  input += input_offset;
  float acc = 0.0f;
  for (int i = threadIdx.x; i < HW; i += blockDim.x) acc += input[i * C];
  if (threadIdx.x == 0) output[n_idx * C + c_idx] = acc;
}

__global__ void wide_kernel(float* output, const float* input, const int H, const int W, const int C) {
  const int64_t n_idx = blockIdx.x;
  input += n_idx * H * W * C;
  output[n_idx] = input[0];
}
'''


def test_a_pointer_advanced_by_a_program_id_times_sizes_is_an_int32_offset():
    _, fs = mine(CUDA_POINTER_ADVANCE, "cuda", "k.cu")
    assert kinds(fs, "pool_kernel", "SK009") == {"opportunity"}
    assert kinds(fs, "mean_kernel", "SK009") == {"opportunity"}, "the product is int32 before it lands in the size_t"
    assert "opportunity" not in kinds(fs, "wide_kernel", "SK009")


AUTOTUNE_ALIAS = '''
import triton
import triton.language as tl


def get_configs():
    return [triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128) for w in (4, 8)]


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


_tuned_copy_kernel = triton.autotune(configs=get_configs(), key=["n"])(copy_kernel)


@triton.jit
def plain_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def plain(x, y):
    plain_kernel[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)
'''


def test_a_kernel_wrapped_by_a_module_level_autotune_call_is_autotuned():
    _, fs = mine(AUTOTUNE_ALIAS)
    assert kinds(fs, "copy_kernel", "SK005") == {"instance"}
    assert kinds(fs, "plain_kernel", "SK005") == {"opportunity"}


LAUNCH_WRAPPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _row(Y, X, cols, mask):
    tl.store(Y + cols, tl.load(X + cols, mask=mask) * 2, mask=mask)


@triton.jit
def scale_kernel(Y, X, stride, n_cols: tl.constexpr, LONG: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    if LONG:
        row = row.to(tl.int64)
    cols = tl.arange(0, BLOCK)
    _row(Y + row * stride, X + row * stride, cols, cols < n_cols)


@triton.jit
def fill_kernel(Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, 1.0, mask=offs < n)


def _launch(kernel, grid, args, constexprs, **options):
    kernel[grid](*args, **constexprs, **options)


def scale(x):
    y = torch.empty_like(x)
    _launch(scale_kernel, (x.shape[0],), (y, x, x.stride(0)),
            dict(n_cols=x.shape[1], LONG=x.numel() > 2**31, BLOCK=1024), num_warps=4)
    return y


def fill(n):
    y = torch.zeros(n)
    _launch(fill_kernel, (triton.cdiv(n, 512),), (y, n), dict(BLOCK=512))
    return y
'''


def test_a_launch_through_a_same_file_wrapper_is_the_kernels_launch():
    profiles, fs = mine(LAUNCH_WRAPPER)
    prof = next(p for p in profiles if p.name == "scale_kernel")
    line = next(i for i, t in enumerate(LAUNCH_WRAPPER.splitlines(), 1) if t.strip().startswith("_launch(scale_kernel"))
    assert [s.line for s in prof.launches] == [line]
    assert dict(prof.launches[0].constexpr_values)["BLOCK"] == 1024 and prof.launches[0].num_warps == 4
    assert prof.launches[0].via == "wrapper _launch"
    # y = torch.zeros is only stored through (SK015) and BLOCK is a free tile (SK005), but both rewrites edit
    # direct kernel[grid](...) launches only: mining holds the opportunities back and says why, as apply would
    fill = next(p for p in profiles if p.name == "fill_kernel")
    for code in ("SK015", "SK005"):
        assert kinds(fs, "fill_kernel", code) == set(), code
        results = {r.id: r for r in evaluate(load_library().get(code), fill, LAUNCH_WRAPPER)}
        assert not results["launched-directly"].holds and "through wrapper _launch" in results["launched-directly"].detail
        others = [r for cid, r in results.items() if cid != "launched-directly"]
        assert all(r.holds for r in others), [(r.id, r.detail) for r in others if not r.holds]
        assert load_library().get(code).rule.rewrite.raw(LAUNCH_WRAPPER, RewriteOptions(kernel="fill_kernel"))[0].status \
            == SKIPPED, code


def test_a_widened_row_scaled_into_an_address_passed_to_a_helper_is_an_instance():
    _, fs = mine(LAUNCH_WRAPPER)
    assert kinds(fs, "scale_kernel", "SK009") == {"instance"}



ROW_LOOP_WIDENING = '''
import torch
import triton
import triton.language as tl


@triton.jit
def rows_kernel(Y, X, n_rows, rows_per_program, stride: tl.constexpr, LONG: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    row_start = pid * rows_per_program
    for i in range(row_start, tl.minimum(row_start + rows_per_program, n_rows)):
        row_idx = i
        if LONG:
            row_idx = i.to(tl.int64)
        tl.store(Y + row_idx * stride + cols, tl.load(X + row_idx * stride + cols))


def run(x, y):
    rows_kernel[(132,)](y, x, x.shape[0], triton.cdiv(x.shape[0], 132), stride=x.stride(0), LONG=True, BLOCK=1024)
'''


def test_a_row_index_from_the_programs_range_widened_before_the_stride_is_an_instance():
    _, fs = mine(ROW_LOOP_WIDENING)
    assert kinds(fs, "rows_kernel", "SK009") == {"instance"}


HELPER_STORES = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _write_row(dst, src, cols, mask):
    tl.store(dst + cols, tl.load(src + cols, mask=mask) * 2, mask=mask)


@triton.jit
def _add_row(dst, src, cols, mask):
    tl.store(dst + cols, tl.load(dst + cols, mask=mask) + tl.load(src + cols, mask=mask), mask=mask)


@triton.jit
def write_kernel(Y, X, stride, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    _write_row(Y + row * stride, X + row * stride, cols, cols < n_cols)


@triton.jit
def add_kernel(Y, X, stride, n_cols: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    _add_row(Y + row * stride, X + row * stride, cols, cols < n_cols)


def run(x):
    y = torch.empty_like(x)
    write_kernel[(x.shape[0],)](y, x, x.stride(0), n_cols=x.shape[1], BLOCK=1024)
    z = torch.empty_like(x)
    add_kernel[(x.shape[0],)](z, x, x.stride(0), n_cols=x.shape[1], BLOCK=1024)
    return y, z


def run_zeros(x):
    y = torch.zeros_like(x)
    write_kernel[(x.shape[0],)](y, x, x.stride(0), n_cols=x.shape[1], BLOCK=1024)
    return y
'''


def test_a_store_through_a_pointer_handed_to_a_helper_is_the_kernels_store():
    _, fs = mine(HELPER_STORES)
    assert kinds(fs, "write_kernel", "SK015") == {"instance"}
    assert not kinds(fs, "add_kernel", "SK015"), "the helper reads the buffer: not an output the kernel only writes"


def test_a_helpers_docstring_with_text_in_column_0_does_not_hide_its_accesses():
    """The helper is read from its own lines: a docstring line at column 0 is not the end of its body."""
    text = HELPER_STORES
    for helper in ("_write_row", "_add_row"):
        head = f"def {helper}(dst, src, cols, mask):\n"
        text = text.replace(head, head + '    """One row.\nText at column 0.\n    """\n')
    assert text.count("\nText at column 0.") == 2
    _, fs = mine(text)
    assert kinds(fs, "write_kernel", "SK015") == {"instance"}, "the helper's store is still the kernel's"
    assert not kinds(fs, "add_kernel", "SK015"), "the helper still reads the buffer"


def test_a_helper_stored_zero_fill_is_no_opportunity_while_the_rewrite_cannot_check_helpers():
    _, fs = mine(HELPER_STORES)
    zero = [f for f in fs if f.kernel == "write_kernel" and f.skeleton == "SK015" and f.kind == "opportunity"]
    assert not zero
