"""Recording of the operations in a ``@triton.jit`` body, for ``triton_body``'s walker.

``OpRecorder`` is the mixin half of ``triton_body.BodyWalker`` that decides what a call
means (``tl.program_id``, loads, stores and atomics, tensor-descriptor accesses,
reductions, ``tl.dot``, math and divisions) and records it as a ``RawItem``, giving
memory ops their own dataflow nodes. The walker owns the state it reads and writes
(``env``, ``src``, ``dtype``, ``block_ptrs``, ``items``, ``loop_stack``, ``guard_texts``,
``recording``, ``target``, ``math_helpers``) and ``deps``, ``memnode``, ``add_edges``.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from skel.miner.pyexpr import Source, arg, call_name, kwarg, literal
from skel.miner.triton_dtypes import callee_last as _last, expr_dtype

MATH = {
    "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "sqrt_rn", "rsqrt", "sigmoid", "softplus", "tanh",
    "erf", "sin", "cos", "pow", "silu", "gelu", "fast_expf", "fast_exp", "safe_exp", "fast_logf", "fast_log2f",
    "fast_tanhf", "fast_dividef", "div_rn", "fdiv",
}
DIV_CALLS = {"fdiv", "div_rn", "fast_dividef"}
REDUCTIONS = {"sum", "max", "min", "argmax", "argmin", "reduce", "cumsum", "cumprod", "associative_scan", "xor_sum"}
ATOMICS = {"atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor"}
BLOCK_PTR_CALLS = {"make_block_ptr", "advance", "make_tensor_descriptor"}
TL_PREFIXES = ("tl.", "triton.language.", "triton.", "tldevice.", "libdevice.", "tle.")


@dataclass
class RawItem:
    """An item seen during the walk; the frontend turns these into profile dataclasses."""

    kind: str  # load | store | atomic | reduction | dot | math
    line: int
    node: ast.AST
    loop_line: int | None
    guards: tuple[str, ...]
    data: dict = field(default_factory=dict)


class OpRecorder:
    """Call and memory-op recording for ``triton_body.BodyWalker`` (a mixin: it has no state of its own)."""

    def call(self, c: ast.Call) -> frozenset:
        name = call_name(c) or ""
        last = _last(c)
        is_tl = name.startswith(TL_PREFIXES)
        if name in ("tl.program_id", "triton.language.program_id"):
            axis = literal(arg(c, 0, "axis"))
            return frozenset([f"pid:{axis if isinstance(axis, int) else '?'}"])
        if "program_id" in last and not is_tl:  # helpers that unflatten the program id
            return frozenset(["pid:0"]) | self._args_deps(c)
        if is_tl and last in ("load", "store") or (is_tl and last in ATOMICS):
            return self.memop(c, "atomic" if last in ATOMICS else last)
        if not is_tl and isinstance(c.func, ast.Attribute) and last in ("load", "store") \
                and isinstance(c.func.value, ast.Name) and c.func.value.id in self.env:
            return self.memop(c, last, descriptor=c.func.value)  # tensor descriptor desc.load([..])
        d = self._args_deps(c)
        if isinstance(c.func, ast.Attribute) and not is_tl:
            d |= self.deps(c.func.value)  # method call: x.to(...), x.sum(0)
        if last in REDUCTIONS and (is_tl or (isinstance(c.func, ast.Attribute) and not is_tl
                                             and _receiver_is_var(c, self.env))):
            method = not is_tl
            axis = arg(c, 0 if method else 1, "axis")
            self.record("reduction", c, op=last, axis=None if axis is None else self.src.text(axis))
        elif last == "dot" and is_tl:
            self.record("dot", c)
        elif last in MATH and (is_tl or name == last or name.startswith(("libdevice", "tldevice", "math."))):
            if last in DIV_CALLS:
                self.record("math", c, op="div", numerator=_text(self.src, arg(c, 0)), denominator=arg(c, 1))
            else:
                via = name if is_tl or name != last else self.math_helpers.get(last, "?")
                self.record("math", c, op=last, via=via, argument=_text(self.src, arg(c, 0)))
        return d

    def _args_deps(self, c: ast.Call) -> frozenset:
        d = frozenset()
        for a in c.args:
            d |= self.deps(a.value if isinstance(a, ast.Starred) else a)
        for kw in c.keywords:
            d |= self.deps(kw.value)
        return d

    def memop(self, c: ast.Call, kind: str, descriptor: ast.AST | None = None) -> frozenset:
        node = self.memnode(kind, c.lineno, c.col_offset)
        if descriptor is not None:
            # desc.load([offsets]) / desc.store([offsets], value): the descriptor and the
            # offsets form the address; out-of-bounds boxes are clipped by the hardware (TMA).
            ptr_node, addr, rest = descriptor, self.deps(descriptor) | self._args_deps(c), []
            mask = None
        else:
            ptr_node = arg(c, 0, "pointer")
            addr = self.deps(ptr_node)
            rest = list(c.args[1:]) + [k.value for k in c.keywords if k.arg != "pointer"]
            mask = arg(c, 1 if kind == "load" else 2, "mask")
        other = frozenset()
        for r in rest:
            other |= self.deps(r)
        self.add_edges(addr, f"{node}:addr")
        self.add_edges(frozenset([f"{node}:addr"]) | other, node)
        is_load = kind == "load"
        self.record(kind, c, node=node, pointer=ptr_node,
                    masked=descriptor is not None or mask is not None or kwarg(c, "boundary_check") is not None,
                    eviction_policy=literal(arg(c, 6, "eviction_policy") if is_load else kwarg(c, "eviction_policy")),
                    cache_modifier=literal(arg(c, 5, "cache_modifier") if is_load else kwarg(c, "cache_modifier")),
                    block_ptr=descriptor is not None or self.is_block_ptr_expr(ptr_node),
                    target=self.target if is_load else None)
        return frozenset([node])

    def is_block_ptr_expr(self, e: ast.AST | None) -> bool:
        if isinstance(e, ast.Call):
            last = (call_name(e) or "").rsplit(".", 1)[-1]
            if last in BLOCK_PTR_CALLS:
                return True
        return isinstance(e, ast.Name) and e.id in self.block_ptrs

    def record(self, kind: str, at: ast.AST, **data) -> None:
        if not self.recording:
            return
        node = at
        if kind == "math" and data.get("op") == "div":
            den = data["denominator"]
            data["denominator_calls"] = ",".join(
                dict.fromkeys(call_name(n) or "?" for n in ast.walk(den) if isinstance(n, ast.Call)))
            data["denominator_dtype"] = expr_dtype(self.dtype, den)
            data["denominator"] = self.src.text(den)
        if kind == "dot":
            data["operand_dtypes"] = (expr_dtype(self.dtype, arg(node, 0, "input")), expr_dtype(self.dtype, arg(node, 1, "other")))
        if kind in ("reduction", "math"):
            first = arg(node, 0) if isinstance(node, ast.Call) else None
            if first is not None:
                data.setdefault("dtype", expr_dtype(self.dtype, first))
        loop = self.loop_stack[-1].line if self.loop_stack else None
        self.items.append(RawItem(kind, node.lineno, node, loop, tuple(self.guard_texts), data))


def _receiver_is_var(c: ast.Call, env) -> bool:
    v = c.func.value
    while isinstance(v, (ast.Subscript, ast.Call, ast.Attribute)):
        v = v.value if not isinstance(v, ast.Call) else v.func
    return isinstance(v, ast.Name) and v.id in env


def _text(src: Source, node: ast.AST | None) -> str:
    return "" if node is None else src.text(node)
