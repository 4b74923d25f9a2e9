"""What a CUDA kernel body does, read from its tree-sitter tree (see ``cuda_frontend``).

One walk over the body records definitions and uses (the dataflow edge list, SSA-ish
``name@line`` nodes, ``pid:0/1/2`` for ``blockIdx.x/y/z``, ``tid:0/1/2`` for ``threadIdx``),
loops, memory operations, reductions, math and dots. Recording of the operations
themselves (memory accesses, calls, inline PTX, divisions) is the ``OpRecorder`` mixin of
``cuda_body_ops``; classification of names (which call is a shuffle, an exp2, an mma; what
a PTX string does) lives in ``cuda_ops``.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter

from skel.miner import cuda_ops as ops
from skel.miner.cuda_body_ops import OpRecorder
from skel.miner.cuda_graph import axes, base_name, first_declared, mark_time_loops, reads
from skel.miner.cuda_graph import node_text as _t
from skel.catalog.records import Dot, Loop, MathOp, MemOp, Param, Reduction, SharedArray

_AXES = {"x": 0, "y": 1, "z": 2}
_LOOPS = {"for_statement": "for", "while_statement": "while", "do_statement": "do",
          "for_range_loop": "for-range"}


_first = itemgetter(0)


@dataclass
class BodyFacts:
    axes: tuple = ()
    loops: tuple = ()
    memops: tuple = ()
    reductions: tuple = ()
    dots: tuple = ()
    math: tuple = ()
    shared: tuple = ()
    dataflow: tuple = ()
    notes: list = field(default_factory=list)


@dataclass
class _LoopCtx:
    node: object
    line: int
    var: str
    defined: set = field(default_factory=set)  # names assigned inside the loop
    end_byte: int = 0  # node.end_byte, read once per use by edges()


class _Walker(OpRecorder):
    def __init__(self, params: list[Param], device_fns: dict[str, int], fn):
        # Lines from byte offsets: Node.start_point builds a Point per call, ten times the
        # cost of a bisect over the kernel's newline offsets.
        self._first_byte, self._first_line = fn.start_byte, fn.start_point[0] + 1
        self._newlines = [m.start() for m in re.finditer(b"\n", fn.text)]
        self._handlers = _handlers_by_kind()  # plain functions: no reference cycle through self
        self.types: dict[str, str] = {p.name: p.annotation or "" for p in params}
        self.pointers = {p.name for p in params if p.annotation and "*" in p.annotation}
        self.shared: set[str] = set()
        self.shared_rows: list[SharedArray] = []
        self.device_fns = device_fns
        self.defs: dict[str, list[tuple[int, int, str, object]]] = {}  # name -> (end_byte, line, node, loop)
        self.uses: list[tuple[str, int, str, tuple]] = []  # (name, byte, target node, loops)
        self.loops: list[Loop] = []
        self.loop_ctx: list[_LoopCtx] = []
        self.memops: list[MemOp] = []
        self.reductions: list[Reduction] = []
        self.math: list[MathOp] = []
        self.dots: list[Dot] = []
        self.axis_first: dict[int, int] = {}
        self.guards: list[str] = []
        self.errors: list[int] = []
        self.calls: dict[str, int] = {}
        self.loop_bounds: dict[int, list[str]] = {}
        self.def_values: dict[str, list] = {}  # dataflow node -> value nodes, for def_text()
        self.assign_target: str | None = None
        self.target_node: str | None = None  # dataflow node being defined while walking its value
        self.extra_edges: list[tuple[str, str]] = []
        self.op_nodes: dict[str, int] = {}

    def _line(self, n) -> int:
        return self._first_line + bisect.bisect_left(self._newlines, n.start_byte - self._first_byte)

    # ---- dataflow -------------------------------------------------------------------
    def define(self, name: str, node, value_nodes, self_dep: bool = False) -> str:
        line = self._line(node)
        target = f"{name}@{line}"
        values = [v for v in value_nodes if v is not None]
        if values:
            self.def_values.setdefault(target, []).append(values)
        loops = tuple(self.loop_ctx)
        uses = self.uses
        for v in values:
            for src_name, byte in reads(v):
                uses.append((src_name, byte, target, loops))
        if self_dep:
            uses.append((name, node.start_byte, target, loops))
        self.defs.setdefault(name, []).append((node.end_byte, line, target, loops))
        for ctx in loops:
            ctx.defined.add(name)
        return target

    def def_text(self) -> dict[str, str]:
        """Dataflow node -> the text of its defining values (last 400 characters), read from
        the tree only when asked: only exp2 ops (log2e detection) need it."""
        out: dict[str, str] = {}
        for target, groups in self.def_values.items():
            for values in groups:
                text = " ".join(_t(v) for v in values)
                if text:
                    out[target] = (out.get(target, "") + " " + text)[-400:]
        return out

    def edges(self) -> list[tuple[str, str]]:
        """Each use reads the textually latest definition before it, plus, inside loops, the
        last definition in the outermost enclosing loop (the value carried round the back edge)."""
        out: list[tuple[str, str]] = []
        add = out.append
        all_defs = self.defs
        ends: dict[str, list[int]] = {}
        for name, defs in all_defs.items():
            defs.sort(key=_first)
            ends[name] = [d[0] for d in defs]
        for name, byte, target, loops in self.uses:
            defs = all_defs.get(name)
            if not defs:  # also pid:/tid: (never defined): the name itself is the source
                add((name, target))
                continue
            name_ends = ends[name]
            k = bisect.bisect_right(name_ends, byte)
            last = bisect.bisect_right(name_ends, loops[0].end_byte) - 1 if loops else -1
            if k:
                src = defs[k - 1][2]
                if src != target:
                    add((src, target))
            if last >= k:
                src = defs[last][2]
                if src != target:
                    add((src, target))
            elif not k and name != target:
                add((name, target))
        return list(dict.fromkeys(out + self.extra_edges))

    # ---- walk -----------------------------------------------------------------------
    def walk(self, n) -> None:
        if n.child_count:  # tokens: nothing to record
            self._visit(n)

    def _visit(self, n) -> None:
        """``walk`` for a node with children: the hot loop over every node of the kernel, so
        dispatch is by grammar symbol id (no type string built) and tokens are not entered."""
        handler = self._handlers.get(n.kind_id)
        if handler is not None and handler(self, n):  # the handler walked the children itself
            return
        visit = self._visit
        for c in n.children:
            if c.child_count:
                visit(c)

    def _error(self, n) -> bool:
        self.errors.append(self._line(n))
        return False

    def _update(self, n) -> bool:
        name = base_name(n.child_by_field_name("argument"))
        if name:
            self.define(name, n, (), self_dep=True)
        return False

    def _pointer(self, n) -> bool:
        op = n.child_by_field_name("operator")
        if op is not None and op.type == "*":
            self.deref(n)
        return False

    def _binary(self, n) -> bool:
        op = n.child_by_field_name("operator")
        if op is not None and op.type == "/":
            self.division(n, n.child_by_field_name("left"), n.child_by_field_name("right"))
        return False

    def _branch(self, n) -> bool:
        """if / ?: - operations under a condition are guarded (``masked``) by it."""
        cond = n.child_by_field_name("condition")
        if cond is None:
            return False
        self.walk(cond)
        text = " ".join(_t(cond).split())
        if text.startswith("(") and text.endswith(")"):
            text = text[1:-1].strip()
        for field_name, guard in (("consequence", text), ("alternative", f"!({text})")):
            branch = n.child_by_field_name(field_name)
            if branch is not None:
                self.guards.append(guard)
                self.walk(branch)
                self.guards.pop()
        return True

    def loop(self, n) -> bool:
        kind = _LOOPS[n.type]
        body = n.child_by_field_name("body")
        header = _t(n)[: body.start_byte - n.start_byte] if body is not None else _t(n)
        var, bounds = "", []
        if kind == "for":
            init = n.child_by_field_name("initializer")
            if init is not None:
                self.walk(init)
                var = first_declared(init) or ""
            cond = n.child_by_field_name("condition")
            bounds = [x for x, _ in reads(cond)] if cond is not None else []
        elif kind == "for-range":
            var = first_declared(n.child_by_field_name("declarator")) or ""
            rng = n.child_by_field_name("right")
            bounds = [x for x, _ in reads(rng)] if rng is not None else []
        else:
            cond = n.child_by_field_name("condition")
            bounds = [x for x, _ in reads(cond)] if cond is not None else []
            var = bounds[0] if bounds else ""
        ctx = _LoopCtx(n, self._line(n), var, end_byte=n.end_byte)
        if var:
            ctx.defined.add(var)
        self.loop_ctx.append(ctx)
        index = len(self.loops)
        self.loops.append(None)  # placeholder keeps source order for nested loops
        for c in n.children:
            if kind == "for" and c == n.child_by_field_name("initializer"):
                continue
            if kind == "for-range" and c == n.child_by_field_name("declarator"):
                self.define(var, n, (n.child_by_field_name("right"),))
                continue
            self.walk(c)
        self.loop_ctx.pop()
        bounds = [b for b in bounds if b != var]
        self.loops[index] = Loop(line=self._line(n), end_line=n.end_point[0] + 1, var=var,
                                 iter_text=" ".join(header.split()), kind=kind,
                                 is_time_loop=False, depth=len(self.loop_ctx), guards=tuple(self.guards))
        self.loop_bounds[index] = bounds
        return True

    def declaration(self, n) -> bool:
        text = _t(n)
        type_node = n.child_by_field_name("type")
        type_text = _t(type_node) if type_node is not None else ""
        is_shared = "__shared__" in text.split("=")[0]
        for d in n.children_by_field_name("declarator"):
            name = first_declared(d)
            if not name:
                continue
            self.types[name] = type_text
            dtext = _t(d).split("=")[0]
            if "*" in dtext:
                value = d.child_by_field_name("value")
                if value is not None and any(x in self.shared for x, _ in reads(value)):
                    self.shared.add(name)
                else:
                    self.pointers.add(name)
            if is_shared:
                self.shared.add(name)
                size = re.findall(r"\[([^\]]*)\]", dtext)
                self.shared_rows.append(SharedArray(name, type_text, " * ".join(size) if size else "",
                                                    self._line(n), "extern" in text.split(name)[0]))
            value = d.child_by_field_name("value") if d.type == "init_declarator" else None
            if value is None and d.type == "init_declarator":  # T x(a, b) / T x{a}
                value = next((c for c in d.named_children if c.type in ("argument_list", "initializer_list")), None)
            node = self.define(name, d, (value,))
            if value is not None:
                self.assign_target, self.target_node = name, node
                self.walk(value)
                self.assign_target = self.target_node = None
            for c in d.named_children:  # array sizes, nested expressions
                if c != value and c.type not in ("identifier",):
                    self.walk(c)
        return True

    def assignment(self, n) -> bool:
        left, right = n.child_by_field_name("left"), n.child_by_field_name("right")
        op = _t(n.child_by_field_name("operator"))
        name = base_name(left)
        node = None
        if name:
            idx = [left] if left.type in ("subscript_expression", "pointer_expression") else []
            node = self.define(name, n, [right] + idx, self_dep=op != "=" or left.type != "identifier")
        if left.type in ("subscript_expression", "pointer_expression"):
            store = self.memory_access(left, "store", None)
            if store:
                for src, byte in reads(right):
                    self.uses.append((src, byte, store, tuple(self.loop_ctx)))
            if op != "=":
                self.memory_access(left, "load", None)
            for c in left.named_children:
                self.walk(c)
        else:
            self.walk(left)
        if op == "/=":
            self.division(n, left, right)
        self.assign_target, self.target_node = name, node
        self.walk(right)
        self.assign_target = self.target_node = None
        return True

    # ---- program axes -----------------------------------------------------------------
    def axis_use(self, n) -> None:
        obj, fld = n.child_by_field_name("argument"), n.child_by_field_name("field")
        if obj is not None and fld is not None and _t(obj) == "blockIdx" and _t(fld) in _AXES:
            self.axis_first.setdefault(_AXES[_t(fld)], self._line(n))

# Node type -> the _Walker method run on it; a true result means the method walked the
# children itself. Keyed by grammar symbol id (a name can have several; ERROR has its own)
# because reading Node.type builds a string on every one of a million nodes.
_HANDLER_NAMES = {
    "ERROR": "_error", "for_statement": "loop", "while_statement": "loop", "do_statement": "loop",
    "for_range_loop": "loop", "declaration": "declaration", "assignment_expression": "assignment",
    "update_expression": "_update", "field_expression": "axis_use", "call_expression": "call",
    "gnu_asm_expression": "asm", "subscript_expression": "subscript", "pointer_expression": "_pointer",
    "binary_expression": "_binary", "if_statement": "_branch", "conditional_expression": "_branch",
}
_ERROR_ID = 0xFFFF  # tree-sitter's built-in error symbol


@lru_cache(maxsize=1)
def _handlers_by_kind() -> dict:
    import tree_sitter
    import tree_sitter_cuda

    lang = tree_sitter.Language(tree_sitter_cuda.language())
    out = {}
    for i in range(lang.node_kind_count):
        name = lang.node_kind_for_id(i)
        if name in _HANDLER_NAMES:
            out[i] = getattr(_Walker, _HANDLER_NAMES[name])
    out[_ERROR_ID] = getattr(_Walker, _HANDLER_NAMES["ERROR"])
    return out



def analyze_body(fn, params: list[Param], device_fns: dict[str, int]) -> BodyFacts:
    body = fn.child_by_field_name("body")
    w = _Walker(params, device_fns, fn)
    if body is not None:
        w.walk(body)
    edges = w.edges()
    def_text = w.def_text() if any(m.op == "exp2" for m in w.math) else None  # mark_log2e's only use
    facts = BodyFacts(memops=tuple(w.memops), reductions=tuple(w.reductions), dots=tuple(w.dots),
                      math=tuple(ops.mark_log2e(w.math, edges, def_text)), shared=tuple(w.shared_rows),
                      dataflow=tuple(edges))
    facts.loops = tuple(mark_time_loops(w.loops, w.loop_bounds, edges))
    facts.axes = tuple(axes(w.axis_first, edges))
    if w.errors:
        facts.notes.append("parse errors inside the kernel at lines " +
                           ", ".join(map(str, sorted(set(w.errors))[:10])))
    for name, line in w.calls.items():
        facts.notes.append(f"calls __device__ function {name} (line {line})")
    return facts


def dtypes_in(code: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m.group() for m in ops.DTYPE.finditer(code)))
