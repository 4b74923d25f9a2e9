"""Element types of Triton expressions, as far as a local, static look can tell.

``expr_dtype(env, e)`` answers "fp32" / "bf16" / "fp16" / ... / "elem" (cast to a
pointer's element type) / "const" (a Python literal, typed by its partner) / "?".
It follows what a value is made of: ``x.to(tl.float32)``, ``tl.zeros(..., dtype=...)``,
``tl.dot`` (fp32 accumulators unless ``out_dtype``), and variables through ``env``
(variable -> dtype at its last assignment). A raw ``tl.load`` is "?": the pointer's
element type is a launch-time fact.
"""
from __future__ import annotations

import ast

from skel.miner.pyexpr import arg, call_name, dotted, kwarg

DTYPES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64", "float8e4nv": "fp8",
    "float8e5": "fp8", "float8e4b15": "fp8", "float8e4b8": "fp8", "float8e5b16": "fp8", "int8": "i8",
    "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint32": "u32", "uint64": "u64", "int1": "i1",
}
_TL = ("tl.", "triton.language.", "triton.", "tldevice.", "libdevice.", "tle.")


def callee_last(c: ast.Call) -> str:
    """The called name's last part, also for ``tl.load(p).to`` whose receiver is not a name."""
    f = c.func
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""


def dtype_of(e: ast.AST | None) -> str:
    """``tl.float32`` / ``"bf16"``-style strings / ``p.dtype.element_ty`` -> short name."""
    d = dotted(e) if e is not None else None
    if d and d.rsplit(".", 1)[-1] in DTYPES:
        return DTYPES[d.rsplit(".", 1)[-1]]
    if isinstance(e, ast.Constant) and isinstance(e.value, str):
        return DTYPES.get(e.value, e.value)
    if d and d.endswith("element_ty"):
        return "elem"
    return "?"


def expr_dtype(env: dict[str, str], e: ast.AST | None) -> str:
    if e is None:
        return "?"
    if isinstance(e, ast.Name):
        return env.get(e.id, "?")
    if isinstance(e, ast.Constant):
        return "const"
    if isinstance(e, ast.Call):
        return _call_dtype(env, e)
    if isinstance(e, ast.BinOp):
        a, b = expr_dtype(env, e.left), expr_dtype(env, e.right)
        if "fp32" in (a, b):
            return "fp32"
        if a == "const":
            return b
        return a if b in ("const", a) else "?"
    if isinstance(e, ast.UnaryOp):
        return expr_dtype(env, e.operand)
    if isinstance(e, ast.Subscript):
        return expr_dtype(env, e.value)
    if isinstance(e, ast.IfExp):
        a, b = expr_dtype(env, e.body), expr_dtype(env, e.orelse)
        return b if a == "const" else a if b in ("const", a) else "?"
    return "?"


def _call_dtype(env: dict[str, str], e: ast.Call) -> str:
    last = callee_last(e)
    if last == "to" and isinstance(e.func, ast.Attribute):
        return dtype_of(arg(e, 0, "dtype"))
    if last in ("zeros", "full", "zeros_like", "full_like", "empty", "arange"):
        dt = kwarg(e, "dtype")
        if dt is not None:
            return dtype_of(dt)
        return "i32" if last == "arange" else "?"
    if last == "dot":
        out = kwarg(e, "out_dtype")
        return dtype_of(out) if out is not None else "fp32"
    if last == "load" or not e.args:
        return "?"
    # elementwise math keeps its operand's type: tl.exp(x), helper(x), x.sum(0)
    method = isinstance(e.func, ast.Attribute) and not (call_name(e) or "").startswith(_TL)
    return expr_dtype(env, e.func.value if method else e.args[0])
