"""Recording of the operations in a CUDA kernel body, for ``cuda_body``'s walker.

``OpRecorder`` is the mixin half of ``cuda_body._Walker`` that turns memory accesses
(subscripts, dereferences, load/store intrinsics, inline PTX), reductions, math calls,
dots and floating-point divisions into ``MemOp`` / ``Reduction`` / ``MathOp`` / ``Dot``
rows with their dataflow nodes. The walker owns the state it writes (``memops``,
``reductions``, ``math``, ``dots``, ``uses``, ``extra_edges``, ``op_nodes``, ``loop_ctx``,
``guards``, ``types``, ``shared``, ``pointers``, ``assign_target``, ``target_node``) and
``_line``; what a name or PTX string means is decided in ``cuda_ops``.
"""
from __future__ import annotations

import re

from skel.miner import cuda_ops as ops
from skel.miner.cuda_graph import node_text as _t, reads
from skel.catalog.records import Dot, MathOp, MemOp, Reduction

_INT_TYPE = re.compile(r"\b(?:u?int(?:8|16|32|64)?_t|int|unsigned|long|short|size_t|char|bool|dim3|"
                       r"IdType|uint|index_t)\b")
_INTISH_NAME = re.compile(r"(?:^|_)(?:idx|id|num|len|size|stride|offset|count|n|dim|rank|lane|warp)"
                          r"(?:_|$)|^(?:num|n)_|_(?:idx|len|size|stride|dim|id)$", re.I)


class OpRecorder:
    """Operation recording for ``cuda_body._Walker`` (a mixin: it has no state of its own)."""

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
