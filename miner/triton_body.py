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
What a call means and how an item is recorded lives in ``triton_body_ops``.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from skel.miner.pyexpr import Source, call_name
from skel.miner.triton_body_ops import OpRecorder, RawItem
from skel.miner.triton_dtypes import DTYPES, expr_dtype

# Per-token pointer strides: the increment names a head count (a [B, T, H, D] layout moves
# H * D elements per token) or a stride named for time/tokens/sequence.
HEAD_COUNT = re.compile(r"^(H|HV|HQ|HK|NH|num_heads|n_heads|nheads|num_kv_heads)$")
TOKEN_STRIDE = re.compile(r"stride\w*_(t|tok|token|seq|s|l)$|^stride_(t|tok|token|seq|s|l)\w*$", re.I)


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


class BodyWalker(OpRecorder):
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
        for d in sorted(deps):  # deps are sets: sorted, a profile is the same in every process (content-keyed merges)
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
