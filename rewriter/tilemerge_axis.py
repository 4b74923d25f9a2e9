"""SK002 analysis: find a kernel's V-tile program axis and the values that depend on it.

Structural, from the kernel's own AST (no names are assumed):
- a *tile offset* is ``X * B + tl.arange(0, B)`` (either operand order) with ``B`` a constexpr
  parameter and ``X`` a variable computed from ``tl.program_id``;
- ``X`` is decomposed either from a flat id, ``X = E % NT`` with ``NT = tl.cdiv(D, B)`` (or
  that call inline), or is a grid axis of its own, ``X = tl.program_id(a)``;
- the values that depend on ``X`` (transitively, flow-insensitive over the kernel) are the
  per-tile work; everything else is computed identically by every tile program.

Merging is refused, with the reason, when the tiles communicate (a store whose address does
not depend on the tile but whose value does, atomics on per-tile values), when control flow
depends on the tile in a way that replication cannot express, or when nothing in the token
loop is tile-independent (merging would remove no repeated work).
"""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F


@dataclass(frozen=True)
class TileAxis:
    var: str  # the tile index, e.g. "i_v"
    block: str  # the constexpr tile width, e.g. "BV"
    kind: str  # "mod" (X = E % NT on a flat id) | "axis" (X = tl.program_id(a))
    axis: int | None  # program-id axis for kind "axis"
    count: str | None  # the tile-count variable (NT) when it has one
    dim: str | None  # the dimension split, from tl.cdiv(D, B) (kind "mod")
    line: int  # line of X's definition


@dataclass(frozen=True)
class Analysis:
    axis: TileAxis
    tile_names: frozenset[str]  # names whose values depend on the tile index (per-tile work)
    shared_work: tuple[int, ...]  # lines in the token loop computed identically by every tile


def _arange_block(node: cst.BaseExpression) -> str | None:
    """B for ``tl.arange(0, B)``."""
    if isinstance(node, cst.Call) and C.last_part(C.call_name(node)) == "arange" and len(node.args) == 2:
        a0, a1 = node.args[0].value, node.args[1].value
        if isinstance(a0, cst.Integer) and a0.value == "0" and isinstance(a1, cst.Name):
            return a1.value
    return None


def _scaled_index(node: cst.BaseExpression, block: str) -> str | None:
    """X for ``X * B`` / ``B * X``."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
        l, r = node.left, node.right
        if isinstance(r, cst.Name) and r.value == block and isinstance(l, cst.Name):
            return l.value
        if isinstance(l, cst.Name) and l.value == block and isinstance(r, cst.Name):
            return r.value
    return None


def tile_offsets(func: cst.FunctionDef) -> list[tuple[str, str]]:
    """Every (X, B) with ``X * B + tl.arange(0, B)`` in the kernel, in source order, unique."""
    found: list[tuple[str, str]] = []

    class V(cst.CSTVisitor):
        def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
            if not isinstance(node.operator, cst.Add):
                return
            for a, b in ((node.left, node.right), (node.right, node.left)):
                block = _arange_block(a)
                x = _scaled_index(b, block) if block else None
                if x and (x, block) not in found:
                    found.append((x, block))

    func.body.visit(V())
    return found


def _strip_to(node: cst.BaseExpression) -> cst.BaseExpression:
    """``E.to(...)`` -> ``E`` (the id cast to int64 is not part of the decomposition)."""
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "to":
        node = node.func.value
    return node


def _program_id_axis(node: cst.BaseExpression) -> int | None:
    node = _strip_to(node)
    if isinstance(node, cst.Call) and C.last_part(C.call_name(node)) == "program_id" and node.args:
        v = node.args[0].value
        if isinstance(v, cst.Integer):
            return int(v.value)
    return None


def _cdiv_dim(node: cst.BaseExpression, block: str) -> str | None:
    """D for ``tl.cdiv(D, B)`` / ``triton.cdiv(D, B)``."""
    if isinstance(node, cst.Call) and C.last_part(C.call_name(node)) == "cdiv" and len(node.args) == 2:
        d, b = node.args[0].value, node.args[1].value
        if isinstance(b, cst.Name) and b.value == block and isinstance(d, cst.Name):
            return d.value
    return None


def definitions(func: cst.FunctionDef, name: str) -> list[tuple[cst.SimpleStatementLine, cst.BaseExpression]]:
    """(statement line, assigned value) for every assignment to ``name`` (tuple targets unpacked)."""
    out = []
    for small, line, _chain, _loops in F.walk(func.body.body):
        if isinstance(small, cst.Assign) and len(small.targets) == 1:
            t, v = small.targets[0].target, small.value
            if isinstance(t, cst.Name) and t.value == name:
                out.append((line, v))
            elif isinstance(t, cst.Tuple) and isinstance(v, cst.Tuple) and len(t.elements) == len(v.elements):
                for te, ve in zip(t.elements, v.elements):
                    if isinstance(te.value, cst.Name) and te.value.value == name:
                        out.append((line, ve.value))
        elif isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name) and small.target.value == name:
            out.append((line, small.value))
    return out


def find_axis(func: cst.FunctionDef, pos) -> tuple[list[TileAxis], list[str]]:
    """Candidate tile axes of ``func`` and, for offsets that are not one, why not."""
    axes: list[TileAxis] = []
    why: list[str] = []
    consts = C.constexpr_params(func)
    for x, block in tile_offsets(func):
        if block not in consts:
            why.append(f"{x} * {block} + arange: {block} is not a constexpr parameter")
            continue
        defs = definitions(func, x)
        if len(defs) != 1:
            why.append(f"{x} is assigned {len(defs)} times; a tile index is assigned once")
            continue
        line, value = defs[0]
        ax = _program_id_axis(value)
        if ax is not None:
            axes.append(TileAxis(x, block, "axis", ax, None, None, pos(line)))
            continue
        v = _strip_to(value)
        if isinstance(v, cst.BinaryOperation) and isinstance(v.operator, cst.Modulo):
            right = v.right
            dim = _cdiv_dim(right, block)
            count = None
            if dim is None and isinstance(right, cst.Name):
                cdefs = definitions(func, right.value)
                if len(cdefs) == 1:
                    dim = _cdiv_dim(cdefs[0][1], block)
                    count = right.value
            if dim is not None:
                axes.append(TileAxis(x, block, "mod", None, count, dim, pos(line)))
                continue
        why.append(f"line {pos(line)}: {x} = {C.code_of(value)} is neither tl.program_id(a) nor E % cdiv(D, {block})")
    return axes, why


def tile_dependent(func: cst.FunctionDef, var: str) -> frozenset[str]:
    """Names whose value depends (transitively) on ``var``, ``var`` included."""
    deps = F.dependencies(func)
    out = {var}
    for name in deps:
        if name != var and F.depends_on({name}, {var}, deps):
            out.add(name)
    return frozenset(out)


def _reads(node: cst.CSTNode) -> set[str]:
    return C.names_in(node)


def refusal(func: cst.FunctionDef, axis: TileAxis, tiles: frozenset[str], pos) -> str | None:
    """Why the tiles of ``axis`` cannot be merged by replication, or None."""
    for call in C.calls_in(func.body):
        name = C.last_part(C.call_name(call))
        line = pos(call)
        if name.startswith("atomic") and _reads(call) & tiles:
            return f"line {line}: {C.code_of(call)[:60]} is an atomic on per-tile data (tiles reduce through memory)"
        if name == "store" and len(call.args) >= 2:
            addr = _reads(call.args[0].value)
            value = set().union(*(_reads(a.value) for a in call.args[1:]))
            if not addr & tiles and value & tiles:
                return (f"line {line}: the store to {C.code_of(call.args[0].value)} has a tile-independent address "
                        f"but a per-tile value: the V tiles communicate through memory")
        if name == "program_id" and axis.kind == "axis":
            v = call.args[0].value if call.args else None
            if isinstance(v, cst.Integer) and int(v.value) == axis.axis and pos(call) != axis.line:
                return f"line {line}: tl.program_id({axis.axis}) is read outside the tile index"
    return _control_refusal(func.body.body, tiles - {axis.var}, pos)


def _control_refusal(body, tiles: frozenset[str], pos) -> str | None:
    for stmt in body:
        if isinstance(stmt, cst.SimpleStatementLine):
            kinds = set()
            for small in stmt.body:
                assigned = C.assigned_names(small) if isinstance(small, (cst.Assign, cst.AugAssign)) else set()
                kinds.add(bool((assigned | _reads(small)) & tiles))
            if len(kinds) > 1:
                return f"line {pos(stmt)}: one line mixes per-tile and shared statements"
            for small in stmt.body:
                if isinstance(small, (cst.Assign,)) and len(small.targets) == 1 and isinstance(small.targets[0].target, cst.Tuple):
                    names = C.assigned_names(small)
                    if names & tiles and names - tiles:
                        return f"line {pos(stmt)}: a tuple assignment mixes per-tile and shared names"
        elif isinstance(stmt, cst.If):
            if _reads(stmt.test) & tiles:
                if C.assigned_names(stmt) - tiles:
                    return f"line {pos(stmt)}: a condition on per-tile values assigns shared names"
                if _has_return(stmt):
                    return f"line {pos(stmt)}: a return under a per-tile condition would end every sub-tile"
                continue
            for block in _if_blocks(stmt):
                r = _control_refusal(block, tiles, pos)
                if r:
                    return r
        elif isinstance(stmt, (cst.For, cst.While)):
            head = stmt.iter if isinstance(stmt, cst.For) else stmt.test
            if _reads(head) & tiles:
                return f"line {pos(stmt)}: the loop bounds depend on the V tile"
            r = _control_refusal(stmt.body.body, tiles, pos)
            if r:
                return r
        elif isinstance(stmt, (cst.With, cst.Try)):
            return f"line {pos(stmt)}: {type(stmt).__name__} blocks are not supported inside a kernel"
    return None


def _if_blocks(stmt: cst.If) -> list:
    out = [stmt.body.body]
    orelse = stmt.orelse
    if isinstance(orelse, cst.If):
        out.extend(_if_blocks(orelse))
    elif isinstance(orelse, cst.Else):
        out.append(orelse.body.body)
    return out


def _has_return(node: cst.CSTNode) -> bool:
    found = []

    class V(cst.CSTVisitor):
        def visit_Return(self, n: cst.Return) -> None:
            found.append(n)

    node.visit(V())
    return bool(found)


def shared_loop_work(func: cst.FunctionDef, tiles: frozenset[str], pos) -> tuple[int, ...]:
    """Lines inside loops whose statements call something (load, reduction, math) and do not
    depend on the tile: the work every tile program repeats."""
    out = []
    for small, line, _chain, loops in F.walk(func.body.body):
        if not loops or not isinstance(small, (cst.Assign, cst.AugAssign)):
            continue
        if (C.assigned_names(small) | _reads(small)) & tiles:
            continue
        if C.calls_in(small.value):
            out.append(pos(line))
    return tuple(sorted(set(out)))
