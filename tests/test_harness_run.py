"""Inferred harnesses that run: an identical copy of a kernel the CPU interpreter used to fail (or that
the inference could not build) is accepted, and a semantic mutant is still rejected. Each class on a
small kernel written here: loop indices as tensors, libdevice functions with no tl.math namesake, bf16
arithmetic and dots, NPU-only files refused, None-default tensors the launcher needs, dims asserted
equal by name."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from skel.harness.infer import HarnessError, infer
from skel.harness.npu import npu_evidence
from skel.validate.gate import validate
from skel.validate.spec import Shape

LOOPS = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _chunk_scale_kernel(x, y, T, BT: tl.constexpr):
    i_b = tl.program_id(0)
    acc = tl.zeros([BT], dtype=tl.float32)
    for i_t in range(tl.cdiv(T, BT)):
        o_t = i_t.to(tl.int64) * BT + tl.arange(0, BT)
        m_t = o_t < T
        acc += tl.load(x + i_b * T + o_t, mask=m_t, other=0.0).to(tl.float32)
        tl.store(y + i_b * T + o_t, acc * (i_t + 1), mask=m_t)
    for i_s in tl.static_range(2):
        tl.store(y + i_b * T + i_s, tl.load(y + i_b * T + i_s).to(tl.float32) * 0.5)


def chunk_scale(x: torch.Tensor) -> torch.Tensor:
    B, T = x.shape
    y = torch.empty_like(x)
    _chunk_scale_kernel[(B,)](x, y, T, BT=16)
    return y
'''

LIBDEVICE = '''\
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.libdevice import tanh


@triton.jit
def _tanh_gate_kernel(x, y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    b_x = tl.load(x + row * n_cols + cols, mask=m, other=0.0).to(tl.float32)
    b_y = tanh(b_x) * libdevice.pow(tl.abs(b_x), 1.5) + libdevice.rsqrt(b_x * b_x + 1.0)
    tl.store(y + row * n_cols + cols, b_y, mask=m)


def tanh_gate(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    _tanh_gate_kernel[(n_rows,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y
'''

BF16 = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _gated_gram_kernel(k, beta, A, T, K: tl.constexpr, BT: tl.constexpr):
    i_b = tl.program_id(0)
    o_t = tl.arange(0, BT)
    o_k = tl.arange(0, K)
    m_t = o_t < T
    b_k = tl.load(k + i_b * T * K + o_t[:, None] * K + o_k[None, :], mask=m_t[:, None], other=0.0)
    b_b = tl.load(beta + i_b * T + o_t, mask=m_t, other=0.0)
    b_kb = b_k * b_b[:, None]
    b_A = tl.dot(b_kb, tl.trans(b_k))
    b_A = tl.where(o_t[:, None] > o_t[None, :], b_A, 0)
    tl.store(A + i_b * T * BT + o_t[:, None] * BT + o_t[None, :], b_A.to(A.dtype.element_ty), mask=m_t[:, None])


def gated_gram(k: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
    B, T, K = k.shape
    assert T <= 16
    A = k.new_empty(B, T, 16)
    _gated_gram_kernel[(B,)](k, beta, A, T, K=K, BT=16)
    return A
'''

BF16_ROWS = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _row_norm_kernel(x, y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < n_cols
    b_x = tl.load(x + row * n_cols + cols, mask=m, other=0.0)
    b_x2 = b_x * b_x
    b_top = tl.max(b_x, 0)
    b_rstd = tl.rsqrt(tl.sum(b_x2, 0).to(tl.float32) / n_cols + 1e-6)
    tl.store(y + row * n_cols + cols, (b_x * b_rstd + b_top) + tl.cumsum(b_x, 0), mask=m)


def row_norm(x: torch.Tensor) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    _row_norm_kernel[(n_rows,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y
'''


def _judge(tmp_path: Path, monkeypatch, source: str, name: str, entry: str, dtype: str, mutant=None):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / f"{name}.py"
    target.write_text(source)
    cand = tmp_path / f"{name}_candidate.py"
    cand.write_text(source if mutant is None else source.replace(*mutant))
    assert mutant is None or cand.read_text() != source
    return validate(target, cand, shapes="ci", seeds=(0,), device="cpu", dtype=dtype, entry=entry)


CASES = {  # name: (source, entry, dtype, mutant (old, new))
    "loops": (LOOPS, "chunk_scale", "bfloat16", ("acc * (i_t + 1)", "acc * (i_t + 2)")),
    "libdevice": (LIBDEVICE, "tanh_gate", "float32", ("libdevice.pow(tl.abs(b_x), 1.5)", "libdevice.pow(tl.abs(b_x), 1.25)")),
    "bf16": (BF16, "gated_gram", "bfloat16", ("b_k * b_b[:, None]", "b_k * (b_b[:, None] + 0.25)")),
    "bf16-reductions": (BF16_ROWS, "row_norm", "bfloat16", ("b_x * b_rstd + b_top", "b_x * b_rstd - b_top")),
}


@pytest.mark.parametrize("case,mutated", [(c, m) for c in CASES for m in (False, True)])
def test_the_interpreter_runs_the_original_as_compiled_code_would(case, mutated, tmp_path, monkeypatch):
    """loops: ``i_t.to(tl.int64)`` on a ``range`` loop index (a Python int in the interpreter, a tensor in
    compiled code); ``tl.static_range`` indices stay constants. libdevice: ``tanh`` and ``libdevice.pow``
    have no tl.math namesake (the interpreter returned None). bf16: ``b_k * b_b`` and ``tl.dot`` on bf16
    loads, and bf16-reductions: ``tl.sum``/``tl.max``/``tl.cumsum`` of bf16 values (the interpreter multiplied,
    summed and ordered the bits: the original's bf16 and upcast runs disagreed)."""
    source, entry, dtype, mutant = CASES[case]
    result = _judge(tmp_path, monkeypatch, source, case, entry, dtype, mutant if mutated else None)
    assert result.error is None and result.oracle == "original", result.error
    assert result.accepted != mutated, result.reasons


def test_npu_only_files_are_refused_with_the_evidence(tmp_path):
    npu_pkg = tmp_path / "proj" / "mylib" / "backends" / "_ascend"
    npu_pkg.mkdir(parents=True)
    for folder in (npu_pkg, npu_pkg.parent, npu_pkg.parent.parent):
        (folder / "__init__.py").write_text("")
    in_package = npu_pkg / "gate.py"
    in_package.write_text(LIBDEVICE)
    with pytest.raises(HarnessError, match=r"written for NPUs \(it belongs to the NPU backend package "
                                           r"mylib\.backends\._ascend\)"):
        infer(in_package, LIBDEVICE)
    importing = LOOPS.replace("import triton\n", "import triton\nimport torch_npu\n", 1)
    plain = tmp_path / "loops.py"
    plain.write_text(importing)
    with pytest.raises(HarnessError, match="line 3 imports the NPU module torch_npu.*neither a CUDA GPU nor"):
        infer(plain, importing)
    ok = tmp_path / "input_npus.py"  # "input" holds "npu"; a module name's words are what count
    assert npu_evidence(ok, ast.parse("import inputs_ops\nfrom snpu_like.ops import x\n")) is None
    assert infer(ok, LOOPS).entry == "chunk_scale"


OPTIONAL_GATE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _decay_kernel(x, g, y, dg, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * n + tl.arange(0, BLOCK)
    m = tl.arange(0, BLOCK) < n
    b_g = tl.load(g + offs, mask=m, other=0.0)
    tl.store(y + offs, tl.load(x + offs, mask=m, other=0.0) * tl.exp(b_g), mask=m)
    tl.store(dg + offs, b_g, mask=m)


def decay(x: torch.Tensor, g: torch.Tensor = None, use_fast: bool = False):
    R, n = x.shape
    y = torch.empty_like(x)
    dg = torch.empty_like(g, dtype=torch.float)
    _decay_kernel[(R,)](x, g, y, dg, n, BLOCK=triton.next_power_of_2(n))
    return y, dg
'''


def test_a_none_default_the_launcher_allocates_from_is_passed(tmp_path):
    """``g: torch.Tensor = None`` but ``torch.empty_like(g)`` under no condition: the launcher cannot run
    without g, so the judged path passes it (the original crashed on ``empty_like(None)``); tested for
    None anywhere, the parameter stays optional."""
    path = tmp_path / "decay.py"
    h = infer(path, OPTIONAL_GATE)
    assert {t.name: t.dims for t in h.tensors} == {"x": ("R", "n"), "g": ("R", "n")}
    assert any(n.startswith("g: required on the default path") for n in h.notes), h.notes
    guarded = OPTIONAL_GATE.replace("    dg = torch.empty_like(g, dtype=torch.float)\n",
                                    "    if g is None:\n        g = torch.zeros_like(x)\n"
                                    "    dg = torch.empty_like(g, dtype=torch.float)\n")
    assert not any(n.startswith("g: required") for n in infer(path, guarded).notes)


NAMED_DIMS = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _proj_kernel(x, w, y, K: tl.constexpr, M: tl.constexpr):
    row = tl.program_id(0)
    b_x = tl.load(x + row * K + tl.arange(0, K)).to(tl.float32)
    b_w = tl.load(w + tl.arange(0, K)[:, None] * M + tl.arange(0, M)[None, :]).to(tl.float32)
    tl.store(y + row * M + tl.arange(0, M), tl.sum(b_x[:, None] * b_w, 0))


def proj(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    N, K = x.shape
    K2, M = w.shape
    assert K2 == K
    y = x.new_empty(N, M)
    _proj_kernel[(N,)](x, w, y, K=K, M=M)
    return y
'''


def test_dims_asserted_equal_by_name_are_one_dim(tmp_path):
    h = infer(tmp_path / "proj.py", NAMED_DIMS)
    assert {t.name: t.dims for t in h.tensors} == {"x": ("N", "K"), "w": ("K", "M")}
    assert [d.name for d in h.dims] == ["N", "K", "M"]
    shape = Shape.of(N=2, K2=64, M=8, HV=4)  # a name holding a digit still reads back from its label
    assert shape.label == "N2-K2=64-M8-HV4" and Shape.parse(shape.label) == shape


REGIMES = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _precond_kernel(k, beta, g_atk, lg, x, o, T, eps, K: tl.constexpr, BT: tl.constexpr):
    i_b = tl.program_id(0)
    o_k = tl.arange(0, K)
    o_t = tl.arange(0, BT)
    b_a = tl.zeros([K], dtype=tl.float32)
    for t in range(T):
        b_k = tl.load(k + (i_b * T + t) * K + o_k).to(tl.float32)
        b_beta = tl.load(beta + i_b * T + t).to(tl.float32)
        b_g = tl.load(g_atk + i_b * T + t).to(tl.float32)
        b_a = tl.exp(b_g) * b_a + b_beta * (b_k * b_k)
        tl.store(o + (i_b * T + t) * K + o_k, b_k * tl.log(b_a + eps))
    b_lg = tl.load(lg + i_b * T + o_t, mask=o_t < T, other=0.0)
    b_x = tl.load(x + i_b * T + o_t, mask=o_t < T, other=0.0)
    b_p = tl.exp(b_x - tl.max(b_x, 0)) * tl.exp(tl.sum(b_lg, 0) - tl.cumsum(b_lg, 0))
    tl.store(o + (i_b * T + o_t) * K, b_p / tl.sqrt(tl.sum(b_x * b_x, 0)), mask=o_t < T)


def precond(k, beta, g_atk, lg, x, eps: float = 1e-6):
    B, T, K = k.shape
    o = torch.empty_like(k)
    _precond_kernel[(B,)](k, beta, g_atk, lg, x, o, T, eps, K=K, BT=16)
    return o
'''


def test_values_kept_in_their_regime_by_what_the_code_does_with_them(tmp_path):
    """beta reaches a log argument through products and sums only (an accumulator of beta * k^2):
    positive; lg is cumulated inside exp: log-decays; g_atk is exp'd: log-decay. x is exp'd only as a
    difference with its max and sqrt'd only as a square: no assumption (N(0, 1)), nor for k (squared)."""
    h = infer(tmp_path / "precond.py", REGIMES)
    assert {t.name: t.values for t in h.tensors} == {"k": "normal", "beta": "positive", "g_atk": "log-decay",
                                                    "lg": "log-decay", "x": "normal"}


OPTIONAL_BETA = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _kkt_kernel(k, g, beta, A, T, K: tl.constexpr, BT: tl.constexpr, USE_G: tl.constexpr):
    i_b = tl.program_id(0)
    o_t = tl.arange(0, BT)
    m_t = o_t < T
    b_b = tl.load(beta + i_b * T + o_t, mask=m_t, other=0.0)
    b_k = tl.load(k + (i_b * T + o_t[:, None]) * K + tl.arange(0, K)[None, :], mask=m_t[:, None], other=0.0)
    b_A = tl.sum(b_k[:, None, :] * b_k[None, :, :], 2) * b_b[:, None]
    if USE_G:
        b_g = tl.load(g + i_b * T + o_t, mask=m_t, other=0.0)
        b_A *= tl.exp(b_g[:, None] - b_g[None, :])
    tl.store(A + (i_b * T + o_t[:, None]) * BT + o_t[None, :], b_A, mask=m_t[:, None])


def kkt(k: torch.Tensor, g: torch.Tensor | None = None, beta: torch.Tensor | None = None,
        A: torch.Tensor | None = None):
    B, T, K = k.shape
    if A is None:
        A = torch.empty(B, T, 16, device=k.device, dtype=torch.float32)
    db = torch.empty_like(beta) if beta is not None else None  # tested for None, never filled in
    _kkt_kernel[(B,)](k, g, beta, A, T, K=K, BT=16, USE_G=g is not None)
    return A
'''


def test_an_optional_the_kernel_loads_with_no_flag_is_passed(tmp_path):
    """``beta: Tensor | None = None`` handed straight to a kernel that loads it unguarded: the default
    path would crash the original, so beta is passed; ``g``, loaded only under ``USE_G = g is not None``,
    stays None on the judged path, and so does ``A``, which the launcher allocates when it is None (a None
    test that fills nothing in, as for ``db``, does not make beta optional for the kernel)."""
    h = infer(tmp_path / "kkt.py", OPTIONAL_BETA)
    assert {t.name: t.dims for t in h.tensors} == {"k": ("B", "T", "K"), "beta": ("B", "T")}
    assert h.notes[0].startswith("beta: Optional, but _kkt_kernel loads or stores through it"), h.notes


SIBLING = '''\
import functools

import torch
import triton
import triton.language as tl


@triton.autotune(configs=[triton.Config({}, num_warps=1), triton.Config({}, num_warps=2)], key=["n"])
@triton.jit
def _square_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * n + tl.arange(0, BLOCK)
    m = tl.arange(0, BLOCK) < n
    b_x = tl.load(x + offs, mask=m, other=0.0)
    tl.store(y + offs, b_x * b_x, mask=m)


def _logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


@_logged
def square(x):
    y = torch.empty_like(x)
    _square_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''

USES_SIBLING = LOOPS.replace("import triton.language as tl\n", "import triton.language as tl\n\nfrom sibling_ops import square\n", 1) \
    .replace("    return y\n", "    y.copy_(square(y))\n    return y\n")


@pytest.mark.parametrize("mutated", [False, True])
def test_a_launcher_imported_from_a_sibling_module_has_its_autotuner_trimmed(mutated, tmp_path, monkeypatch):
    """The judged launcher calls ``square`` from another module (wrapped by a decorator): that module's
    autotuned kernel would benchmark its two configs through a driver the interpreter has none of."""
    (tmp_path / "sibling_ops.py").write_text(SIBLING)
    monkeypatch.syspath_prepend(str(tmp_path))
    result = _judge(tmp_path, monkeypatch, USES_SIBLING, "uses_sibling", "chunk_scale", "float32",
                    ("acc * (i_t + 1)", "acc * (i_t + 2)") if mutated else None)
    assert result.error is None, result.error
    assert result.accepted != mutated, result.reasons
