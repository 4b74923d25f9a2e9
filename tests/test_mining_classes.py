"""The error classes of issue 18, each on a small kernel written the way real packages write it
(the real-file checks are in test_mining_eval.py): helpers count for their callers, kernels made by
``triton.jit(...)(fn)``, autotune configs and ``do_not_specialize`` lists through names, launch
``**kwargs``, parameter roles from use, and the bit-exact caveat. Static: nothing is run."""
from __future__ import annotations

from skel.miner.mine import analyze


def mine(text: str, language: str = "triton", path: str = "k.py"):
    profiles, findings, err = analyze(path, text, language)
    assert err is None, err
    return profiles, findings


def of(findings, kernel: str, code: str) -> list:
    return [f for f in findings if f.kernel == kernel and f.skeleton == code]


NORM_HELPER = '''
import torch
import triton
import triton.language as tl


@triton.jit
def _l2norm(x):
    x = x.to(tl.float32)
    return x / tl.sqrt(tl.sum(x * x) + 1e-6)


@triton.jit
def norm_kernel(x_ptr, y_ptr, D: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x = tl.load(x_ptr + row * D + tl.arange(0, D)).to(tl.float32)
    tl.store(y_ptr + row * D + tl.arange(0, D), _l2norm(x))


def norm(x):
    y = torch.empty_like(x)
    norm_kernel[(x.shape[0],)](x, y, D=x.shape[1])
    return y
'''


def test_a_jit_helpers_finding_counts_for_its_caller_at_the_call_site():
    _, fs = mine(NORM_HELPER)
    mine_ = of(fs, "norm_kernel", "SK001")
    assert [(f.kind, f.line) for f in mine_] == [("opportunity", 17)]
    assert dict(mine_[0].params)["via"] == "_l2norm" and dict(mine_[0].params)["helper_line"] == 10
    assert of(fs, "_l2norm", "SK001"), "the helper keeps its own finding"


def test_kernel_level_rules_do_not_judge_a_helper():
    _, fs = mine(NORM_HELPER)
    helper = {f.skeleton for f in fs if f.kernel == "_l2norm"}
    assert not helper & {"SK002", "SK005", "SK006", "SK008", "SK009", "SK010", "SK011", "SK012", "SK015"}


CUDA_HELPER = '''
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += math::shfl_xor_sync(v, o);
  return v;
}

__global__ void row_sum(const float* x, float* y, int n) {
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += 32) acc += x[blockIdx.x * n + i];
  acc = warp_sum(acc);
  if (threadIdx.x == 0) y[blockIdx.x] = acc;
}
'''


def test_a_device_helpers_shuffle_through_a_wrapper_counts_for_the_kernel():
    profiles, fs = mine(CUDA_HELPER, "cuda", "k.cu")
    assert [(p.name, p.kind) for p in profiles] == [("warp_sum", "device-function"), ("row_sum", "kernel")]
    sk013 = of(fs, "row_sum", "SK013")
    assert [(f.kind, f.line) for f in sk013] == [("instance", 10)] and dict(sk013[0].params)["via"] == "warp_sum"


ALIAS = '''
import triton
import triton.language as tl

_SIZES = ["T"]


def _copy(x_ptr, y_ptr, T, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < T), mask=offs < T)


copy_kernel = triton.jit(do_not_specialize=_SIZES + ["BLOCK"])(_copy)
plain_kernel = triton.jit(_copy)
'''


def test_kernels_made_by_calling_triton_jit_are_profiled_with_their_own_options():
    profiles, fs = mine(ALIAS)
    by = {p.name: p for p in profiles}
    assert set(by) == {"copy_kernel", "plain_kernel"} and by["copy_kernel"].line == 8
    assert by["copy_kernel"].tune.do_not_specialize == ("T", "BLOCK")
    assert by["plain_kernel"].tune.do_not_specialize == ()
    assert of(fs, "copy_kernel", "SK008")[0].kind == "instance"


CONFIGS = '''
import triton
import triton.language as tl


def make_configs():
    return [triton.Config({}, num_warps=w) for w in (1, 2, 4)]


_NAMED = [triton.Config({"BLOCK": b}, num_warps=4) for b in (64, 128)]


@triton.autotune(configs=make_configs(), key=["n"])
@triton.jit
def by_function(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


@triton.autotune(configs=_NAMED, key=["n"])
@triton.jit
def by_name(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


@triton.jit
def by_kwargs(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, 0.0, mask=offs < n)


def launch(x):
    n = x.numel()
    by_function[(triton.cdiv(n, 128),)](x, n, BLOCK=128)
    by_name[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
    kwargs = {"BLOCK": 256, "num_warps": 2}
    by_kwargs[(triton.cdiv(n, 256),)](x, n, **kwargs)
'''


def test_autotune_configs_from_a_function_or_a_name_count_as_autotuned():
    profiles, fs = mine(CONFIGS)
    by = {p.name: p for p in profiles}
    assert len(by["by_name"].tune.autotune) == 2
    assert dict(by["by_function"].tune.autotune[0]).get("built_at_run_time") is True
    for name in ("by_function", "by_name"):
        assert [f.kind for f in of(fs, name, "SK005")] == ["instance"], name


def test_launch_kwargs_dicts_are_read():
    profiles, fs = mine(CONFIGS)
    site = next(p for p in profiles if p.name == "by_kwargs").launches[0]
    assert dict(site.constexpr_values)["BLOCK"] == 256 and site.num_warps == 2
    assert [f.kind for f in of(fs, "by_kwargs", "SK005")] == ["opportunity"]


POINTER_NAMED_LIKE_A_SIZE = '''
import triton
import triton.language as tl


@triton.jit
def gather(out_ptr, seq_lens, T, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    n = tl.load(seq_lens + b)
    for t in range(0, T):
        tl.store(out_ptr + b * BLOCK + tl.arange(0, BLOCK), n)
'''


def test_a_parameter_read_through_is_a_pointer_not_a_size():
    _, fs = mine(POINTER_NAMED_LIKE_A_SIZE)
    assert [dict(f.params)["param"] for f in of(fs, "gather", "SK008")] == ["T"]


def test_a_bit_exact_contract_puts_a_caveat_on_rounding_rewrites():
    exact = NORM_HELPER.replace("import torch", '"""Reproduces the eager op bit-exact (torch.equal)."""\nimport torch')
    _, plain = mine(NORM_HELPER)
    _, fs = mine(exact)
    assert all("caveat" not in dict(f.params) for f in plain)
    caveats = [dict(f.params).get("caveat", "") for f in of(fs, "norm_kernel", "SK001")]
    assert caveats and all("bit-exact contract (line 2" in c for c in caveats)


WIDENED_FACTOR = '''
import torch
import triton
import triton.language as tl


@triton.jit
def dequant(x_ptr, s_ptr, y_ptr, M, N, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    n = tl.cdiv(N, BLOCK)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs = offs_m[:, None].to(tl.int64) * N + offs_n[None, :].to(tl.int64)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(x_ptr + offs, mask=mask)
    s = tl.load(s_ptr + pid_m * n + pid_n)
    tl.store(y_ptr + offs, x * s, mask=mask)


def run(x, s, block=128):
    M, N = x.shape
    y = torch.empty_like(x)
    dequant[(triton.cdiv(M, block), triton.cdiv(N, block))](x, s, y, M, N, BLOCK=block)
    return y
'''


def test_a_product_with_a_factor_cast_to_int64_is_not_an_int32_offset():
    """``offs_m[:, None].to(tl.int64) * N`` multiplies in int64 (the other operand is promoted); the
    ``pid_m * n`` scale index two lines later is still int32 and stays the opportunity's evidence."""
    _, fs = mine(WIDENED_FACTOR)
    [f] = [f for f in of(fs, "dequant", "SK009") if f.kind == "opportunity"]
    assert f.line == 17  # s_ptr + pid_m * n; not line 14, the int64 product
