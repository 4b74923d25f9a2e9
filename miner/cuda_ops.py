"""Vocabulary of the CUDA frontend: which call or PTX instruction is a load with a cache
hint, a shuffle reduction, an exp2, an mma; what role a block-index variable plays.

Pure functions over names and strings, so ``cuda_body`` stays about tree walking.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from skel.catalog.records import MathOp

# The lookahead lists the first characters of the alternatives: same matches, found without
# trying every alternative at every offset.
DTYPE = re.compile(
    r"(?=[_hnfdcbtui])\b(?:__half2?|half2?|__nv_bfloat162?|nv_bfloat162?|__nv_fp8x?[24]?_e[45]m[23]|__nv_fp8_e8m0|"
    r"__nv_fp4x?[24]?_e2m1|float[24]?|double|(?:cutlass::|cute::)?(?:half_t|bfloat16_t|float_e4m3_t|"
    r"float_e5m2_t|tfloat32_t)|u?int8_t)\b"
)

_TEMPLATE_ARGS = re.compile(r"<[^<>]*>")


def call_name(fn_text: str) -> tuple[str, str]:
    """(last name component without template arguments, the full callee text)."""
    s = fn_text
    for _ in range(5):  # nested template arguments, innermost first
        s2 = _TEMPLATE_ARGS.sub("", s)
        if s2 == s:
            break
        s = s2
    parts = re.split(r"::|\.|->", s)
    return parts[-1].strip(), fn_text


# --- memory ---------------------------------------------------------------------------
_LOAD_HINTS = {"__ldg": ("__ldg", None), "__ldcs": (".cs", "evict_first"), "__ldcg": (".cg", None),
               "__ldca": (".ca", None), "__ldlu": (".lu", "evict_first"), "__ldcv": (".cv", None)}
_STORE_HINTS = {"__stcs": (".cs", "evict_first"), "__stcg": (".cg", None), "__stwb": (".wb", None),
                "__stwt": (".wt", None)}
_ATOMIC = re.compile(r"atomic(Add|Sub|Max|Min|Exch|CAS|And|Or|Xor|Inc|Dec)(?:_block|_system)?\Z")
_NOT_A_COPY = re.compile(r"commit|wait|fence|arrive|barrier|init|prefetch_desc", re.I)


def is_async_copy(name: str, full: str) -> bool:
    if _NOT_A_COPY.search(name):
        return False
    low = name.lower()
    return ("memcpy_async" in low or ("cp_async" in full and ("load" in low or "copy" in low))
            or low.startswith("cp_async") or ("load" in low and "async" in low) or _is_tma(name, full))


def _is_tma(name: str, full: str) -> bool:
    low = name.lower()
    return ("tma" in low or "bulk_tensor" in low) and ("load" in low or "copy" in low or "store" in low) \
        and not _NOT_A_COPY.search(name)


def memory_call(name: str, full: str):
    """(kind, cache_modifier, eviction_policy, block_ptr) for a memory intrinsic, else None."""
    if name in _LOAD_HINTS:
        mod, ev = _LOAD_HINTS[name]
        return "load", mod, ev, False
    if name in _STORE_HINTS:
        mod, ev = _STORE_HINTS[name]
        return "store", mod, ev, False
    if _ATOMIC.match(name):
        return "atomic", None, None, False
    if _is_tma(name, full):
        return ("store" if "store" in name.lower() else "load"), "cp.async.bulk.tensor", None, True
    if is_async_copy(name, full):
        return "load", "cp.async", None, False
    return None


# --- reductions -------------------------------------------------------------------------
def reduction_call(name: str, full: str) -> str | None:
    bare = name.lstrip("_")
    if re.fullmatch(r"shfl_(xor|down|up)(_sync)?", bare):
        return "warp-shuffle"
    if bare in ("shfl_sync", "shfl"):
        return "warp-broadcast"
    if re.fullmatch(r"reduce_(add|min|max|and|or|xor)_sync", bare):
        return "warp-reduce"
    m = _ATOMIC.match(name)
    if m:
        return "atomic-" + m.group(1).lower()
    if "BlockReduce" in full and name in ("Sum", "Reduce", "Max", "Min"):
        return "block-reduce"
    if "WarpReduce" in full and name in ("Sum", "Reduce", "Max", "Min"):
        return "warp-reduce"
    if name == "reduce" and ("cg::" in full or "cooperative_groups" in full):
        return "cg-reduce"
    return _WRAPPERS.get((_namespace(full), bare.lower())) or _WRAPPERS.get(("", bare.lower()))


# Reductions that libraries wrap (data, not code): (namespace or "", function name) -> op.
# FlashInfer's warp::/cta:: helpers, the common warpReduceSum/blockReduceSum helpers, CUTLASS's.
_WRAPPERS = {
    **{("warp", f"reduce_{op}"): "warp-reduce" for op in ("sum", "max", "min")},
    **{("cta", f"reduce_{op}"): "block-reduce" for op in ("sum", "max", "min")},
    **{("block", f"reduce_{op}"): "block-reduce" for op in ("sum", "max", "min")},
    **{("", f"warpreduce{op}"): "warp-reduce" for op in ("sum", "max", "min")},
    **{("", f"warp_reduce_{op}"): "warp-reduce" for op in ("sum", "max", "min")},
    **{("", f"blockreduce{op}"): "block-reduce" for op in ("sum", "max", "min")},
    **{("", f"block_reduce_{op}"): "block-reduce" for op in ("sum", "max", "min")},
}


def _namespace(full: str) -> str:
    """The innermost namespace of a qualified call (``flashinfer::warp::reduce_sum<T>`` -> ``warp``)."""
    parts = re.split(r"::", re.sub(r"<[^<>]*>", "", full.split("(")[0]).strip())
    return parts[-2].strip() if len(parts) >= 2 else ""


# --- math ---------------------------------------------------------------------------------
_MATH = {}
for _op, _names in {
    "exp": "expf __expf exp hexp h2exp ptx_exp",
    "exp2": "exp2f exp2 hexp2 h2exp2 ptx_exp2 fast_exp2 __exp2f",
    "log": "logf __logf log hlog h2log ptx_log",
    "log2": "log2f __log2f log2 hlog2 h2log2 ptx_log2 fast_log2",
    "sqrt": "sqrtf sqrt __fsqrt_rn __fsqrt_rd __fsqrt_ru __fsqrt_rz hsqrt h2sqrt ptx_sqrt",
    "rsqrt": "rsqrtf rsqrt __frsqrt_rn hrsqrt h2rsqrt ptx_rsqrt",
    "rcp": "__frcp_rn __frcp_rd __frcp_ru __frcp_rz hrcp h2rcp ptx_rcp __drcp_rn",
    "div": "__fdividef fdividef __fdiv_rn __fdiv_rd __fdiv_ru __fdiv_rz __ddiv_rn",
    "tanh": "tanhf tanh ptx_tanh htanh h2tanh tanh_approx",
    "sigmoid": "sigmoid sigmoidf",
    "softplus": "softplus softplusf",
    "log1p": "log1pf log1p",
    "expm1": "expm1f expm1",
    "sin": "sinf __sinf sin", "cos": "cosf __cosf cos",
    "pow": "powf __powf pow", "erf": "erff erf",
}.items():
    for _n in _names.split():
        _MATH[_n] = _op


def math_call(name: str) -> str | None:
    return _MATH.get(name)


_LOG2E = re.compile(r"log2e|LOG2E|1\.442695|1\.44269|M_LOG2E|log2_e", re.I)


def mark_log2e(math: list[MathOp], edges, def_text: dict[str, str] | None = None) -> list[MathOp]:
    """Add ("log2e", "yes") to exp2 ops whose argument carries a log2(e) factor, directly or
    through a variable defined (up to three assignments back) with one."""
    if not any(m.op == "exp2" for m in math):
        return list(math)
    def_text = def_text or {}
    par: dict[str, set[str]] = {}
    for a, b in edges:
        par.setdefault(b, set()).add(a)
    by_name: dict[str, list[str]] = {}
    for node in set(par) | {a for a, _ in edges}:
        by_name.setdefault(node.split("@")[0], []).append(node)
    out = []
    for m in math:
        if m.op != "exp2":
            out.append(m)
            continue
        arg = dict(m.detail).get("arg", m.text)
        hit = bool(_LOG2E.search(arg))
        if not hit:
            frontier = {n for name in re.findall(r"[A-Za-z_]\w*", arg) for n in by_name.get(name, ())
                        if "@" not in n or int(n.split("@")[1]) <= m.line}
            seen = set(frontier)
            for _ in range(3):
                if any(_LOG2E.search(def_text.get(n, "")) or _LOG2E.search(n) for n in seen):
                    hit = True
                    break
                frontier = {p for x in frontier for p in par.get(x, ())} - seen
                seen |= frontier
        detail = m.detail + ((("log2e", "yes"),) if hit else (("log2e", "no"),))
        out.append(MathOp(m.op, m.line, m.text, m.loop_line, detail))
    return out


# --- dots -----------------------------------------------------------------------------------
_DOT_EXCLUDE = re.compile(r"fence|commit|wait|arrive|init|desc|ldmatrix|stmatrix|load|store", re.I)
_DT = {"bf16": "bf16", "f16": "fp16", "fp16": "fp16", "half": "fp16", "tf32": "tf32", "f32": "fp32",
       "fp32": "fp32", "float": "fp32", "e4m3": "fp8e4m3", "e5m2": "fp8e5m2", "s8": "int8",
       "u8": "uint8", "f64": "fp64", "e2m1": "fp4e2m1", "s32": "int32"}
_DT_TOKEN = re.compile(r"bf16|tf32|fp16|f16|half|fp32|f32|float|e4m3|e5m2|e2m1|f64|s8|u8|s32")


def is_dot_call(name: str, full: str) -> bool:
    low = name.lower()
    return ("mma" in low or low == "gemm" or low.startswith("hmma")) and not _DOT_EXCLUDE.search(name)


def dot_dtypes(text: str) -> tuple[tuple[str, ...], str | None]:
    """Operand dtypes of an mma call from its name/template arguments (A, B first)."""
    toks = [_DT[t] for t in _DT_TOKEN.findall(text)]
    operands = tuple(toks[:2]) if len(toks) >= 2 else (tuple(toks * 2) if toks else ("?",))
    return operands, ("tf32" if "tf32" in operands else None)


# --- PTX inline assembly ---------------------------------------------------------------------
@dataclass(frozen=True)
class PtxInstruction:
    opcode: str
    kind: str  # load | store | atomic | reduction | math | dot
    op: str = ""
    modifier: str | None = None
    evict: str | None = None
    block: bool = False
    operand: int = 0  # which input operand is the global address
    dtypes: tuple[str, ...] = ()
    precision: str | None = None


_PTX_MATH = {"ex2": "exp2", "lg2": "log2", "rsqrt": "rsqrt", "sqrt": "sqrt", "rcp": "rcp",
             "tanh": "tanh", "div": "div", "sin": "sin", "cos": "cos"}
_PTX_TYPES = re.compile(r"\A(?:[bsuf](?:8|16|32|64)|bf16x?2?|f16x2|tf32|e4m3|e5m2|e2m1|pred)\Z")
_VECTOR = re.compile(r"\Av\d\Z")


def ptx_instructions(ptx: str) -> list[PtxInstruction]:
    out = []
    for stmt in re.split(r"[;\n]", ptx.replace("\\n", "\n").replace("\\t", " ")):
        stmt = stmt.strip().lstrip("{}").strip()
        stmt = re.sub(r"^@!?\w+\s+", "", stmt)  # predicate guard
        if not stmt:
            continue
        opcode = stmt.split()[0]
        ins = _classify(opcode)
        if ins is not None:
            out.append(ins)
    return out


def _classify(opcode: str) -> PtxInstruction | None:
    parts = opcode.split(".")
    head = parts[0]
    quals = [p for p in parts[1:] if not _PTX_TYPES.match(p) and not _VECTOR.match(p)]
    evict = "evict_last" if "evict_last" in opcode else (
        "evict_first" if ("evict_first" in opcode or ".cs" in opcode or ".lu" in opcode) else None)
    if head == "ld" and "global" in parts:
        mods = [q for q in quals if q != "global"]
        return PtxInstruction(opcode, "load", modifier="." + ".".join(mods) if mods else "ld.global", evict=evict)
    if head == "st" and "global" in parts:
        mods = [q for q in quals if q != "global"]
        return PtxInstruction(opcode, "store", modifier="." + ".".join(mods) if mods else "st.global", evict=evict)
    if head == "cp" and len(parts) > 1 and parts[1] == "async":
        if "bulk" in parts:
            spaces = [p for p in parts if p == "global" or p.startswith("shared")]
            kind = "store" if spaces and spaces[0] == "global" else "load"
            return PtxInstruction(opcode, kind, modifier="cp.async.bulk.tensor" if "tensor" in parts
                                  else "cp.async.bulk", evict=evict, block=True, operand=1)
        if parts[2:3] and parts[2] in ("ca", "cg"):
            return PtxInstruction(opcode, "load", modifier="cp.async." + parts[2], evict=evict, operand=1)
        return None
    if head in ("red", "atom") and "shared" not in parts:
        op = next((p for p in parts[1:] if p in ("add", "max", "min", "exch", "cas", "and", "or", "xor", "inc", "dec")), "op")
        return PtxInstruction(opcode, "atomic", op="atomic-" + op)
    if head == "shfl":
        return PtxInstruction(opcode, "reduction", op="warp-broadcast" if "idx" in parts else "warp-shuffle")
    if head == "redux":
        return PtxInstruction(opcode, "reduction", op="warp-reduce")
    if head in _PTX_MATH and len(parts) > 1:
        return PtxInstruction(opcode, "math", op=_PTX_MATH[head])
    if head in ("mma", "wgmma", "tcgen05") and ("mma" in parts or head == "mma" or "mma_async" in parts):
        types = [_DT[p] for p in parts if p in _DT]
        kind = next((p.split("::")[1] for p in parts if p.startswith("kind::")), None)
        if len(types) >= 3:
            dts = (types[1], types[2])
        elif kind:
            dts = (_DT.get(kind, kind),) * 2
        else:
            dts = ("?",)
        return PtxInstruction(opcode, "dot", dtypes=dts, precision="tf32" if "tf32" in dts else None)
    return None


# --- program-axis roles -------------------------------------------------------------------------
def axis_role(name: str) -> str | None:
    n = name.lower()
    if re.search(r"chunk|split|partition|kv_tile", n):
        return "kv-split"
    if re.search(r"head|(^|_)h[qkv]?(_|$)|^i_?h[qkv]?$", n):
        return "head"
    if re.search(r"batch|request|(^|_)req(_|$)|(^|_)b(_|$)|^i_?[bn]$|seq_idx|seq_id", n):
        return "batch"
    if re.search(r"tile|blk|block|(^|_)cta|^i_?[vkmt]$", n):
        return "tile"
    return None
