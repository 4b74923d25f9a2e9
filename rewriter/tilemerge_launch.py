"""SK002 launch site: the grid loses its V-tile factor, BV becomes the sub-tile width.

At each ``kernel[grid](...)`` launch in the file:
- the argument bound to the tile constexpr (``BV=BV``; ``BV = 32`` on the host) tells whether
  the grid splits V at all: ``next_power_of_2(V)`` covers V in one tile, nothing to merge;
- the grid's tile count (``triton.cdiv(V, BV)``, or a name assigned it, as a factor of a flat
  grid or as a grid axis of its own) goes when one program serves a head (P = 1), or becomes
  ``cdiv(V, BV * NS)`` for P programs per head each owning NS sub-tiles;
- BV is set where it was set, to ``next_power_of_2(cdiv(V, P * NS))``, so that P programs of
  NS sub-tiles cover V (a BV bound any other way than one plain or tuple assignment in the host
  function, e.g. a parameter, a module constant or an annotated assignment, is refused: the grid
  could not be kept consistent with it); ``num_warps``/``num_stages`` are the variant's unless the
  kernel is autotuned.
"""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.tilemerge_axis import TileAxis


@dataclass
class LaunchEdit:
    edits: dict  # original node -> (updated node -> new node)
    lines: list  # (node, description) for Change records
    dim: str = ""  # the dimension the tiles split, as the grid's cdiv(D, B) names it


def _binding(call: cst.Call, kernel: cst.FunctionDef, param: str) -> cst.Arg | None:
    for a in call.args:
        if a.keyword is not None and a.keyword.value == param:
            return a
    names = [p.name.value for p in C.params(kernel)]
    pos = [a for a in call.args if a.keyword is None and a.star == ""]
    i = names.index(param) if param in names else -1
    return pos[i] if 0 <= i < len(pos) else None


def _host_assigns(host: cst.FunctionDef) -> dict[str, list[tuple[cst.Assign | None, cst.BaseExpression | None, int | None]]]:
    """Each host name's assignments as (statement, value, position): ``NV = cdiv(V, BV)`` gives (that
    Assign, the call, None); ``NK, NV = cdiv(K, BK), cdiv(V, BV)`` gives (that Assign, the matching
    element, its index); any other assignment gives (None, None, None), so a name assigned more than
    once, or in a way not followed here, is never trusted."""
    out: dict[str, list[tuple[cst.Assign | None, cst.BaseExpression | None, int | None]]] = {}
    for small, *_ in F.walk(host.body.body):
        name = F.single_target(small)
        if isinstance(small, cst.AnnAssign) and isinstance(small.target, cst.Name):
            out.setdefault(small.target.value, []).append((None, None, None))
            continue
        if name and isinstance(small, cst.Assign):
            out.setdefault(name, []).append((small, small.value, None))
        elif name:
            out.setdefault(name, []).append((None, None, None))
        elif isinstance(small, cst.Assign) and len(small.targets) == 1:
            target, value = small.targets[0].target, small.value
            names = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else []
            values = [e.value for e in value.elements] if isinstance(value, cst.Tuple) else []
            for i, e in enumerate(names):
                if isinstance(e, cst.Name):
                    row = (small, values[i], i) if len(values) == len(names) else (None, None, None)
                    out.setdefault(e.value, []).append(row)
                else:  # a nested target: none of its names is followed
                    for n in C.names_in(e):
                        out.setdefault(n, []).append((None, None, None))
    for node in _bound_elsewhere(host):
        out.setdefault(node, []).append((None, None, None))
    return out


def _bound_elsewhere(host: cst.FunctionDef) -> set[str]:
    """Names the host binds other than by assignment: parameters, loop, with and walrus targets."""
    out = {p.name.value for p in C.params(host)}

    class V(cst.CSTVisitor):
        def visit_For(self, n: cst.For) -> None:
            out.update(C.names_in(n.target))

        def visit_WithItem(self, n: cst.WithItem) -> None:
            if n.asname is not None:
                out.update(C.names_in(n.asname.name))

        def visit_NamedExpr(self, n: cst.NamedExpr) -> None:
            out.update(C.names_in(n.target))

    host.body.visit(V())
    return out


def _set_value(assign: cst.Assign, index: int | None, text: str):
    """An edit of ``assign`` giving its value (or the ``index``-th element of its tuple value) ``text``."""
    new = cst.parse_expression(text)
    if index is None:
        return lambda u: u.with_changes(value=new)
    return lambda u: u.with_changes(value=u.value.with_changes(elements=[
        e.with_changes(value=new) if j == index else e for j, e in enumerate(u.value.elements)]))


def _value(node: cst.BaseExpression, assigns) -> cst.BaseExpression | None:
    """``node``, or the one value a host name was assigned (None where that is not known)."""
    if isinstance(node, cst.Name) and node.value in assigns:
        rows = assigns[node.value]
        return rows[0][1] if len(rows) == 1 else None
    return node


def _covers(value: cst.BaseExpression) -> bool:
    """``next_power_of_2(D)`` (or a max with it): one tile spans the dimension."""
    if isinstance(value, cst.Call):
        fn = C.last_part(C.call_name(value))
        if fn == "next_power_of_2":
            return True
        if fn == "max":
            return any(_covers(a.value) for a in value.args)
    return False


def _cdiv_of(node: cst.BaseExpression, block_text: str, assigns) -> cst.Call | None:
    """The ``cdiv(D, BV)`` call ``node`` is (directly or through one host assignment)."""
    node = _value(node, assigns)
    if isinstance(node, cst.Call) and C.last_part(C.call_name(node)) == "cdiv" and len(node.args) == 2:
        if C.code_of(node.args[1].value).strip() == block_text:
            return node
    return None


def _factors(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        return _factors(expr.left) + _factors(expr.right)
    return [expr]


def _drop_factor(expr: cst.BaseExpression, factor: cst.BaseExpression) -> cst.BaseExpression | None:
    if expr is factor:
        return None
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Multiply):
        l, r = _drop_factor(expr.left, factor), _drop_factor(expr.right, factor)
        if l is None:
            return r
        if r is None:
            return l
        return expr.with_changes(left=l, right=r)
    return expr


def _grid(call: cst.Call, assigns) -> cst.BaseExpression | None:
    if not isinstance(call.func, cst.Subscript) or len(call.func.slice) != 1:
        return None
    g = call.func.slice[0].slice.value
    g = _value(g, assigns)
    if isinstance(g, cst.Lambda):
        g = g.body
    return g if isinstance(g, cst.Tuple) else None


def plan(module: cst.Module, kernel: cst.FunctionDef, axis: TileAxis, programs: int, ns: int,
         warps: int | None, stages: int | None = None) -> LaunchEdit | str:
    """Edits of every launch of ``kernel``, or why the launch cannot be merged."""
    sites = C.launches(module, {kernel.name.value: kernel})
    if not sites:
        return f"no launch of {kernel.name.value} in this file: the grid cannot be changed with the kernel"
    out = LaunchEdit({}, [])
    for call, _k, host in sites:
        assigns = _host_assigns(host)
        arg = _binding(call, kernel, axis.block)
        if arg is None:
            return f"the launch of {kernel.name.value} does not pass {axis.block}"
        value, owner, index = arg.value, None, None
        if isinstance(value, cst.Name):
            rows = assigns.get(value.value, [])
            if len(rows) != 1 or rows[0][0] is None:
                how = (f"assigned {len(rows)} times" if len(rows) > 1 else "bound as a parameter, loop or annotated target"
                       if rows else "not assigned (a module constant or global)")
                return (f"the launch passes {axis.block}={value.value}, which {host.name.value} has {how}: "
                        "this rewrite changes the tile width only where one plain or tuple assignment sets it")
            owner, value, index = rows[0]
        if _covers(value):
            return f"{axis.block} = {C.code_of(value)}: one tile covers the dimension (NV = 1), nothing to merge"
        grid = _grid(call, assigns)
        if grid is None:
            return f"the grid of {kernel.name.value} is not a tuple (or a name/lambda giving one)"
        block_text = C.code_of(arg.value).strip()
        count, elem_i = None, None
        for i, el in enumerate(grid.elements):
            if axis.kind == "axis" and i != axis.axis:
                continue
            for f in _factors(el.value) if axis.kind == "mod" else [el.value]:
                if _cdiv_of(f, block_text, assigns) is not None:
                    count, elem_i = f, i
        if count is None:
            return f"the grid {C.code_of(grid)} has no cdiv(V, {block_text}) for the tile axis {axis.var}"
        cdiv = _cdiv_of(count, block_text, assigns)
        v_text = C.code_of(cdiv.args[0].value)
        out.dim = v_text
        cdiv_fn = C.code_of(cdiv.func)
        npow = cdiv_fn[: -len("cdiv")] + "next_power_of_2"
        split = programs * ns
        width = f"{npow}({v_text})" if split == 1 else f"{npow}({cdiv_fn}({v_text}, {split}))"
        if owner is not None:
            C.chain_edit(out.edits, owner, _set_value(owner, index, width))
            out.lines.append((owner, f"{axis.block} = {width}: the sub-tile width ({ns} per program, {programs} per head)"))
        else:  # the width is written at the launch: the grid's count must be rewritten with it below
            out.edits[arg] = lambda u, w=width: u.with_changes(value=cst.parse_expression(w))
        el = grid.elements[elem_i]
        if programs == 1:
            if axis.kind == "axis":
                kept = [e for j, e in enumerate(grid.elements) if j != elem_i] or [cst.Element(cst.Integer("1"))]
                if len(kept) == 1:
                    kept[0] = kept[0].with_changes(comma=cst.Comma())
                out.edits[grid] = lambda u, k=kept: u.with_changes(elements=k)
            else:
                rest = _drop_factor(el.value, count)
                rest = rest if rest is not None else cst.Integer("1")
                out.edits[el.value] = lambda u, r=rest: r
            out.lines.append((call, f"grid without the V-tile count {C.code_of(count)}: one program per (sequence, head)"))
        elif ns > 1 or owner is None:
            tile = block_text if owner is not None else f"({width})"
            wider = cst.parse_expression(f"{cdiv_fn}({v_text}, {tile} * {ns})" if ns > 1 else f"{cdiv_fn}({v_text}, {tile})")
            out.edits[count] = lambda u, w=wider: w
            out.lines.append((call, f"grid: {programs} programs per head, {ns} sub-tile(s) each"))
        if warps is not None:
            _set_warps(out, call, warps)
        if stages is not None:
            _set_stages(out, call, stages)
    return out


def _set_stages(out: LaunchEdit, call: cst.Call, stages: int) -> None:
    """Only where the launch sets num_stages: the merged loop prefetches by hand, and Triton's own
    pipelining of the same loop then costs registers (an option the gate measures)."""
    arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "num_stages"), None)
    if arg is not None and not (isinstance(arg.value, cst.Integer) and int(arg.value.value) == stages):
        out.edits[arg] = lambda u: u.with_changes(value=cst.Integer(str(stages)))
        out.lines.append((call, f"num_stages={stages}"))


def _set_warps(out: LaunchEdit, call: cst.Call, warps: int) -> None:
    arg = next((a for a in call.args if a.keyword is not None and a.keyword.value == "num_warps"), None)
    if arg is not None:
        out.edits[arg] = lambda u: u.with_changes(value=cst.Integer(str(warps)))
        return
    prev = out.edits.get(call)

    def add(u: cst.Call) -> cst.Call:
        u = prev(u) if prev else u
        args = list(u.args)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        args.append(cst.Arg(keyword=cst.Name("num_warps"), value=cst.Integer(str(warps)),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        return u.with_changes(args=args)

    out.edits[call] = add
    out.lines.append((call, f"num_warps={warps}"))
