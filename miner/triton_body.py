"""Walk one ``@triton.jit`` function body: dataflow edges plus the memory/compute items.

The walk is a flow-sensitive abstract interpretation over the ``ast``:

- ``env`` maps each variable to the set of definition nodes that may reach the
  current point ("b_q@157"; parameters are their bare name; ``tl.program_id(a)``
  is "pid:a"). An expression's dependencies are the union over the names it reads.
- ``if``/``else``: both branches are walked (constexpr branches are resolved only
  at compile time); their environments are joined. A definition remembers the
  simple constexpr conditions it sits under (``IS_BETA_HEADWISE`` true/false), and a
  read under the opposite condition ignores it, so the two arms of the same flag do
  not mix (``p_beta`` of the headwise arm never reaches a load in the scalar arm).
- loops: the body is walked twice, the first time silently, so that values carried
  around the back edge (``p_q += H * K``, ``b_h *= ...``) reach their uses; items
  (loads, dots, ...) are recorded on the second walk only.
- memory ops get their own nodes: "load@152" (the loaded value), fed by
  "load@152:addr" (the address) and by the mask/other operands.
Control dependence (``if i_t * BT >= T: return``) is not modelled.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from skel.miner.pyexpr import Source, arg, call_name, kwarg, literal
from skel.miner.triton_dtypes import DTYPES, callee_last as _last, expr_dtype

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
# Per-token pointer strides: the increment names a head count (a [B, T, H, D] layout moves
# H * D elements per token) or a stride named for time/tokens/sequence.
HEAD_COUNT = re.compile(r"^(H|HV|HQ|HK|NH|num_heads|n_heads|nheads|num_kv_heads)$")
TOKEN_STRIDE = re.compile(r"stride\w*_(t|tok|token|seq|s|l)$|^stride_(t|tok|token|seq|s|l)\w*$", re.I)


@dataclass
class RawItem:
    """An item seen during the walk; the frontend turns these into profile dataclasses."""

    kind: str  # load | store | atomic | reduction | dot | math
    line: int
    node: ast.AST
    loop_line: int | None
    guards: tuple[str, ...]
    data: dict = field(default_factory=dict)


@dataclass
class RawLoop:
    line: int
    end_line: int
    var: str
    iter_text: str
    kind: str
    depth: int
    guards: tuple[str, ...]
    bound_deps: frozenset
    token_advance: bool = False


class BodyWalker:
    def __init__(self, fn: ast.FunctionDef, src: Source, params: list[str], math_helpers: dict[str, str]):
        self.fn, self.src, self.params = fn, src, params
        self.math_helpers = math_helpers  # bare name -> where it comes from ("fla.ops.utils.op")
        self.env: dict[str, frozenset] = {p: frozenset([p]) for p in params}
        self.def_guards: dict[str, frozenset] = {}
        self.edges: dict[tuple[str, str], None] = {}
        self.nodes: set[str] = set(params)
        self.dtype: dict[str, str] = {}
        self.block_ptrs: set[str] = set()
        self.loops: list[RawLoop] = []
        self.items: list[RawItem] = []
        self.dtypes_seen: dict[str, None] = {}
        self.assigns: list[tuple[str, int, ast.AST, frozenset]] = []  # (var, line, value, deps) in order
        self.unflatten: list[tuple[ast.Tuple, ast.Call]] = []  # i_v, i_nh = unflatten_program_id(...)
        self.loop_stack: list[RawLoop] = []
        self.guard_texts: list[str] = []
        self.guard_lits: list[tuple[str, bool]] = []
        self.recording = True
        self.target: str | None = None
        self._slots: dict[tuple[str, int], list[int]] = {}

    # ------------------------------------------------------------ graph basics
    def run(self) -> "BodyWalker":
        for a in self.fn.args.args + self.fn.args.kwonlyargs + self.fn.args.posonlyargs:
            if a.annotation is not None:
                self.deps(a.annotation)  # notes tl.int64 & co in dtypes_seen
        self.block(self.fn.body)
        return self

    def add_edges(self, deps, node: str) -> None:
        self.nodes.add(node)
        for d in deps:
            self.edges[(d, node)] = None

    def define(self, var: str, line: int, deps) -> str:
        node = f"{var}@{line}"
        self.add_edges(deps, node)
        self.env[var] = frozenset([node])
        self.def_guards[node] = frozenset(self.guard_lits)
        return node

    def memnode(self, kind: str, line: int, col: int) -> str:
        # Two ops of one kind on one line get distinct nodes ("load@92", "load@92#2"); keyed by
        # column so both walks of a loop body give an op the same name.
        cols = self._slots.setdefault((kind, line), [])
        if col not in cols:
            cols.append(col)
        i = cols.index(col)
        return f"{kind}@{line}" if i == 0 else f"{kind}@{line}#{i + 1}"

    def read(self, name: str) -> frozenset:
        defs = self.env.get(name)
        if not defs or len(defs) == 1 or not self.guard_lits:
            return defs or frozenset()
        here = set(self.guard_lits)
        keep = frozenset(d for d in defs if not any((n, not v) in here for n, v in self.def_guards.get(d, ())))
        return keep or defs

    # ------------------------------------------------------------- statements
    def block(self, stmts) -> None:
        for s in stmts:
            self.stmt(s)

    def stmt(self, s: ast.stmt) -> None:
        if isinstance(s, ast.Assign):
            self.assign(s.targets, s.value, s.lineno)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:
            self.assign([s.target], s.value, s.lineno)
        elif isinstance(s, ast.AugAssign):
            self.augassign(s)
        elif isinstance(s, ast.For):
            self.for_loop(s)
        elif isinstance(s, ast.While):
            self.while_loop(s)
        elif isinstance(s, ast.If):
            self.if_stmt(s)
        elif isinstance(s, (ast.Expr, ast.Return)) and s.value is not None:
            self.deps(s.value)
        elif isinstance(s, ast.Assert):
            self.deps(s.test)
        elif isinstance(s, ast.With):
            self.block(s.body)
        elif isinstance(s, ast.Try):
            for part in (s.body, *[h.body for h in s.handlers], s.orelse, s.finalbody):
                self.block(part)

    def assign(self, targets, value, line: int) -> None:
        if isinstance(value, ast.Call) and isinstance(targets[0], ast.Tuple) and "program_id" in (call_name(value) or "") \
                and not (call_name(value) or "").startswith("tl."):
            self.unflatten.append((targets[0], value))
        for t in targets:
            if isinstance(t, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
                    and len(t.elts) == len(value.elts) and not any(isinstance(e, ast.Starred) for e in t.elts):
                # Evaluate every right-hand side before binding (a, b = b, a).
                parts = []
                for sub_t, sub_v in zip(t.elts, value.elts):
                    self.target = sub_t.id if isinstance(sub_t, ast.Name) else None
                    parts.append((sub_t, sub_v, self.deps(sub_v)))
                self.target = None
                for sub_t, sub_v, d in parts:
                    self.bind(sub_t, sub_v, d, line)
            else:
                self.target = t.id if isinstance(t, ast.Name) else None
                d = self.deps(value)
                self.target = None
                self.bind(t, value, d, line)

    def bind(self, target, value, deps, line: int) -> None:
        if isinstance(target, ast.Name):
            self.define(target.id, line, deps)
            self.dtype[target.id] = expr_dtype(self.dtype, value)
            self.assigns.append((target.id, line, value, deps))
            if self.is_block_ptr_expr(value):
                self.block_ptrs.add(target.id)
            else:
                self.block_ptrs.discard(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            for e in target.elts:
                self.bind(e.value if isinstance(e, ast.Starred) else e, value, deps, line)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            base = target.value
            while isinstance(base, (ast.Subscript, ast.Attribute)):
                base = base.value
            if isinstance(base, ast.Name):
                self.define(base.id, line, deps | self.read(base.id))

    def augassign(self, s: ast.AugAssign) -> None:
        line = s.lineno
        self.target = s.target.id if isinstance(s.target, ast.Name) else None
        d = self.deps(s.value)
        self.target = None
        if isinstance(s.op, ast.Div):
            self.record("math", s, op="div", numerator=self.src.text(s.target), denominator=s.value)
        if isinstance(s.target, ast.Name):
            name = s.target.id
            self.define(name, line, d | self.read(name))
            self.assigns.append((name, line, s, d))
            if isinstance(s.op, (ast.Add, ast.Sub)):
                self.note_advance(name, s.value)
        else:
            self.bind(s.target, s.value, d, line)

    def note_advance(self, name: str, incr: ast.AST) -> None:
        """A pointer moved inside the innermost loop by a per-token stride marks that loop as the time loop."""
        if not self.loop_stack:
            return
        names = {n.id for n in ast.walk(incr) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(incr) if isinstance(n, ast.Attribute)}
        if any(HEAD_COUNT.match(n) or TOKEN_STRIDE.search(n) for n in names):
            self.loop_stack[-1].token_advance = True

    # ------------------------------------------------------------------ loops
    def for_loop(self, s: ast.For) -> None:
        it = s.iter
        name = call_name(it) if isinstance(it, ast.Call) else None
        kind = {"range": "range", "tl.range": "tl.range", "tl.static_range": "static_range",
                "triton.language.range": "tl.range", "triton.language.static_range": "static_range"}.get(name or "", "for")
        bound = self.deps(it)
        var = s.target.id if isinstance(s.target, ast.Name) else self.src.text(s.target)
        loop = RawLoop(s.lineno, s.end_lineno, var, self.src.text(it), kind, len(self.loop_stack),
                       tuple(self.guard_texts), bound)
        self.loop_body(loop, s.body, lambda: self.bind(s.target, it, bound, s.lineno))
        self.block(s.orelse)

    def while_loop(self, s: ast.While) -> None:
        loop = RawLoop(s.lineno, s.end_lineno, "", self.src.text(s.test), "while", len(self.loop_stack),
                       tuple(self.guard_texts), frozenset())
        loop.bound_deps = self.deps(s.test)
        self.loop_body(loop, s.body, lambda: None, test=s.test)
        self.block(s.orelse)

    def loop_body(self, loop: RawLoop, body, bind_var, test=None) -> None:
        outer_recording = self.recording
        self.loop_stack.append(loop)
        before = dict(self.env)
        for final in (False, True):
            self.recording = outer_recording and final
            bind_var()
            if test is not None and final:
                loop.bound_deps = loop.bound_deps | self.deps(test)
            self.block(body)
            if not final:  # join the back edge: the second walk sees both entry and carried values
                self.env = _join(before, self.env)
        self.env = _join(before, self.env)  # zero-trip loops keep the entry values
        self.loop_stack.pop()
        self.recording = outer_recording
        if outer_recording:
            self.loops.append(loop)

    # --------------------------------------------------------------- branches
    def if_stmt(self, s: ast.If) -> None:
        self.deps(s.test)
        text = self.src.text(s.test)
        lits = _literals(s.test, set(self.params))
        before = dict(self.env)
        self._guarded(text, lits, s.body)
        after_body = self.env
        self.env = dict(before)
        if s.orelse:
            neg = [(lits[0][0], not lits[0][1])] if len(lits) == 1 else []
            self._guarded(f"not ({text})" if not neg else _neg_text(text), neg, s.orelse)
        self.env = _join(after_body, self.env)

    def _guarded(self, text: str, lits, body) -> None:
        self.guard_texts.append(text)
        self.guard_lits.extend(lits)
        self.block(body)
        del self.guard_lits[len(self.guard_lits) - len(lits):]
        self.guard_texts.pop()

    # ----------------------------------------------------------- expressions
    def deps(self, e: ast.AST | None) -> frozenset:
        """Definition nodes the value of ``e`` depends on; records items met on the way."""
        if e is None:
            return frozenset()
        if isinstance(e, ast.Name):
            return self.read(e.id)
        if isinstance(e, ast.Constant):
            return frozenset()
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.BinOp):
            d = self.deps(e.left) | self.deps(e.right)
            if isinstance(e.op, ast.Div):
                self.record("math", e, op="div", numerator=self.src.text(e.left), denominator=e.right)
            return d
        if isinstance(e, ast.Attribute):
            if e.attr in DTYPES and isinstance(e.value, ast.Name) and e.value.id == "tl":
                self.dtypes_seen.setdefault(f"tl.{e.attr}")
            return self.deps(e.value)
        if isinstance(e, ast.Subscript):
            return self.deps(e.value) | self.deps(e.slice)
        if isinstance(e, (ast.Tuple, ast.List)):
            out = frozenset()
            for x in e.elts:
                out |= self.deps(x)
            return out
        if isinstance(e, ast.UnaryOp):
            return self.deps(e.operand)
        if isinstance(e, ast.Compare):
            out = self.deps(e.left)
            for x in e.comparators:
                out |= self.deps(x)
            return out
        if isinstance(e, ast.IfExp):
            return self.deps(e.test) | self.deps(e.body) | self.deps(e.orelse)
        if isinstance(e, ast.Lambda):
            return frozenset()
        out = frozenset()
        for child in ast.iter_child_nodes(e):
            if isinstance(child, ast.expr):
                out |= self.deps(child)
            elif isinstance(child, (ast.comprehension, ast.keyword)):
                out |= self.deps(child.iter if isinstance(child, ast.comprehension) else child.value)
        return out

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


def _join(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = out[k] | v if k in out else v
    return out


def _literals(test: ast.AST, params: set[str]) -> list[tuple[str, bool]]:
    """Simple constexpr conditions a branch establishes: ``FLAG``, ``not FLAG``, ``A and B``."""
    if isinstance(test, ast.Name) and test.id in params:
        return [(test.id, True)]
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and isinstance(test.operand, ast.Name) \
            and test.operand.id in params:
        return [(test.operand.id, False)]
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        out = []
        for v in test.values:
            out += _literals(v, params)
        return out
    return []


def _neg_text(text: str) -> str:
    return text[4:].strip() if text.startswith("not ") else f"not {text}"
