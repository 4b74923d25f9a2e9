"""SK002 kernel body: fold NS V tiles into one program as NS register sub-tiles.

Every statement that reads or writes a per-tile name (``tilemerge_axis.tile_dependent``) is
emitted NS times, statement by statement (all sub-tiles' loads together, then all their
updates: memory-level parallelism and independent reductions side by side); sub-tile j
renames each per-tile name ``n`` to ``n_j`` and replaces the tile index by ``j`` (one
program per head) or by ``(i_v * NS + j)`` (P programs per head). Statements that do not
depend on the tile - the prologue: q/k loads and norms, the gate, beta - stay, once.
``if`` statements on shared conditions keep their shape with their bodies transformed;
an ``if`` on a per-tile condition is replicated whole.

With one program per head the tile index disappears from the kernel: its definition goes,
``E // NT`` becomes ``E`` (the flat id no longer interleaves tiles), an unused ``NT = cdiv``
goes, and for a grid axis of its own, higher ``tl.program_id`` axes move down by one.
"""
from __future__ import annotations

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter.tilemerge_axis import TileAxis, definitions
from skel.rewriter.tilemerge_names import NameAllocator, substitute, substitute_number


def _touches(node: cst.CSTNode, tiles: frozenset[str]) -> bool:
    return bool(C.names_in(node) & tiles)


def _is_count(node: cst.BaseExpression, axis: TileAxis) -> bool:
    if isinstance(node, cst.Name) and node.value == axis.count:
        return True
    return (isinstance(node, cst.Call) and C.last_part(C.call_name(node)) == "cdiv" and len(node.args) == 2
            and isinstance(node.args[1].value, cst.Name) and node.args[1].value.value == axis.block)


class _DropTileCount(cst.CSTTransformer):
    """``E // NT`` -> ``E``, ``E // (NK * NT)`` -> ``E // NK``; ``tl.program_id(b)`` -> ``b - 1`` above a
    removed grid axis."""

    def __init__(self, axis: TileAxis):
        self.axis = axis

    def leave_BinaryOperation(self, original, updated: cst.BinaryOperation):
        if not isinstance(updated.operator, cst.FloorDivide):
            return updated
        if _is_count(updated.right, self.axis):
            left = updated.left
            if updated.lpar and isinstance(left, (cst.BinaryOperation, cst.UnaryOperation)) and not left.lpar:
                return left.with_changes(lpar=updated.lpar, rpar=updated.rpar)
            return left
        rest = _without_count(updated.right, self.axis)  # E // (NK * NT) -> E // NK
        return updated.with_changes(right=rest) if rest is not None else updated

    def leave_Call(self, original, updated: cst.Call):
        if self.axis.kind == "axis" and C.last_part(C.call_name(updated)) == "program_id" and updated.args:
            v = updated.args[0].value
            if isinstance(v, cst.Integer) and int(v.value) > self.axis.axis:
                return updated.with_changes(args=[updated.args[0].with_changes(value=cst.Integer(str(int(v.value) - 1)))])
        return updated


def _without_count(node: cst.BaseExpression, axis: TileAxis) -> cst.BaseExpression | None:
    """A product with the tile count as one factor, without that factor (None when it has none)."""
    if not (isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply)):
        return None
    for keep, drop in ((node.left, node.right), (node.right, node.left)):
        if _is_count(drop, axis):  # the kept factor takes the product's parentheses, if it had any
            if node.lpar and isinstance(keep, (cst.BinaryOperation, cst.UnaryOperation)) and not keep.lpar:
                return keep.with_changes(lpar=node.lpar, rpar=node.rpar)
            return keep
    for side in ("left", "right"):
        inner = _without_count(getattr(node, side), axis)
        if inner is not None:
            return node.with_changes(**{side: inner})
    return None


class _WidenCount(cst.CSTTransformer):
    """``tl.cdiv(D, B)`` -> ``tl.cdiv(D, B * NS)``: P programs per head each own NS tiles."""

    def __init__(self, axis: TileAxis, ns: int):
        self.axis, self.ns = axis, ns

    def leave_Call(self, original, updated: cst.Call):
        if _is_count(updated, self.axis) and isinstance(updated.args[1].value, cst.Name):
            wider = cst.parse_expression(f"{self.axis.block} * {self.ns}")
            return updated.with_changes(args=[updated.args[0], updated.args[1].with_changes(value=wider)])
        return updated


def _drop_target(line: cst.SimpleStatementLine, var: str) -> cst.SimpleStatementLine | None:
    """The statement line without the assignment to ``var`` (None when nothing is left)."""
    small = line.body[0]
    if len(line.body) != 1 or not isinstance(small, cst.Assign) or len(small.targets) != 1:
        return None
    t, v = small.targets[0].target, small.value
    if isinstance(t, cst.Name):
        return None
    keep = [(te, ve) for te, ve in zip(t.elements, v.elements) if not (isinstance(te.value, cst.Name) and te.value.value == var)]
    if len(keep) == 1:
        new = small.with_changes(targets=[small.targets[0].with_changes(target=keep[0][0].value)], value=keep[0][1].value)
    else:
        new = small.with_changes(
            targets=[small.targets[0].with_changes(target=t.with_changes(elements=[e for e, _ in keep]))],
            value=v.with_changes(elements=[e for _, e in keep]))
    return line.with_changes(body=[new])


def remove_tile_axis(func: cst.FunctionDef, axis: TileAxis) -> cst.FunctionDef | str:
    """One program per head: the tile index's definition and the tile count go (or why they cannot:
    the count is still used after the index's uses of it are gone, e.g. ``pid % (NV * NK) // NV``)."""
    (def_line, _value), = definitions(func, axis.var)
    dropped = _drop_target(def_line, axis.var)
    edits = {def_line: (lambda _u: dropped) if dropped is not None else (lambda _u: cst.RemoveFromParent())}
    func = C.apply_edits(func, edits)
    func = func.visit(_DropTileCount(axis))
    left = [s for s in _lines(func) if _counts_in(s, axis)]
    if axis.count:
        cdefs = definitions(func, axis.count)
        left = [s for s in left if all(s is not d for d, _ in cdefs)]
        if len(cdefs) == 1 and not left:
            kept = _drop_target(cdefs[0][0], axis.count)  # NK, NV = ... keeps NK
            func = C.apply_edits(func, {cdefs[0][0]: (lambda _u: kept) if kept is not None
                                        else (lambda _u: cst.RemoveFromParent())})
    if left:
        return (f"one program per head needs the tile count gone, but {C.code_of(left[0]).strip()[:80]!r} "
                f"still uses it in a way this rewrite does not remove")
    return func


def _counts_in(node: cst.CSTNode, axis: TileAxis) -> bool:
    """Whether ``node`` reads the tile count (its name, or a ``cdiv(D, B)`` of the tile block)."""
    if axis.count and axis.count in C.names_in(node):
        return True
    return any(_is_count(c, axis) for c in C.calls_in(node))


def widen_tile_count(func: cst.FunctionDef, axis: TileAxis, ns: int) -> cst.FunctionDef:
    return func.visit(_WidenCount(axis, ns)) if axis.kind == "mod" and ns > 1 else func


def _lines(func: cst.FunctionDef) -> list[cst.CSTNode]:
    out = []

    class V(cst.CSTVisitor):
        def visit_SimpleStatementLine(self, n) -> bool:
            out.append(n)
            return False

        def visit_If(self, n: cst.If) -> None:
            out.append(n.test)

        def visit_For(self, n: cst.For) -> None:
            out.append(n.iter)

        def visit_While(self, n: cst.While) -> None:
            out.append(n.test)

    func.body.visit(V())
    return out


class Replicator:
    """Emits the per-tile statements of a kernel body once per sub-tile."""

    def __init__(self, axis: TileAxis, tiles: frozenset[str], ns: int, one_program: bool, names: NameAllocator):
        self.axis, self.ns, self.one_program = axis, ns, one_program
        self.tiles = tiles | {axis.var}  # a statement reading the tile index is per-tile work too
        per_tile = sorted(tiles - {axis.var})
        self.renames = [{n: names.fresh(f"{n}_{j}") for n in per_tile} for j in range(ns)]

    def copy(self, node, j: int):
        if self.one_program:
            return substitute_number(node, self.axis.var, j, self.renames[j])
        mapping = {k: cst.Name(v) for k, v in self.renames[j].items()}
        mapping[self.axis.var] = cst.parse_expression(f"({self.axis.var} * {self.ns} + {j})")
        return substitute(node, mapping)

    def block(self, body) -> list[cst.BaseStatement]:
        out: list[cst.BaseStatement] = []
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                defines_index = self.axis.var in C.assigned_names(stmt)  # kept once (P > 1)
                out += self._replicate(stmt) if _touches(stmt, self.tiles) and not defines_index else [stmt]
            elif isinstance(stmt, cst.If):
                out += self._replicate(stmt) if _touches(stmt.test, self.tiles) else [self._if(stmt)]
            elif isinstance(stmt, (cst.For, cst.While)):
                out.append(stmt.with_changes(body=stmt.body.with_changes(body=self.block(stmt.body.body))))
            else:
                out.append(stmt)
        return out

    def _replicate(self, stmt) -> list[cst.BaseStatement]:
        copies = [self.copy(stmt, j) for j in range(self.ns)]
        return [copies[0]] + [c.with_changes(leading_lines=[]) for c in copies[1:]]

    def _if(self, stmt: cst.If) -> cst.If:
        orelse = stmt.orelse
        if isinstance(orelse, cst.If):
            orelse = self._if(orelse)
        elif isinstance(orelse, cst.Else):
            orelse = orelse.with_changes(body=orelse.body.with_changes(body=self.block(orelse.body.body)))
        return stmt.with_changes(body=stmt.body.with_changes(body=self.block(stmt.body.body)), orelse=orelse)
