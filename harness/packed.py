"""Packed widths: a tensor dim the launcher splits into counts by arithmetic, as serving stacks pack q, k
and v into one row (vLLM's packed decode: ``qkv_dim = mixed_qkv.shape[1]``, ``qk_dim = qkv_dim - HV * V``,
``H = qk_dim // 2 // K``, then ``H`` passed to the kernel). A width drawn on its own breaks the launcher's
own checks (``qk_dim % 2``, ``q_dim % K``) or the kernel's addressing; so the count is the dim (``H``, sized
like heads) and the width is computed from it by inverting the chain (``qkv_dim = (H * K) * 2 + HV * V``).
Only invertible steps are followed: ``- e``, ``+ e``, ``// e`` with ``e`` over other dims and literals, and
only a chain that takes another part off the width (a ``-`` or ``+``) marks it as packed: a ratio alone
(``G = HQ // H``, ``ffn = fused // 2``) keeps the width as the dim and the count a size computed from it.
"""
from __future__ import annotations

import ast

from skel.harness.layout import names_in
from skel.harness.sizes import Size, Translate

_MAX_DEPTH = 8


def unpack_widths(st, tensors: list[str], module: dict[str, object]) -> None:
    """Into ``st``: each tensor dim the launcher splits into a count it passes to the kernel becomes a size
    computed from that count, and the count a dim of its own (``st.counted``)."""
    lf = st.lf
    in_shapes = {d for t in tensors for d in st.shapes.get(t, ()) if d in lf.dims}
    tr = Translate(lf, set(lf.dims), module)
    for kparam, expr in sorted(st.binding.items()):
        if not expr.isidentifier() or expr in lf.dims or expr in lf.dim_alias or lf.param(expr) \
                or expr not in lf.exprs or expr in lf.allocs or expr in st.counted:
            continue
        value = lf.exprs[expr]
        for dim in sorted(_reaches(lf, value, in_shapes, 0)):
            code = _invert(lf, tr, value, expr, dim, 0)
            if code is None or " + " not in code and " - " not in code or dim in st.sizes or any(dim in names_in(s.code) for n, s in st.sizes.items() if n != expr):
                continue
            st.sizes.pop(expr, None)  # the count is a dim now, no longer a size computed from the width
            st.sizes[dim] = Size(dim, code, f"the launcher splits it into {expr} ({ast.unparse(value)})")
            st.free.add(expr)
            st.counted.add(expr)
            st.notes.append(f"'{dim}' is packed: the launcher derives {expr} = {ast.unparse(value)} from it and"
                            f" passes {expr} to {st.kf.name}; {expr} is a dim (sized like heads), {dim} = {code}")
            break


def _reaches(lf, node: ast.AST, dims: set[str], depth: int) -> set[str]:
    """The tensor dims an expression is computed from, through the launcher's locals."""
    if depth > _MAX_DEPTH:
        return set()
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            name = lf.dim_alias.get(n.id, n.id)
            if name in dims:
                out.add(name)
            elif name in lf.exprs and name not in lf.allocs and not lf.param(name):
                out |= _reaches(lf, lf.exprs[name], dims, depth + 1)
    return out


def _invert(lf, tr: Translate, node: ast.AST, target: str, dim: str, depth: int) -> str | None:
    """``dim`` solved from ``node == target`` (``node`` computed from ``dim`` by invertible steps), as code."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(node, ast.Name):
        name = lf.dim_alias.get(node.id, node.id)
        if name == dim:
            return target if depth else None  # a bare rename is an alias, not a split
        if name in lf.exprs and name not in lf.allocs and not lf.param(name):
            return _invert(lf, tr, lf.exprs[name], target, dim, depth + 1)
        return None
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, (ast.Add, ast.Sub, ast.FloorDiv)):
        return None
    dims = {dim}
    on_left, on_right = (dim in _reaches(lf, side, dims, 0) for side in (node.left, node.right))
    if on_left and not on_right:
        other = tr.code(node.right)
        if other is None:
            return None
        inverse = {ast.Add: f"({target} - {other})", ast.Sub: f"({target} + {other})",
                   ast.FloorDiv: f"({target} * {other})"}[type(node.op)]
        return _invert(lf, tr, node.left, inverse, dim, depth + 1)
    if on_right and not on_left and isinstance(node.op, ast.Add):
        other = tr.code(node.left)
        return None if other is None else _invert(lf, tr, node.right, f"({target} - {other})", dim, depth + 1)
    return None


def asserted_products(st, tensors: list[str], module: dict[str, object]) -> None:
    """``assert H * head_k_dim == HD`` with HD a tensor's dim (a flattened [..., H * D] row): HD is computed
    from the factors, a required int factor becoming a dim of its own (sized like heads), so that the drawn
    width satisfies the launcher's own check."""
    lf = st.lf
    in_shapes = {d for t in tensors for d in st.shapes.get(t, ())}
    for name, node in lf.products.items():
        dim = lf.dim_alias.get(name, name)
        if dim not in in_shapes or dim in st.sizes:
            continue
        tr = Translate(lf, set(lf.dims), module)
        code = tr.code(node)
        if code is None or dim in names_in(code) or not names_in(code) <= in_shapes | tr.free:
            continue
        st.sizes[dim] = Size(dim, code, f"the launcher asserts {ast.unparse(node)} == {name}")
        st.free |= tr.free
        st.counted |= tr.free
        st.notes.append(f"'{dim}' = {code}: the launcher asserts it"
                        + (f" ({', '.join(sorted(tr.free))}: a dim, sized like heads)" if tr.free else ""))

