"""Per-skeleton codemods: before/after pairs, expected skips, idempotence, formatting, numerics.

Numerics run the small decode kernel in tests/rewrite_cases through Triton's interpreter
(TRITON_INTERPRET=1 from conftest), original against rewritten, and against a float64 torch
reference. The upstream FLA files come from the fla-core 0.6.0 wheel (pip download, cached
under ~/.cache/skel/corpus); those tests skip when the registry cannot be reached.
"""
from __future__ import annotations

import difflib
import importlib.util
import pathlib
import subprocess
import sys
import textwrap
import zipfile

import pytest

from skel.skeletons.library import load_library
from skel.pipeline.candidates import registry
from skel.rewriter.base import APPLIED, SKIPPED, RewriteOptions

CASES = pathlib.Path(__file__).parent / "rewrite_cases"
MINI = (CASES / "mini_decode.py").read_text()
OPTS = RewriteOptions()
CODES = ("SK001", "SK003", "SK004", "SK005", "SK006", "SK007", "SK008", "SK014", "SK015")
SAFETY = {"SK001": "unsafe", "SK003": "safe", "SK004": "unsafe", "SK005": "unsafe", "SK006": "safe",
          "SK007": "unsafe", "SK008": "safe", "SK014": "unsafe", "SK015": "unsafe"}


def run(code: str, source: str, options: RewriteOptions = OPTS):
    """The rule's rewrite alone (``.raw``: not gated by its conditions), to test the codemod's own refusals."""
    return load_library().get(code).rule.rewrite.raw(source, options)


def _case(code: str, name: str) -> str:
    """A golden case of the skeleton's folder (examples/<case>.before.py / .after.py)."""
    return (load_library().get(code).folder / "examples" / name).read_text()


def one(code: str, source: str, options: RewriteOptions = OPTS):
    results = run(code, source, options)
    assert len(results) == 1, results
    return results[0]


def changed_original_lines(before: str, after: str) -> set[int]:
    """1-based lines of ``before`` that were replaced or deleted, plus insertion points."""
    sm = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    out: set[int] = set()
    for tag, i1, i2, _j1, _j2 in sm.get_opcodes():
        if tag in ("replace", "delete"):
            out.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            out.add(i1 + 1)
    return out


def assert_contract(before: str, result, slack: int = 2) -> None:
    """Only lines near a reported change differ; every comment survives; re-applying skips."""
    assert result.status == APPLIED, result.reason
    assert result.safety == SAFETY[result.skeleton]
    reported = {c.line for c in result.changes}
    assert reported and all(c.description for c in result.changes)
    for line in changed_original_lines(before, result.source):
        assert any(abs(line - r) <= slack for r in reported), (line, sorted(reported))
    comments = [ln.strip() for ln in before.splitlines() if ln.strip().startswith("#")]
    for c in comments:
        assert c in result.source
    again = run(result.skeleton, result.source)
    assert all(r.status == SKIPPED and r.reason.startswith("already applied") for r in again), again
    assert all(r.source == result.source for r in again)


# ------------------------------------------------------------------ registry

def test_every_skeleton_registered_with_a_list_of_rewrites():
    reg = registry()
    assert set(reg) == set(CODES) | {"SK002"}  # found by discovery in the skeleton folders: nothing to register
    for code in CODES:
        out = reg[code](MINI, OPTS)
        assert isinstance(out, list) and out and all(r.skeleton == code for r in out)
        assert all(r.safety == SAFETY[code] for r in out)


def test_unparsable_input_is_a_failed_value_not_an_exception():
    for code in CODES:
        r = one(code, "def f(:\n")
        assert r.status == "failed" and "line 1" in r.reason


# ------------------------------------------------------------------ SK001

SK001_BEFORE = _case("SK001", "scale_folded.before.py")
SK001_AFTER = _case("SK001", "scale_folded.after.py")


def test_sk001_before_after_with_scale_folded():
    r = one("SK001", SK001_BEFORE)
    assert r.source == SK001_AFTER
    assert [c.line for c in r.changes] == [10, 11, 12]
    assert_contract(SK001_BEFORE, r)


def test_sk001_folds_a_scale_that_follows_a_conditional_norm_into_both_branches():
    before = textwrap.dedent('''\
        import triton.language as tl
        @triton.jit
        def f(p, scale, NORM: tl.constexpr):
            a = tl.load(p).to(tl.float32)
            if NORM:
                a = a / tl.sqrt(tl.sum(a * a) + 1e-6)
            a = a * scale
            tl.store(p, a)
    ''')
    r = one("SK001", before)
    assert "        a = a * (tl.rsqrt(tl.sum(a * a) + 1e-6) * scale)\n    else:\n        a = a * scale\n" in r.source
    assert_contract(before, r)


def test_sk001_skips_with_reasons():
    no_reduction = "import triton.language as tl\n@triton.jit\ndef f(p):\n    x = tl.load(p)\n    tl.store(p, x / tl.sqrt(x))\n"
    r = one("SK001", no_reduction)
    assert r.status == SKIPPED and "no division by the square root of a reduction" in r.reason
    half = ("import triton.language as tl\n@triton.jit\ndef f(p):\n    x = tl.load(p).to(tl.float16)\n"
            "    tl.store(p, x / tl.sqrt(tl.sum(x * x)))\n")
    r = one("SK001", half)
    assert r.status == SKIPPED and "16-bit" in r.reason and r.source == half
    r = one("SK001", "def host(x):\n    return x / 2\n")
    assert r.status == SKIPPED and "no @triton.jit function" in r.reason


# ------------------------------------------------------------------ SK003

SK003_BEFORE = _case("SK003", "constexpr_guards.before.py")
SK003_AFTER = _case("SK003", "constexpr_guards.after.py")


def test_sk003_before_after_keeps_constexpr_guards_and_runtime_conditions():
    r = one("SK003", SK003_BEFORE)
    assert r.source == SK003_AFTER
    assert {c.line for c in r.changes} == {10, 12, 14, 19}  # 10: the loop the block goes before
    assert_contract(SK003_BEFORE, r, slack=5)


def test_sk003_skips_when_every_address_advances():
    src = ("import triton.language as tl\n@triton.jit\ndef f(p, o, T):\n    for t in range(T):\n"
           "        tl.store(o + t, tl.load(p + t))\n")
    r = one("SK003", src)
    assert r.status == SKIPPED and "no loop-invariant load" in r.reason
    r = one("SK003", "import triton.language as tl\n@triton.jit\ndef f(p):\n    tl.store(p, tl.load(p) + 1)\n")
    assert r.status == SKIPPED and "no for-loop" in r.reason


def test_sk003_does_not_hoist_a_load_of_a_buffer_the_kernel_stores_to():
    src = ("import triton.language as tl\n@triton.jit\ndef f(acc, T):\n    for t in range(T):\n"
           "        a = tl.load(acc)\n        tl.store(acc, a + 1)\n")
    assert one("SK003", src).status == SKIPPED


def test_sk003_sees_a_store_whose_pointer_is_not_the_leftmost_operand():
    # the store writes acc through `offs + acc`: the invariant load of acc[0] must stay in the loop
    src = ("import triton.language as tl\n@triton.jit\ndef f(acc, T, D: tl.constexpr):\n    offs = tl.arange(0, D)\n"
           "    for t in range(T):\n        a = tl.load(acc)\n        tl.store(offs + acc, a + offs)\n")
    assert one("SK003", src).status == SKIPPED


# ------------------------------------------------------------------ SK004

def test_sk004_before_after_folds_into_constant_multipliers():
    before = textwrap.dedent('''\
        import triton.language as tl
        from somewhere import exp


        @triton.jit
        def f(p, scale, n):
            x = tl.load(p).to(tl.float32)
            a = tl.exp(x * 0.5)  # literal
            b = tl.math.exp(x * scale)
            c = exp(x - n)
            d = exp(tl.load(p))
            tl.store(p, a + b + c + d)
    ''')
    after = textwrap.dedent('''\
        import triton.language as tl
        from somewhere import exp


        @triton.jit
        def f(p, scale, n):
            x = tl.load(p).to(tl.float32)
            a = tl.math.exp2(x * 0.7213475204444817)  # literal
            b = tl.math.exp2(x * (scale * 1.4426950408889634))
            c = tl.math.exp2((x - n) * 1.4426950408889634)
            d = tl.math.exp2(tl.load(p).to(tl.float32) * 1.4426950408889634)
            tl.store(p, a + b + c + d)
    ''')
    r = one("SK004", before)
    assert r.source == after
    assert_contract(before, r)


def test_sk004_skips_without_exp_and_leaves_exp_helper_definitions_alone():
    helper_only = ("import triton.language as tl\n@triton.jit\ndef exp(x):\n    return tl.exp(x.to(tl.float32))\n")
    r = one("SK004", helper_only)
    assert r.status == SKIPPED
    r = one("SK004", "import triton.language as tl\n@triton.jit\ndef f(p):\n    tl.store(p, tl.sigmoid(tl.load(p)))\n")
    assert r.status == SKIPPED and "no natural exponential" in r.reason


# ------------------------------------------------------------------ SK005

def test_sk005_variants_change_the_tile_the_grid_uses_and_respect_the_register_budget():
    out = run("SK005", MINI, RewriteOptions(shape=(("K", 16), ("V", 16)), max_variants=5))
    assert 1 <= len(out) <= 5 and all(r.status == APPLIED for r in out)
    labels = [r.variant for r in out]
    assert len(set(labels)) == len(labels) and "BV=8,num_warps=1" not in labels  # never the baseline
    for r in out:
        p = dict(r.params)
        assert p["BV"] in (8, 16)  # V = 16: no tile wider than the dimension
        assert 4 <= p["elems_per_thread"] <= 128
        assert p["elems_per_thread"] == 16 * p["BV"] / (32 * p["num_warps"])
        assert f"    BV = {p['BV']}\n" in r.source and f"num_warps={p['num_warps']}," in r.source
        assert "BK = triton.next_power_of_2(K)" in r.source  # BK does not tile the grid: untouched
        assert_contract(MINI, r)


def test_sk005_skips_autotuned_kernels_and_files_without_a_launch():
    r = one("SK005", "import triton\n@triton.jit\ndef f(p):\n    pass\n")
    assert r.status == SKIPPED and "no kernel[grid]" in r.reason
    src = ("import triton\n@triton.autotune(configs=[], key=[])\n@triton.jit\ndef f(p, BV: tl.constexpr):\n    pass\n"
           "def host(x):\n    BV = 16\n    f[(triton.cdiv(8, BV),)](x, BV=BV)\n")
    r = one("SK005", src)
    assert r.status == SKIPPED and "autotuned" in r.reason


def test_sk005_prunes_everything_when_the_budget_is_tiny():
    r = one("SK005", MINI, RewriteOptions(shape=(("K", 16), ("V", 16)), extra=(("max_elems_per_thread", 3),)))
    assert r.status == SKIPPED and "elements per thread" in r.reason


# ------------------------------------------------------------------ SK006

def test_sk006_hints_by_sibling_tile_dependence():
    r = one("SK006", MINI)
    assert_contract(MINI, r)
    text = r.source
    for name in ("p_q", "p_k", "p_g", "p_beta"):
        assert f"tl.load({name}" in text and f"eviction_policy='evict_last')" in text.split(f"tl.load({name}", 1)[1].split("\n")[0]
    assert "tl.load(p_v, mask=mask_v, other=0, eviction_policy='evict_first')" in text
    assert "tl.store(p_o, b_o.to(p_o.dtype.element_ty), mask=mask_v, eviction_policy='evict_first')" in text
    assert "b_h = tl.load(p_h, mask=mask_h, other=0).to(tl.float32)" in text  # state load outside the loop


def test_sk006_needs_the_launch():
    kernel_only = MINI.split("def mini_decode(")[0]
    r = one("SK006", kernel_only)
    assert r.status == SKIPPED and "launched outside this file" in r.reason


# ------------------------------------------------------------------ SK007

SK007_BEFORE = textwrap.dedent('''\
    import triton.language as tl


    @triton.jit
    def merge(a_ptr, b_ptr, o_ptr, N, D: tl.constexpr):
        offs = tl.arange(0, D)
        acc = tl.load(a_ptr + offs[:, None] * D + offs[None, :]).to(tl.float32)
        for i in range(N):
            b = tl.load(b_ptr + i * D * D + offs[:, None] * D + offs[None, :]).to(tl.float32)
            acc = tl.dot(acc, b)
        h = tl.load(a_ptr + offs[:, None] * D + offs[None, :])
        once = tl.dot(h, h)
        tl.store(o_ptr + offs[:, None] * D + offs[None, :], acc + once)
''')


def test_sk007_marks_fp32_chains_only():
    r = one("SK007", SK007_BEFORE)
    assert '        acc = tl.dot(acc, b, input_precision="tf32x3")\n' in r.source
    assert "    once = tl.dot(h, h)\n" in r.source  # unknown dtype, single dot: left alone
    assert [c.line for c in r.changes] == [10]
    assert_contract(SK007_BEFORE, r)


def test_sk007_skips_16bit_and_explicit_precision():
    src = ("import triton.language as tl\n@triton.jit\ndef f(p):\n    a = tl.load(p).to(tl.bfloat16)\n"
           "    for i in range(3):\n        a = tl.dot(a, a)\n    tl.store(p, a)\n")
    r = one("SK007", src)
    assert r.status == SKIPPED and "not both fp32" in r.reason
    r = one("SK007", "import triton.language as tl\n@triton.jit\ndef f(p):\n    pass\n")
    assert r.status == SKIPPED and "no tl.dot" in r.reason


# ------------------------------------------------------------------ SK008

def test_sk008_adds_and_extends_do_not_specialize():
    r = one("SK008", MINI)
    assert '@triton.jit(do_not_specialize=["T"])\ndef mini_decode_kernel(' in r.source
    assert_contract(MINI, r)
    src = ("import triton\nimport triton.language as tl\n@triton.jit(do_not_specialize=['T'])\n"
           "def f(p, N: tl.int64, T: tl.int64, stride_t: tl.int64, D: tl.constexpr):\n    pass\n")
    r = one("SK008", src)
    assert "@triton.jit(do_not_specialize=['T', \"N\"])" in r.source
    r = one("SK008", "import triton\nimport triton.language as tl\n@triton.jit\ndef f(p, D: tl.constexpr):\n    pass\n")
    assert r.status == SKIPPED and "no @triton.jit kernel with a runtime shape argument" in r.reason


# ------------------------------------------------------------------ numerics (interpreter)

def _load(source: str, tmp_path: pathlib.Path, name: str):
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(f"rewritten_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _inputs(seed: int, use_gate: bool = True):
    import torch

    torch.manual_seed(seed)
    B, T, H, HV, K, V = 2, 3, 1, 2, 16, 16
    return dict(q=torch.randn(B, T, H, K), k=torch.randn(B, T, H, K), v=torch.randn(B, T, HV, V),
                g=torch.randn(B, T, HV) * 0.5, beta=torch.rand(B, T, HV), A_log=torch.randn(HV) * 0.5,
                dt_bias=torch.randn(HV) * 0.5, state=torch.randn(B, HV, K, V), use_gate=use_gate)


def _call(mod, inputs):
    args = dict(inputs, state=inputs["state"].clone())
    o = mod.mini_decode(**args)
    return o, args["state"]


def _compose(codes, source):
    for code in codes:
        rs = run(code, source, RewriteOptions(shape=(("K", 16), ("V", 16)), max_variants=1))
        assert rs[0].status == APPLIED, (code, rs[0].reason)
        source = rs[0].source
    return source


@pytest.mark.parametrize("codes", [("SK001",), ("SK003",), ("SK004",), ("SK006",), ("SK005",),
                                   ("SK003", "SK001", "SK004", "SK006", "SK008")])
def test_rewritten_kernel_matches_original_in_the_interpreter(codes, tmp_path):
    import torch

    base = _load(MINI, tmp_path, "base")
    new = _load(_compose(codes, MINI), tmp_path, "_".join(codes))
    for seed, gate in ((0, True), (1, False)):
        inputs = _inputs(seed, gate)
        o0, h0 = _call(base, inputs)
        o1, h1 = _call(new, inputs)
        ro, rh = base.reference(**{k: v for k, v in inputs.items()})
        assert torch.isfinite(o1).all() and torch.isfinite(h1).all()
        assert (o0.double() - ro).abs().max() < 1e-5  # the original is right, so agreement means something
        torch.testing.assert_close(o1, o0, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(h1, h0, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ upstream FLA files

def _fla_file(rel: str) -> str:
    root = pathlib.Path.home() / ".cache" / "skel" / "corpus"
    unpacked = root / "fla_core-0.6.0"
    if not (unpacked / rel).exists():
        root.mkdir(parents=True, exist_ok=True)
        wheel = root / "fla_core-0.6.0-py3-none-any.whl"
        if not wheel.exists():
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "fla-core==0.6.0",
                                   "-d", str(root)], capture_output=True, text=True, timeout=120)
            if proc.returncode != 0 or not wheel.exists():
                pytest.skip(f"fla-core 0.6.0 not downloadable: {proc.stderr[-300:]}")
        with zipfile.ZipFile(wheel) as z:
            z.extract(rel, unpacked)
    return (unpacked / rel).read_text()


KDA = "fla/ops/kda/fused_recurrent.py"
GDN = "fla/ops/gated_delta_rule/fused_recurrent.py"


@pytest.mark.parametrize("rel", [KDA, GDN])
def test_upstream_decode_files(rel):
    src = _fla_file(rel)
    r = one("SK001", src)
    assert "b_q = b_q * (tl.rsqrt(tl.sum(b_q * b_q) + 1e-6) * scale)" in r.source
    assert_contract(src, r)
    r = one("SK003", src)
    assert "neg_exp_b_A = -exp(b_A)" in r.source and "b_A = tl.load(A_log + i_hv)" in r.source.split("for ")[0]
    assert_contract(src, r, slack=8)
    r = one("SK004", src)
    assert "exp(" not in r.source.split("def fused_recurrent")[1].replace("exp2(", "").split("\ndef ")[0]
    assert_contract(src, r)
    variants = run("SK005", src, RewriteOptions(shape=(("K", 128), ("V", 128))))
    assert len(variants) == 8 and all(dict(v.params)["elems_per_thread"] <= 128 for v in variants)
    assert any(v.variant.startswith("BV=16,") for v in variants)
    for v in variants[:2]:
        assert_contract(src, v)
    r6 = one("SK006", src)
    r8 = one("SK008", src)
    assert r8.status == SKIPPED and r8.reason.startswith("already applied")
    if rel == GDN:
        assert "b_v = tl.load(p_v, mask=mask_v, other=0, eviction_policy='evict_first')" in r6.source
        assert "b_q = tl.load(p_q, mask=mask_k, other=0, eviction_policy='evict_last')" in r6.source
    assert_contract(src, r6)


# ------------------------------------------------------------------ the project's own targets

@pytest.mark.parametrize("family", ["kda_decode", "gdn_decode"])
def test_project_decode_targets_rewritten_match_in_the_interpreter(family, tmp_path):
    """SK003 + SK001 + SK004 + SK006 + the first SK005 variant on kernels/<family>/kernel.py,
    run on the spec's first ci shape in fp32 against the unmodified kernel."""
    import importlib

    import torch

    spec = importlib.import_module(f"skel.kernels.{family}.spec").SPEC
    path = pathlib.Path(__file__).parents[1] / "kernels" / family / "kernel.py"
    source = path.read_text()
    shape = spec.shape_sets["ci"][0]
    dims = dict(shape.dims)
    new_source = source
    for code in ("SK003", "SK001", "SK004", "SK006", "SK005"):
        r = run(code, new_source, RewriteOptions(shape=(("K", dims["K"]), ("V", dims["V"])), max_variants=1))[0]
        assert r.status == APPLIED, (code, r.reason)
        assert_contract(new_source, r, slack=8)
        new_source = r.source
    base = _load(source, tmp_path, f"{family}_base")
    new = _load(new_source, tmp_path, f"{family}_new")
    inputs = spec.make_inputs(shape, "float32", 0, "cpu")
    outs = []
    for mod in (base, new):
        args = {k: v.clone() for k, v in inputs.items()}
        o = getattr(mod, spec.entry)(**args)
        outs.append((o, args["state"]))
    assert torch.isfinite(outs[1][0]).all()
    torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(outs[1][1], outs[0][1], rtol=1e-4, atol=1e-5)
    assert not torch.equal(outs[0][1], inputs["state"])  # the state really was updated in place


def test_state_merge_target_gets_tf32x3_on_its_dot_chain():
    path = pathlib.Path(__file__).parents[1] / "kernels" / "state_merge" / "kernel.py"
    source = path.read_text()
    r = one("SK007", source)
    assert r.status == APPLIED and len(r.changes) == 1
    assert 'tl.dot(' in r.source and 'input_precision="tf32x3")' in r.source
    assert_contract(source, r)
