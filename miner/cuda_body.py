"""What a CUDA kernel body does, read from its tree-sitter tree (see ``cuda_frontend``).

One walk over the body records definitions and uses (the dataflow edge list, SSA-ish
``name@line`` nodes, ``pid:0/1/2`` for ``blockIdx.x/y/z``, ``tid:0/1/2`` for ``threadIdx``),
loops, memory operations, reductions, math and dots. Classification of names (which
call is a shuffle, an exp2, an mma; what a PTX string does) lives in ``cuda_ops``.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import lru_cache
from operator import itemgetter

from skel.miner import cuda_ops as ops
from skel.miner.cuda_graph import axes, base_name, first_declared, mark_time_loops, reads
from skel.miner.profile import Dot, Loop, MathOp, MemOp, Param, Reduction, SharedArray

_AXES = {"x": 0, "y": 1, "z": 2}
_LOOPS = {"for_statement": "for", "while_statement": "while", "do_statement": "do",
          "for_range_loop": "for-range"}
_INT_TYPE = re.compile(r"\b(?:u?int(?:8|16|32|64)?_t|int|unsigned|long|short|size_t|char|bool|dim3|"
                       r"IdType|uint|index_t)\b")
_INTISH_NAME = re.compile(r"(?:^|_)(?:idx|id|num|len|size|stride|offset|count|n|dim|rank|lane|warp)"
                          r"(?:_|$)|^(?:num|n)_|_(?:idx|len|size|stride|dim|id)$", re.I)


_first = itemgetter(0)


def _t(n) -> str:
    return n.text.decode("utf-8", "replace")


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


class _Walker:
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

    # ---- memory -----------------------------------------------------------------------
    def memory_access(self, n, kind: str, modifier: str | None, evict: str | None = None,
                      block: bool = False, pointer_node=None, space: str | None = None) -> str | None:
        """Record a memory op; returns its dataflow node ("load@LINE", "#2" for a second one)."""
        ptr = pointer_node if pointer_node is not None else n
        ptr_reads = None
        if space is None:  # decided by the base only: most subscripts of a big kernel are registers
            base = ptr.child_by_field_name("argument") if ptr.type == "subscript_expression" else ptr
            if base is None or base == ptr:
                ptr_reads = reads(ptr)
                based = {x for x, _ in ptr_reads}
            else:
                based = {x for x, _ in reads(base)}
            space = "shared" if based & self.shared else ("global" if based & self.pointers else None)
            if space is None:
                return None
        if ptr_reads is None:
            ptr_reads = reads(ptr)
        names = [x for x, _ in ptr_reads]
        node = f"{kind}@{self._line(n)}"
        self.op_nodes[node] = self.op_nodes.get(node, 0) + 1
        if self.op_nodes[node] > 1:
            node += f"#{self.op_nodes[node]}"
        loops = tuple(self.loop_ctx)
        for src, byte in ptr_reads:
            self.uses.append((src, byte, node + ":addr", loops))
        self.extra_edges.append((node + ":addr", node))
        if kind == "load" and self.target_node:
            self.extra_edges.append((node, self.target_node))
        loop = self.loop_ctx[-1] if self.loop_ctx else None
        invariant = loop is None or not any(x in loop.defined for x in names)
        self.memops.append(MemOp(kind=kind, line=self._line(n), pointer=" ".join(_t(ptr).split()),
                                 target=self.assign_target if kind == "load" else None,
                                 masked=bool(self.guards), eviction_policy=evict, cache_modifier=modifier,
                                 block_ptr=block, loop_line=loop.line if loop else None,
                                 loop_invariant=invariant, guards=tuple(self.guards), node=node,
                                 space=space))
        return node

    def subscript(self, n) -> None:
        parent = n.parent
        if parent is not None and parent.type == "subscript_expression" and \
                parent.child_by_field_name("argument") == n:
            return  # inner part of a[i][j]: the outer access is the memory op
        if parent is not None and parent.type == "pointer_expression" and _t(parent.children[0]) == "&":
            return  # &a[i] is an address, not an access
        if parent is not None and parent.type == "assignment_expression" and parent.child_by_field_name("left") == n:
            return  # recorded by assignment()
        self.memory_access(n, "load", None, pointer_node=n)

    def deref(self, n) -> None:
        parent = n.parent
        if parent is not None and parent.type == "assignment_expression" and parent.child_by_field_name("left") == n:
            return
        self.memory_access(n, "load", None, pointer_node=n)

    def call(self, n) -> None:
        fn = n.child_by_field_name("function")
        if fn is None:
            return
        name, full = ops.call_name(_t(fn))
        args = n.child_by_field_name("arguments")
        argv = [a for a in args.named_children if a.type != "comment"] if args is not None else []
        loop = self.loop_ctx[-1].line if self.loop_ctx else None
        if name in self.device_fns:
            self.calls.setdefault(name, self.device_fns[name])
        mem = ops.memory_call(name, full)
        if mem is not None and argv:
            kind, modifier, evict, block = mem
            ptr = argv[0]
            if kind == "load" and ops.is_async_copy(name, full) and len(argv) >= 2:
                ptr = argv[1]  # cp_async(dst_smem, src_gmem, ...): the global side is read
            self.memory_access(n, kind, modifier, evict, block, pointer_node=ptr, space="global")
        red = ops.reduction_call(name, full)
        if red is not None:
            axis = _t(argv[2]) if red == "warp-shuffle" and len(argv) >= 3 else (
                _t(argv[1]) if red == "warp-shuffle" and len(argv) == 2 else None)
            self.reductions.append(Reduction(red, self._line(n), " ".join(_t(n).split()), axis, loop,
                                             tuple(self.guards)))
        mop = ops.math_call(name)
        if mop is not None:
            detail = [("fn", name)]
            if argv:
                detail.append(("arg", " ".join(_t(argv[0]).split())))
            if mop in ("rcp", "div") and argv:
                detail.append(("denominator", " ".join(_t(argv[-1]).split())))
            self.math.append(MathOp(mop, self._line(n), " ".join(_t(n).split()), loop, tuple(detail),
                                   tuple(self.guards)))
        if ops.is_dot_call(name, full):
            dtypes, prec = ops.dot_dtypes(full)
            self.dots.append(Dot(self._line(n), " ".join(_t(n).split()), prec, None, dtypes, loop,
                                 tuple(self.guards)))

    def asm(self, n) -> None:
        strings = [c for c in n.children if c.type in ("string_literal", "concatenated_string")]
        if not strings:
            return
        ptx = "".join(re.findall(r'"((?:\\.|[^"\\])*)"', _t(strings[0])))
        loop = self.loop_ctx[-1].line if self.loop_ctx else None
        inputs = [c for c in n.children if c.type == "gnu_asm_input_operand_list"]
        operands = [o.child_by_field_name("value") for o in inputs[0].named_children] if inputs else []
        operands = [o for o in operands if o is not None]
        text = " ".join(_t(n).split())
        for ins in ops.ptx_instructions(ptx):
            kind = ins.kind
            if kind in ("load", "store", "atomic"):
                ptr = operands[min(ins.operand, len(operands) - 1)] if operands else n
                self.memory_access(n, kind, ins.modifier, ins.evict, ins.block, pointer_node=ptr,
                                   space="global")
                if kind == "atomic":
                    self.reductions.append(Reduction(ins.op, self._line(n), text, None, loop))
            elif kind == "reduction":
                self.reductions.append(Reduction(ins.op, self._line(n), text, None, loop))
            elif kind == "math":
                self.math.append(MathOp(ins.op, self._line(n), text, loop, (("ptx", ins.opcode),)))
            elif kind == "dot":
                self.dots.append(Dot(self._line(n), text, ins.precision, None, ins.dtypes, loop))

    def division(self, n, num, den) -> None:
        if den is None or (self._is_int(num) and self._is_int(den)):
            return
        loop = self.loop_ctx[-1].line if self.loop_ctx else None
        detail = (("denominator", " ".join(_t(den).split())),
                  ("denominator_sqrt", "yes" if re.search(r"\bsqrt", _t(den)) else "no"))
        self.math.append(MathOp("div", self._line(n), " ".join(_t(n).split()), loop, detail, tuple(self.guards)))

    def _is_int(self, n) -> bool:
        if n is None:
            return False
        t = n.type
        if t == "number_literal":
            s = _t(n).lower()
            return "p" not in s if s.startswith("0x") else not any(c in s for c in ".ef")
        if t == "identifier":
            ty = self.types.get(_t(n))
            return bool(_INT_TYPE.search(ty)) if ty is not None else bool(_INTISH_NAME.search(_t(n)))
        if t == "field_expression":
            obj = n.child_by_field_name("argument")
            if obj is not None and _t(obj) in ("blockIdx", "threadIdx", "blockDim", "gridDim"):
                return True
            fld = n.child_by_field_name("field")
            return fld is not None and bool(_INTISH_NAME.search(_t(fld)))
        if t == "sizeof_expression":
            return True
        if t in ("parenthesized_expression",):
            return self._is_int(n.named_children[0]) if n.named_children else False
        if t == "binary_expression":
            return self._is_int(n.child_by_field_name("left")) and self._is_int(n.child_by_field_name("right"))
        if t == "call_expression":
            fn = n.child_by_field_name("function")
            return fn is not None and bool(re.search(r"ceil_div|div_up|cdiv|round_up", _t(fn)))
        return False


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
