"""Zero-config harnesses: inferred from kernels the suite has hand specs for (the inferred shapes must
be the hand spec's) and from other projects' kernels fetched from the package registry (fla-core, mamba-ssm,
Liger); the gate then accepts an identical copy and rejects semantic mutants, with the original as
its only oracle."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import fetch_sdist_corpus, fetch_wheel_corpus
from skel.cli import main
from skel.harness.infer import HarnessError, infer
from skel.harness.writer import inferred_spec
from skel.validate.gate import validate
from skel.validate.load import load_spec
from skel.validate.spec import Shape

REPO = Path(__file__).resolve().parents[1]


def _shapes(h):
    return {t.name: t.dims for t in h.tensors}


@pytest.fixture(scope="module")
def liger():
    return fetch_wheel_corpus("liger-kernel", "0.8.5")


@pytest.mark.parametrize("family", ["kda_decode", "gdn_decode", "state_merge"])
def test_inferred_shapes_are_the_hand_specs(family, tmp_path, monkeypatch):
    """The suite's own kernels have hand-written specs: the harness inferred from the code alone must
    build every tensor argument with the hand spec's shape (at a ci shape of the hand spec)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    kernel = REPO / "kernels" / family / "kernel.py"
    hand = load_spec(REPO / "kernels" / family / "spec.py")
    spec_path, h = inferred_spec(kernel, kernel.read_text())
    inferred = load_spec(spec_path)
    assert inferred.reference is None and inferred.entry == hand.entry
    shape = hand.shape_sets["ci"][0]
    dims = {d.name for d in h.dims}
    assert dims <= set(shape.as_dict()), (dims, shape)
    want = hand.make_inputs(shape, hand.dtypes[0], 0, "cpu")
    got = inferred.make_inputs(Shape.of(**{d: shape[d] for d in dims}), "bfloat16", 0, "cpu")
    for name, value in got.items():
        if hasattr(value, "shape"):
            assert tuple(value.shape) == tuple(want[name].shape), name
    assert set(inferred.inplace) == set(hand.inplace)


def test_fla_delta_rule_layout_is_read_off_the_kernel(fla_corpus):
    path = fla_corpus / "fla/ops/delta_rule/fused_recurrent.py"
    h = infer(path, path.read_text())
    assert h.entry == "fused_recurrent_delta_rule_fwd" and "fused_recurrent_delta_rule_bwd" in h.others
    assert _shapes(h) == {"q": ("B", "T", "H", "K"), "k": ("B", "T", "H", "K"), "v": ("B", "T", "H", "V"),
                          "beta": ("B", "T", "H"), "initial_state": ("B", "H", "K", "V")}
    assert h.outputs == ("o", "u", "final_state") and h.inplace == ()
    assert {v.name: v.code for v in h.values} == {"scale": "K ** -0.5", "output_final_state": "True"}
    assert {d.name: d.role for d in h.dims} == {"B": "batch", "T": "tokens", "H": "heads", "K": "head_dim",
                                               "V": "head_dim"}
    common = fla_corpus / "fla/ops/common/fused_recurrent.py"  # simple_gla's kernel, Optional gates
    h = infer(common, common.read_text(), variants=("g", "initial_state"))
    assert _shapes(h)["g"] == ("B", "T", "H") and [t.values for t in h.tensors if t.name == "g"] == ["log-decay"]
    with pytest.raises(HarnessError, match="no @triton.jit kernel.*skel capture"):
        simple = fla_corpus / "fla/ops/simple_gla/fused_recurrent.py"
        infer(simple, simple.read_text())


def test_liger_norm_and_swiglu(liger):
    rms = liger / "liger_kernel/ops/rms_norm.py"
    h = infer(rms, rms.read_text())
    assert h.entry == "rms_norm_forward" and _shapes(h) == {"X": ("n_rows", "n_cols"), "W": ("n_cols",)}
    assert {v.name: v.code for v in h.values} == {"eps": "1e-6", "offset": "0.0", "casting_mode": "'llama'",
                                                 "row_mode": "False"}
    assert h.outputs == ("Y", "_X", "RSTD", "_BLOCK_SIZE", "_num_warps", "_casting_mode")
    swiglu = liger / "liger_kernel/ops/swiglu.py"
    h = infer(swiglu, swiglu.read_text())
    assert _shapes(h) == {"a": ("n_rows", "n_cols"), "b": ("n_rows", "n_cols")} and h.outputs == ("_a", "_b", "c")


# -- the gate on inferred harnesses: identical copies accepted, semantic mutants rejected --------------
def _judge(target: Path, text: str, tmp_path: Path, name: str, dtype: str, spec: Path | None = None):
    cand = tmp_path / f"{name.replace(' ', '_')}.py"
    cand.write_text(text)
    # a mutant needs one shape to fail; an identical copy is judged on every ci shape
    shapes = "ci" if name == "copy" else [load_spec(spec).shape_sets["ci"][0].label] if spec else "ci"
    return validate(target, cand, shapes=shapes, seeds=(0,), device="cpu", dtype=dtype, spec=spec)


ZERO_CONFIG = {  # (corpus, file, dtype, {mutant: (old, new)}); every occurrence replaced
    "fla-delta": ("fla", "fla/ops/delta_rule/fused_recurrent.py", "bfloat16", {
        "sign": ("b_v -= b_v_minus", "b_v += b_v_minus"),
        "dropped term": ("b_h += b_k[None, :] * b_v[:, None]", "b_h += b_k[None, :] * 0.0"),
        "off-by-one mask": ("mask_k = (i_k * BK + tl.arange(0, BK)) < K",
                            "mask_k = (i_k * BK + tl.arange(0, BK)) < K - 1"),
    }),
    "liger-rms-norm": ("liger", "liger_kernel/ops/rms_norm.py", "float32", {
        "wrong epsilon": ("rstd = rsqrt(mean_square + eps)", "rstd = rsqrt(mean_square + eps * 1e5)"),
        "sign": ("Y_row = X_row * (offset + W_row)", "Y_row = X_row * (offset - W_row)"),
    }),
    "fla-common": ("fla", "fla/ops/common/fused_recurrent.py", "bfloat16",
                   {"sign": ("b_h += b_k[:, None] * b_v[None, :]", "b_h -= b_k[:, None] * b_v[None, :]")}),
    "liger-swiglu": ("liger", "liger_kernel/ops/swiglu.py", "float32",
                     {"dropped term": ("c_row = silu(a_row).cast(b_row.dtype) * b_row",
                                       "c_row = a_row.cast(b_row.dtype) * b_row")}),
    # a loss: the returned loss is a torch.sum the launcher takes of the kernel's per-row losses
    "liger-cross-entropy": ("liger", "liger_kernel/ops/cross_entropy.py", "float32",
                            {"loss term": ("    loss = lse - ori_X_y", "    loss = lse - 0.5 * ori_X_y")}),
}


@pytest.mark.parametrize("case,mutant", [(c, m) for c, (_, _, _, ms) in ZERO_CONFIG.items() for m in (None, *ms)])
def test_zero_config_gate(case, mutant, fla_corpus, liger, tmp_path, monkeypatch):
    """Other projects' kernels with no spec: fla-core's delta rule and common fused_recurrent (simple_gla's
    kernel), Liger's rms_norm, swiglu and cross entropy. The original is the only oracle."""
    corpus, rel, dtype, mutants = ZERO_CONFIG[case]
    root = fla_corpus if corpus == "fla" else liger
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(root))
    target = tmp_path / Path(rel).name
    shutil.copy(root / rel, target)
    text = target.read_text()
    if mutant:
        old, new = mutants[mutant]
        assert old in text
        text = text.replace(old, new)
    result = _judge(target, text, tmp_path, mutant or "copy", dtype)
    assert result.error is None and result.oracle == "original", result.error
    assert result.accepted == (mutant is None), result.reasons
    assert any("inferred" in n for n in result.notes)


MAMBA_MUTANTS = {  # mamba-ssm's selective_state_update (a Mamba2 decode step), first occurrence replaced
    "sign": ("out += x * D", "out -= x * D"),
    "dropped term": ("state = state * dA + dB * x[:, None]", "state = state * dA"),
    "off-by-one mask": ("tl.store(out_ptrs, out, mask=offs_m < dim)", "tl.store(out_ptrs, out, mask=offs_m < dim - 1)"),
    "wrong index": ("(pid_h // nheads_ngroups_ratio) * stride_B_group", "(pid_h % nheads_ngroups_ratio) * stride_B_group"),
}


@pytest.fixture(scope="module")
def mamba():
    """mamba-ssm 2.3.2.post1 (a source-only release: its metadata read with the CUDA build skipped)."""
    return fetch_sdist_corpus("mamba-ssm", "2.3.2.post1", {"MAMBA_SKIP_CUDA_BUILD": "TRUE"})


@pytest.mark.parametrize("mutant", [None, *MAMBA_MUTANTS])
def test_zero_config_gate_on_a_mamba2_state_update(mutant, mamba, tmp_path, monkeypatch):
    """mamba-ssm's Mamba2 decode step, judged where it lives in its package: the package's __init__ imports
    a CUDA extension this machine lacks (loaded without it, and said so), the file imports its softplus by
    absolute name, the launcher enters torch.cuda.device, spreads its Optional strides as
    ``*(...) if x is not None else 0`` (so D and dt_bias are required) and asserts every shape as a tuple;
    the kernel's exp(A * dt) is drawn as a decay. The project's selective_state_update_ref is the second
    oracle."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = mamba / "mamba_ssm/ops/triton/selective_state_update.py"
    h = infer(target, target.read_text())
    assert _shapes(h) == {"state": ("batch", "nheads", "dim", "dstate"), "x": ("batch", "nheads", "dim"),
                          "dt": ("batch", "nheads", "dim"), "A": ("nheads", "dim", "dstate"),
                          "B": ("batch", "ngroups", "dstate"), "C": ("batch", "ngroups", "dstate"),
                          "D": ("nheads", "dim"), "dt_bias": ("nheads", "dim")}
    assert h.reference is not None and h.reference.name == "selective_state_update_ref"
    text = target.read_text()
    if mutant:
        old, new = MAMBA_MUTANTS[mutant]
        assert old in text
        text = text.replace(old, new, 1)
    result = _judge(target, text, tmp_path, mutant or "copy", "bfloat16")
    assert result.error is None, result.error
    assert result.accepted == (mutant is None), result.reasons
    assert any("package mamba_ssm:" in n and "selective_scan_cuda" in n for n in result.notes), result.notes


def test_skel_harness_writes_an_editable_spec(fla_corpus, tmp_path, capsys):
    out = tmp_path / "spec.py"
    path = fla_corpus / "fla/ops/delta_rule/fused_recurrent.py"
    assert main(["harness", str(path), "--dims", "H=16", "-o", str(out)]) == 0
    spec = load_spec(out)
    assert {s["H"] for s in spec.shape_sets["decode"]} == {16} and {s["B"] for s in spec.shape_sets["decode"]} == {
        1, 8, 32, 64, 256}
    assert "q [B, T, H, K]" in capsys.readouterr().out
    assert main(["harness", str(path), "-o", str(out)]) == 2  # never overwritten without --force
    assert main(["harness", str(path), "--dims", "Z=3"]) == 2
    assert "not a dim" in capsys.readouterr().err


KDA_POOL_MUTANTS = {  # the slot of the request after this one: a wrong index into the state pool
    "wrong index": ("ssm_state_indices + i_n * stride_indices_seq + i_t",
                    "ssm_state_indices + ((i_n + 1) % N) * stride_indices_seq + i_t"),
}


@pytest.mark.parametrize("mutant", [None, *KDA_POOL_MUTANTS])
def test_zero_config_gate_on_fla_kda_continuous_batching(mutant, fla_corpus, tmp_path, monkeypatch):
    """fla-core's KDA decode through its serving path: a state pool read and written in place at the slots
    ssm_state_indices names (inferred: a pool twice the slots, distinct valid slots)."""
    monkeypatch.syspath_prepend(str(fla_corpus))
    target = tmp_path / "kda.py"
    shutil.copy(fla_corpus / "fla/ops/kda/fused_recurrent.py", target)
    spec = tmp_path / "spec.py"
    assert main(["harness", str(target), "--variant", "ssm_state_indices", "-o", str(spec)]) == 0
    h = infer(target, target.read_text(), variants=("ssm_state_indices",))
    tensors = {t.name: t for t in h.tensors}
    assert tensors["initial_state"].dims == ("POOL", "HV", "K", "V") and h.inplace == ("initial_state",)
    assert tensors["ssm_state_indices"].dims == ("B", "T") and tensors["ssm_state_indices"].values == "slots"
    text = target.read_text()
    if mutant:
        old, new = KDA_POOL_MUTANTS[mutant]
        assert old in text
        text = text.replace(old, new, 1)
    result = _judge(target, text, tmp_path, mutant or "copy", "bfloat16", spec)
    assert result.error is None, result.error
    assert result.accepted == (mutant is None), result.reasons


INPLACE = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(x + offs, tl.load(x + offs, mask=m) * alpha, mask=m)


def scale_(x: torch.Tensor, alpha: float):
    n = x.numel()
    _scale_kernel[(triton.cdiv(n, 256),)](x, n, alpha, BLOCK=256)
'''


def test_an_in_place_launcher_that_returns_nothing(tmp_path, monkeypatch):
    """A flat tensor (its numel the mask bound) updated in place by a launcher returning None: judged on
    the tensor after the call; a changed factor is rejected."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "scale.py"
    target.write_text(INPLACE)
    h = infer(target, INPLACE)
    assert _shapes(h) == {"x": ("n",)} and h.outputs == () and h.inplace == ("x",)
    assert [d.role for d in h.dims] == ["flat"] and {v.name: v.code for v in h.values} == {"alpha": "0.5"}
    assert _judge(target, INPLACE, tmp_path, "copy", "float32").accepted
    bad = _judge(target, INPLACE.replace("* alpha, mask=m)", "* (alpha + 1e-2), mask=m)"), tmp_path, "factor",
                 "float32")
    assert not bad.accepted and any("'x'" in r for r in bad.reasons), bad.reasons


def test_kernel_reading_survives_what_real_files_hold(tmp_path):
    """Float constants in index arithmetic, block pointers, and a launch the default path never reaches:
    read without a traceback (fla-core has all three)."""
    import ast

    from skel.harness.kernel_facts import kernel_facts

    src = '''\
import triton
import triton.language as tl


@triton.jit
def k(q, o, T, H: tl.constexpr, K: tl.constexpr, BT: tl.constexpr, BK: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    w = 0.5 * i_t
    p_q = tl.make_block_ptr(q + i_h * K, (T, K), (H * K, 1), (i_t * BT, 0), (BT, BK), (1, 0))
    b = tl.load(p_q, boundary_check=(0, 1)) * w
    tl.store(tl.make_block_ptr(o + i_h * K, (T, K), (H * K, 1), (i_t * BT, 0), (BT, BK), (1, 0)), b)


def launch(q, use: bool = False):
    T, H, K = q.shape
    o = q.new_empty(T, H, K)
    if use:
        k[(T, H)](q, o, T, H=H, K=K, BT=16, BK=K)
    return o
'''
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "k")
    facts = kernel_facts(fn)
    assert str(facts.pointers["q"].address) == "H*K*mask<T + K*pid1 + mask<K"
    assert facts.pointers["o"].stored and not facts.pointers["o"].loaded
    path = tmp_path / "blocks.py"
    path.write_text(src)
    with pytest.raises(HarnessError, match="launches no kernel.*--variant"):
        infer(path, src)
    h = infer(path, src, variants=("use",))
    assert _shapes(h) == {"q": ("T", "H", "K")} and h.outputs == ("o",)


PIPELINE = """\
import torch
import triton
import triton.language as tl


@triton.jit
def rev_kernel(q, k, unused, o, T, H: tl.constexpr, K: tl.constexpr, BK: tl.constexpr):
    i_nh = tl.program_id(0)
    i_n, i_h = i_nh // H, i_nh % H
    o_k = tl.arange(0, BK)
    m_k = o_k < K
    # walked backwards: from the last token down
    p_q = q + (i_n * T * H + i_h) * K + o_k + (T - 1) * H * K
    p_k = k + (i_n * T * H + i_h) * K + o_k
    unused += i_n * K
    acc = tl.zeros([BK], dtype=tl.float32)
    for _ in range(T):
        acc += tl.load(p_q, mask=m_k, other=0.0).to(tl.float32)
        p_q -= H * K
    for _ in range(T):
        acc += tl.load(p_k, mask=m_k, other=0.0).to(tl.float32)
        p_k = p_k + H * K
    # a later re-assignment of p_q (never loaded) must not be what p_q's loads are read as
    p_q = q + i_h * K
    tl.store(o + (i_n * H + i_h) * K + o_k, acc, mask=m_k)


@triton.jit
def gate_kernel(g, yg, T, H: tl.constexpr, BT: tl.constexpr):
    i_t, i_h = tl.program_id(0), tl.program_id(1)
    o_t = i_t * BT + tl.arange(0, BT)
    b = tl.load(g + i_h + o_t * H, mask=o_t < T, other=0.0)
    tl.store(yg + i_h + o_t * H, b * 2, mask=o_t < T)


def pipeline(q, k, unused, g: torch.Tensor, bias: torch.Tensor | None):
    B, T, H, K = k.shape
    Hg = g.shape[-1]
    Tg = g.numel() // Hg
    o = k.new_empty(B, H, K)
    yg = torch.empty_like(g)
    args = dict(q=q, k=k, unused=unused, o=o, T=T, H=H, K=K, BK=triton.next_power_of_2(K))
    rev_kernel[(B * H,)](**args)

    def grid(meta):
        return (triton.cdiv(Tg, meta["BT"]), Hg)

    gate_kernel[grid](g, yg, Tg, H=Hg, BT=16)
    if bias is not None:
        o += bias
    return o, yg
"""


def test_shapes_read_where_the_code_decides_them(tmp_path):
    """Labelled classes of launchers the first reading refused (each from fla-core's or Liger's code,
    written here small): a pointer walked backwards over range(T) and re-assigned after its loads; a split
    program id over a grid of B * H; launch arguments passed as **dict(...); a tensor only the launcher's
    second kernel reads, over a grid named by a nested def, its rows a numel() quotient; a parameter the
    kernel only offsets; a required Optional tensor."""
    path = tmp_path / "pipeline.py"
    path.write_text(PIPELINE)
    h = infer(path, PIPELINE, entry="pipeline")
    assert h.kernel == "rev_kernel"
    shapes = _shapes(h)
    assert shapes["q"] == shapes["k"] == ("B", "T", "H", "K")  # q read where it is loaded, walked backwards
    assert shapes["g"] == ("Tg", "Hg")  # read off gate_kernel: pid1 spans the grid's Hg, rows Tg = numel // Hg
    assert shapes["unused"] == ("1",)  # offset, never read: a placeholder
    assert {v.name: v.code for v in h.values}["bias"] == "None"
    assert any("never loaded, stored or passed on" in n for n in h.notes)


SCALARS = """\
import torch
import triton
import triton.language as tl


@triton.jit
def pick(x, y, out, ignore, n, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    label = tl.load(y + i)
    if label == ignore:
        return
    o = tl.arange(0, BLOCK)
    v = tl.load(x + i * n + o, mask=o < n, other=0.0)
    tl.store(out + i, tl.sum(v))


def launch(x: torch.Tensor, y: torch.Tensor, ignore, BLOCK):
    rows, n = x.shape
    out = x.new_empty(rows)
    pick[(rows,)](x, y, out, ignore, n, BLOCK=BLOCK)
    return out
"""


def test_scalars_read_off_their_use(tmp_path):
    """A required scalar the kernel compares with loaded values is a sentinel no drawn value takes; one the
    kernel uses as a tl.arange bound is a tile size (a power of two): here one block covers the masked row
    (no loop over it), so the power of two at or above n; with a loop over the row, 16."""
    path = tmp_path / "pick.py"
    path.write_text(SCALARS)
    values = {v.name: v.code for v in infer(path, SCALARS).values}
    assert values == {"ignore": "-100", "BLOCK": "(1 << max(0, n - 1).bit_length())"}
    looped = SCALARS.replace("    v = tl.load(x + i * n + o, mask=o < n, other=0.0)\n    tl.store(out + i, tl.sum(v))",
                             "    acc = tl.zeros([BLOCK], dtype=tl.float32)\n"
                             "    for s in range(0, n, BLOCK):\n"
                             "        acc += tl.load(x + i * n + s + o, mask=s + o < n, other=0.0)\n"
                             "    tl.store(out + i, tl.sum(acc))")
    assert looped != SCALARS
    values = {v.name: v.code for v in infer(path, looped).values}
    assert values == {"ignore": "-100", "BLOCK": "16"}


def test_liger_kl_div_roles_read_off_the_code(liger):
    """A flag the kernel branches on takes the kernel's default, a mode looked up in a module dict one of
    its keys, a floor under values (tl.maximum(x, eps)) an epsilon."""
    path = liger / "liger_kernel/ops/kl_div.py"
    h = infer(path, path.read_text())
    assert _shapes(h) == {"y_pred": ("BT", "V"), "y_true": ("BT", "V")} and h.outputs == ("output_tensor",)
    assert {v.name: v.code for v in h.values} == {"log_target": "False", "reduction": "'none'", "eps": "1e-6"}


PACKAGED = {  # a kernel file in a package, reaching its helpers through relative imports
    "__init__.py": "",
    "ops/__init__.py": "",
    "consts.py": "SCALE = 0.5\n",
    "ops/utils.py": '''\
import triton
import triton.language as tl


@triton.jit
def _square(x):
    return x * x


def block_for(n):
    return triton.next_power_of_2(n)
''',
    "ops/scale.py": '''\
import torch
import triton
import triton.language as tl

from .utils import _square, block_for
from .. import consts


@triton.jit
def _kernel(x, y, n, alpha, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    b_x = tl.load(x + tl.program_id(0) * n + offs, mask=m, other=0.0)
    tl.store(y + tl.program_id(0) * n + offs, b_x * alpha + _square(b_x), mask=m)


def square_add(x: torch.Tensor) -> torch.Tensor:
    R, n = x.shape
    y = torch.empty_like(x)
    _kernel[(R,)](x, y, n, consts.SCALE, BLOCK=block_for(n))
    return y
''',
}


@pytest.mark.parametrize("mutant", [None, "sign"])
def test_a_kernel_with_relative_imports_is_judged_in_its_package(mutant, tmp_path, monkeypatch):
    """``from .utils import ...`` and ``from .. import consts``: the original and the candidate (a copy
    elsewhere) are both imported as members of the target's package, so those imports resolve."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "proj" / "mypkg"
    for rel, text in PACKAGED.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    target = root / "ops" / "scale.py"
    text = target.read_text() if mutant is None else target.read_text().replace(
        "b_x * alpha + _square(b_x)", "b_x * alpha - _square(b_x)")
    result = _judge(target, text, tmp_path, mutant or "copy", "float32")
    assert result.error is None and result.oracle == "original", result.error
    assert result.accepted == (mutant is None), result.reasons


@pytest.mark.parametrize("mutant", [None, "sign"])
def test_a_package_whose_init_does_not_import(tmp_path, monkeypatch, mutant):
    """The package's ``__init__`` imports what this machine lacks (mamba-ssm's imports its compiled scan,
    sglang's a JSON library): the kernel module and its helpers load without it, the report says so, and
    the gate still tells a copy from a mutant."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "proj2" / "brokenpkg"
    for rel, text in PACKAGED.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "__init__.py").write_text("import a_module_nobody_has\n")
    target = root / "ops" / "scale.py"
    text = target.read_text() if mutant is None else target.read_text().replace(
        "b_x * alpha + _square(b_x)", "b_x * alpha - _square(b_x)")
    result = _judge(target, text, tmp_path, mutant or "copy", "float32")
    assert result.error is None, result.error
    assert result.accepted == (mutant is None), result.reasons
    assert any("package brokenpkg:" in n and "a_module_nobody_has" in n for n in result.notes), result.notes


def test_a_helper_module_that_does_not_import_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "proj3" / "brokenpkg"
    for rel, text in PACKAGED.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / "ops" / "utils.py").write_text("import a_module_nobody_has\n" + PACKAGED["ops/utils.py"])
    target = root / "ops" / "scale.py"
    result = _judge(target, target.read_text(), tmp_path, "copy", "float32")
    assert result.error and "does not import" in result.error and "a_module_nobody_has" in result.error, result.error


SELF_IMPORT = {  # a kernel importing its own package's helper by absolute name, as mamba-ssm's files do
    "selfpkg/__init__.py": "import a_module_nobody_has\n",
    "selfpkg/ops/__init__.py": "",
    "selfpkg/ops/act.py": '''\
import triton
import triton.language as tl


@triton.jit
def softplus(x):
    return tl.log(tl.exp(x) + 1)
''',
    "selfpkg/ops/step.py": '''\
import torch
import triton
import triton.language as tl

from selfpkg.ops.act import softplus


@triton.jit
def _step_kernel(x, y, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    m = offs < n
    b_x = tl.load(x + tl.program_id(0) * n + offs, mask=m, other=0.0)
    tl.store(y + tl.program_id(0) * n + offs, softplus(b_x) * 2.0, mask=m)


def step(x: torch.Tensor) -> torch.Tensor:
    R, n = x.shape
    y = torch.empty_like(x)
    with torch.cuda.device(x.device.index):
        _step_kernel[(R,)](x, y, n, BLOCK=triton.next_power_of_2(n))
    return y
''',
}


@pytest.mark.parametrize("mutant", [None, "scale"])
def test_absolute_imports_of_its_own_package(tmp_path, monkeypatch, mutant):
    """``from selfpkg.ops.act import softplus`` in ``selfpkg/ops/step.py``, selfpkg not installed and its
    ``__init__`` broken here, and a launcher that enters ``torch.cuda.device(x.device.index)``: judged on
    the CPU all the same, a copy accepted and a mutant rejected."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for rel, text in SELF_IMPORT.items():
        (tmp_path / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / rel).write_text(text)
    target = tmp_path / "src" / "selfpkg" / "ops" / "step.py"
    text = target.read_text() if mutant is None else target.read_text().replace("* 2.0", "* 2.01")
    result = _judge(target, text, tmp_path, mutant or "copy", "float32")
    assert result.error is None, result.error
    assert result.accepted == (mutant is None), result.reasons


VARLEN = {  # (file, mutant: (old, new)), the first occurrence replaced: the forward kernel's
    "fla-delta": ("fla/ops/delta_rule/fused_recurrent.py",
                  ("bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64)",
                   "bos, eos = tl.load(cu_seqlens + i_n + 1).to(tl.int64) - 1")),
    "fla-common": ("fla/ops/common/fused_recurrent.py",
                   ("bos, eos = tl.load(cu_seqlens + i_n).to(tl.int64)",
                    "bos, eos = (tl.load(cu_seqlens + i_n) + tl.load(cu_seqlens + i_n + 1)).to(tl.int64) // 2")),
}


@pytest.mark.parametrize("case,mutant", [("fla-delta", False), ("fla-delta", True), ("fla-common", True)])
def test_zero_config_gate_on_variable_length_batches(case, mutant, fla_corpus, tmp_path, monkeypatch):
    """``--variant cu_seqlens``: the kernel reads each sequence's start and end from offsets (entries i
    and i + 1) and addresses tensors packed along the token axis. Inferred: monotonic offsets cutting
    one packed sequence of B * T tokens into B random lengths; a kernel that reads a wrong start is
    rejected (judged on both ci shapes: at one token per sequence every cut is alike)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(fla_corpus))
    rel, (old, new) = VARLEN[case]
    target = tmp_path / Path(rel).name
    shutil.copy(fla_corpus / rel, target)
    h = infer(target, target.read_text(), variants=("cu_seqlens",))
    tensors = {t.name: t for t in h.tensors}
    assert tensors["cu_seqlens"].values == "offsets" and tensors["cu_seqlens"].dims == ("B",)
    assert h.offsets == ("cu_seqlens", "B", "T") and {"q", "k", "v"} <= set(h.packed)
    spec = tmp_path / "spec.py"
    assert main(["harness", str(target), "--variant", "cu_seqlens", "-o", str(spec)]) == 0
    inputs = load_spec(spec).make_inputs(Shape.parse("B3-T4-H2-K16-V16"), "float32", 0, "cpu")
    cuts = inputs["cu_seqlens"].tolist()
    assert cuts[0] == 0 and cuts[-1] == 12 and len(cuts) == 4 and all(a < b for a, b in zip(cuts, cuts[1:]))
    assert inputs["q"].shape[:2] == (1, 12)
    text = target.read_text()
    if mutant:
        assert old in text
        text = text.replace(old, new, 1)
    cand = tmp_path / "cand.py"
    cand.write_text(text)
    result = validate(target, cand, shapes="ci", seeds=(0,), device="cpu", dtype="float32", spec=spec)
    assert result.error is None, result.error
    assert result.accepted == (not mutant), result.reasons


def test_the_projects_reference_is_a_second_oracle(fla_corpus, tmp_path, monkeypatch):
    """fla keeps a plain PyTorch version of each kernel in naive.py: naive_recurrent_kda takes the KDA
    launcher's arguments (naive_chunk_kda does too, but shares fewer words with it), so it is run on
    float64 copies of the inputs beside the original, and the report names it."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(fla_corpus))
    folder = tmp_path / "kda"
    folder.mkdir()
    for name in ("fused_recurrent.py", "naive.py"):
        shutil.copy(fla_corpus / "fla/ops/kda" / name, folder / name)
    target = folder / "fused_recurrent.py"
    h = infer(target, target.read_text())
    assert h.reference is not None and h.reference.name == "naive_recurrent_kda"
    result = _judge(target, target.read_text(), tmp_path, "copy", "bfloat16")
    assert result.error is None and result.accepted, result.reasons
    assert any(n.startswith("second oracle: the project's reference naive_recurrent_kda") for n in result.notes)


REFERENCED = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _axpy_kernel(x, y, out, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, alpha * tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


def axpy(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    n = x.numel()
    out = torch.empty_like(x)
    _axpy_kernel[(triton.cdiv(n, 128),)](x, y, out, n, alpha, BLOCK=128)
    return out


def axpy_ref(x, y, alpha):
    return alpha * x + y{tail}
'''


@pytest.mark.parametrize("tail,used", [("", True), (" * 2", False)])
def test_a_reference_that_disagrees_is_dropped_with_a_note(tail, used, tmp_path, monkeypatch):
    """``axpy_ref`` takes axpy's arguments: used as the second oracle while it agrees with the original;
    one that computes something else is named and dropped, and the original alone decides."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    target = tmp_path / "axpy.py"
    target.write_text(REFERENCED.replace("{tail}", tail))
    assert infer(target, target.read_text()).reference.name == "axpy_ref"
    result = _judge(target, target.read_text(), tmp_path, "copy", "float32")
    assert result.error is None and result.accepted, result.reasons
    assert any(n.startswith("second oracle: the project's reference axpy_ref") for n in result.notes) == used
    assert any("not used as an oracle" in n and "differs from the original" in n for n in result.notes) != used


def test_values_a_flag_would_transform_are_drawn_transformed(fla_corpus):
    """fla's KDA kernel L2-normalises q and k under USE_QK_L2NORM_IN_KERNEL and applies sigmoid to beta
    under APPLY_BETA_SIGMOID, both off by default: the caller passes such values, so the harness draws
    unit rows and values in (0, 1); g decays the state through exp() after a rename (b_gk = b_g)."""
    path = fla_corpus / "fla/ops/kda/fused_recurrent.py"
    values = {t.name: t.values for t in infer(path, path.read_text()).tensors}
    assert values == {"q": "unit-norm", "k": "unit-norm", "v": "normal", "g": "log-decay", "beta": "unit-interval",
                      "initial_state": "normal"}
    path = fla_corpus / "fla/ops/delta_rule/fused_recurrent.py"  # no such flag: nothing assumed
    assert {t.values for t in infer(path, path.read_text()).tensors} == {"normal"}
