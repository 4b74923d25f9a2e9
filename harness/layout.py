"""Tensor shapes: from what the launcher unpacks, asserts and allocates, and for the rest from the kernel's
address arithmetic (see ``infer``'s docstring): a tensor indexed exactly like one of known shape has its
shape; otherwise its dims are read off its strides, innermost first, and its outermost dim off a tensor
of known shape indexed by the same program id (or, for a pool indexed by loaded slots, ``POOL``)."""
from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from skel.harness.kernel_facts import KernelFacts
from skel.harness.launcher_facts import grid_axes
from skel.harness.poly import Poly
from skel.harness.sizes import resolve_sizes
from skel.harness.state import POOL, HarnessError, State, instead



def read_shapes(st: State, tensors: list[str], path: Path, others: list[State] = (),
                module: dict[str, object] | None = None) -> None:
    """Each tensor's shape into ``st.shapes``; a tensor the judged kernel does not index is read off the
    first of the launcher's ``others`` kernels that does, in that kernel's own names."""
    lf = st.lf
    for t, axes in lf.axes.items():
        rank = lf.ranks.get(t)
        if rank is None and set(axes) == {0, -1}:  # x.shape[0] and x.shape[-1] read (x.view(-1, D)): [N, D]
            rank = 2
            st.notes.append(f"'{t}' taken as 2-D [{axes[0]}, {axes[-1]}]: the launcher reads its first and last dims")
        if rank is not None and all(-rank <= a < rank for a in axes) \
                and all(any(a % rank == i for a in axes) for i in range(rank)):
            st.shapes[t] = tuple(axes.get(i) or axes.get(i - rank) for i in range(rank))
    for _ in range(3):
        for (a, i), (b, j) in lf.same_dim:
            for (x, k), (y, m) in (((a, i), (b, j)), ((b, j), (a, i))):
                dim = lf.axes.get(x, {}).get(k)
                if dim and y not in st.shapes and y not in lf.ranks:
                    lf.axes.setdefault(y, {})[m] = dim
                    if m in (0, -1) and len(lf.axes[y]) == 1:
                        st.shapes[y] = (dim,)
        for a, b in lf.same_shape:
            if a in st.shapes and b not in st.shapes:
                st.shapes[b] = st.shapes[a]
            elif b in st.shapes and a not in st.shapes:
                st.shapes[a] = st.shapes[b]
    known = dict(st.shapes)
    for name, (items, _, like) in lf.allocs.items():
        shape = alloc_shape(items, st, known)
        if shape is not None:
            known[name] = shape
    polys = _launcher_polys(st, known)
    _read_sizes(st, polys, known, module)
    # tensors the launcher reads part of (``B, T, _ = o.shape``) first: others the kernel indexes with their
    # strides (``grad_output + b * o.stride(0) + ...``) are then read off a known shape
    for t in sorted(tensors, key=lambda t: t not in lf.unnamed):
        if t in st.shapes:
            continue
        shape = _layout_shape(st, t, polys, known)
        rank = lf.ranks.get(t)
        if shape is not None and rank and t in lf.unnamed and len(shape) != rank:
            st.notes.append(f"'{t}': the layout read off {st.kf.name} ({list(shape)}) has not the {rank} dims the"
                            " launcher unpacks: not taken")
            shape = None
        elif shape is not None and rank and t in lf.unnamed:  # the axes the launcher names keep their names
            named = lf.axes.get(t, {})
            shape = tuple(named.get(i) or named.get(i - rank) or d for i, d in enumerate(shape))
        for other in others if shape is None and t not in polys else ():
            other.notes = st.notes  # what it finds is this inference's note
            other_polys = _launcher_polys(other, known)
            _read_sizes(other, other_polys, known, module)
            shape = _layout_shape(other, t, other_polys, known)
            if shape is not None:
                st.sizes.update(other.sizes)
                st.free |= other.free
            if shape is not None:
                break
        if shape is None and t not in polys and _unread(t, st, others) and t not in lf.axes:
            shape = ("1",)  # never dereferenced by a kernel launched: any tensor will do
            st.notes.append(f"'{t}' [1]: passed to {st.kf.name} but never loaded, stored or passed on there")
        for name, (items, _, _) in lf.allocs.items() if shape is None and t not in polys else ():
            if items == [("*", t)] and name in polys:  # dh0 = torch.empty_like(h0): h0 is laid out as dh0
                shape = _layout_shape(st, name, polys, known)
                if shape is not None:
                    st.notes.append(f"'{t}' {list(shape)}: as '{name}', allocated like it, which {st.kf.name} indexes")
                    break
        if shape is None and t not in polys and t in lf.axes and not _bound(t, st, others):
            shape = _axes_shape(lf.axes[t], lf.ranks.get(t))
            if shape is not None:
                st.notes.append(f"'{t}' {list(shape)}: no kernel launched here reads it; the launcher reads its dims"
                                f" {dict(sorted(lf.axes[t].items()))} (the rest taken as 1)")
        if shape is None and t in lf.unnamed and lf.ranks.get(t):
            shape = _unnamed_shape(st, t, lf.ranks[t])
        if shape is None:
            raise HarnessError(
                f"{path}:{lf.line}: cannot infer the shape of '{t}' (launcher {lf.name}): it is never unpacked "
                f"and its address in {st.kf.name} ({polys.get(t, 'not indexed')}) does not determine it"
                f"{' (' + st.why[t] + ')' if t in st.why else ''}; {instead(path)}")
        st.shapes[t] = shape
        known[t] = shape
        polys = _launcher_polys(st, known)


def _unnamed_shape(st: State, tensor: str, rank: int) -> tuple[str, ...] | None:
    """A tensor unpacked with ``_`` for some axes (``_, N = b.shape``) whose addressing does not size them:
    each such axis a dim of its own, named after the tensor and axis (``b_0``), the others as unpacked."""
    axes = st.lf.axes.get(tensor, {})
    unnamed = {a % rank for a in st.lf.unnamed[tensor]}
    shape = []
    for i in range(rank):
        dim = axes.get(i) or axes.get(i - rank)
        if dim is None and i in unnamed:
            dim = f"{tensor}_{i}"
            st.lf.dims.setdefault(dim, (tensor, i))
            st.notes.append(f"'{tensor}': axis {i}, unpacked into '_' and not sized by the kernel's addressing,"
                            f" is a dim of its own, {dim}")
        if dim is None:
            return None
        shape.append(dim)
    return tuple(shape)


_NOT_SIZES = ("mask<", "loop:", "load:", "arange(", "pid")


def _read_sizes(st: State, polys: dict[str, Poly], known: dict[str, tuple[str, ...]],
                module: dict[str, object] | None) -> None:
    """The sizes (``skel.harness.sizes``) among the factors of the launcher's addresses, into ``st``."""
    dims = set(st.lf.dims) | {d for shape in known.values() for d in shape}
    names = {f for poly in polys.values() for m, _ in poly.terms for f in m
             if f not in dims and not f.isdigit() and not f.startswith(_NOT_SIZES) and f.isidentifier()}
    names |= {b for poly in polys.values() for m, _ in poly.terms for f in m
              if (b := KernelFacts.root_bound(f)) and b not in dims and b.isidentifier()}
    sizes, free = resolve_sizes(st.lf, names, dims, module or {}, st.kf.root_defs, st.binding, st.kf.params)
    st.sizes.update(sizes)
    st.free |= free


def _bound(tensor: str, st: State, others: list[State]) -> bool:
    """Some kernel launched on the judged path takes ``tensor`` (or a view of it) as an argument."""
    return any(st.lf.aliases.get(e, e) == tensor or st.lf.view_of.get(e) == tensor or names_in(e) & {tensor}
               for s in (st, *others) for e in s.binding.values())


def names_in(expr: str) -> set[str]:
    """The names an expression reads (none where it does not parse)."""
    try:
        return {n.id for n in ast.walk(ast.parse(expr, mode="eval")) if isinstance(n, ast.Name)}
    except SyntaxError:
        return set()


def _axes_shape(axes: dict[int, str], rank: int | None) -> tuple[str, ...] | None:
    """A shape from the axes the launcher reads (``v.shape[-1]``: [V]; ``q.shape[2]``: [1, 1, HQ]), the
    others 1: for a tensor no kernel reads, only the dims the launcher takes from it matter."""
    lead = [a for a in axes if a >= 0]
    tail = [a for a in axes if a < 0]
    n = rank or (max(lead, default=-1) + 1) + (-min(tail, default=0))
    if n <= 0 or any(a >= n or a < -n for a in axes):
        return None
    out = ["1"] * n
    for a, d in axes.items():
        if out[a] != "1" and out[a] != d:
            return None
        out[a] = d
    return tuple(out)


def _unread(tensor: str, st: State, others: list[State]) -> bool:
    """Every kernel parameter ``tensor`` is bound to, in every launch read, is one its kernel never reads."""
    uses = [(s, k) for s in (st, *others) for k, e in s.binding.items() if st.lf.aliases.get(e, e) == tensor]
    return bool(uses) and all(k in s.kf.unread for s, k in uses)


def alloc_shape(items: list, st: State, known: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    out: list[str] = []
    for kind, value in items:
        if kind == "*" and value in known:
            out += known[value]
        elif kind == "dim" and value in st.lf.dims:
            out.append(value)
        elif kind == "dim" and value in st.lf.dim_alias:
            out.append(st.lf.dim_alias[value])
        elif kind == "dim" and (value in st.sizes or value in st.free):
            out.append(value)  # a size the harness computes (NT = cdiv(T, BT)) or a tile argument
        elif kind == "axis" and value[0] in known:
            out.append(known[value[0]][value[1]])
        elif kind == "int":
            out.append(str(value))
        elif kind == "dim" and (size := _size_on_path(st, value)) is not None:
            out.append(str(size))  # BT = chunk_size (default 64): the size the default path allocates
        elif kind == "dim":
            out.append("1")  # a size that is not a shape dim (a tile count such as NK: 1 on the default path)
        else:
            return None
    return tuple(out)


def _size_on_path(st: State, name: str) -> int | None:
    """A size local's value on the judged path when the code fixes it: a literal (``BT = 64``) or a
    parameter's int default (``BT = chunk_size``, ``chunk_size: int = 64``), through plain renames."""
    for _ in range(4):
        p = st.lf.param(name)
        if p is not None:
            ok = p.has_default and isinstance(p.default, int) and not isinstance(p.default, bool)
            return p.default if ok and p.default > 0 else None
        value = st.lf.exprs.get(name)
        if isinstance(value, ast.Constant):
            ok = isinstance(value.value, int) and not isinstance(value.value, bool) and value.value > 0
            return value.value if ok else None
        if not isinstance(value, ast.Name):
            return None
        name = value.id
    return None


def _launcher_polys(st: State, known: dict[str, tuple[str, ...]]) -> dict[str, Poly]:
    """Each bound pointer's address in the launcher's dims (kernel sizes renamed, strides expanded)."""
    rename: dict[str, str] = {}
    for kparam, expr in st.binding.items():
        rename[kparam] = expr
    polys: dict[str, Poly] = {}
    spans = grid_roots(st)
    for kparam, use in st.kf.pointers.items():
        expr = st.binding.get(kparam)
        target = st.lf.aliases.get(expr, expr) if expr else None
        if target is None or use.address is None:
            continue
        poly = use.address.rename({r: spans.get(r) or _rename_root(r, rename) for m, _ in use.address.terms for r in m})
        polys.setdefault(target, _expand_strides(poly, known, st.lf.aliases))
    return polys


def _more_polys(st: State, tensor: str, known: dict[str, tuple[str, ...]]) -> list[Poly]:
    """The addresses of ``tensor``'s other loads and stores (``PointerUse.more``), renamed like its first."""
    rename = dict(st.binding)
    spans = grid_roots(st)
    out: list[Poly] = []
    for kparam, use in st.kf.pointers.items():
        expr = st.binding.get(kparam)
        if expr is None or st.lf.aliases.get(expr, expr) != tensor:
            continue
        for address in (use.address, *use.more) if use.address is not None else ():
            poly = address.rename({r: spans.get(r) or _rename_root(r, rename) for m, _ in address.terms for r in m})
            poly = _expand_strides(poly, known, st.lf.aliases)
            if poly not in out:
                out.append(poly)
    return out


def grid_roots(st: State) -> dict[str, str]:
    """Program ids over a grid axis of one launcher dim (``grid = (cdiv(T, BT), H)``: pid1 spans [0, H)),
    and the parts of one split over an axis of two (``i_n, i_h = pid // H, pid % H`` on an axis of
    ``N * H``: [0, N) and [0, H)), as bounded roots ``mask<DIM`` like a masked offset."""
    return {root: KernelFacts.bounded(dims[0]) for root, dims in grid_spans(st).items() if len(dims) == 1}


def grid_spans(st: State) -> dict[str, tuple[str, ...]]:
    """Roots over launcher dims, outermost first: a program id over one dim, the parts of its split, and
    a split program id over both parts' dims (``pid`` over ``N * H`` split by H: ("N", "H"))."""
    out: dict[str, tuple[str, ...]] = {}
    for axis, extent in enumerate(st.grid):
        if extent and len(extent) == 1:
            out[f"pid{axis}"] = extent
    for whole, high, low, divisor in st.kf.splits:
        if not whole.startswith("pid") or not whole[3:].isdigit() or int(whole[3:]) >= len(st.grid):
            continue
        extent = list(st.grid[int(whole[3:])] or ())
        div = st.binding.get(divisor, divisor)
        div = st.lf.dim_alias.get(div, div)
        if div in extent:
            extent.remove(div)
            if len(extent) == 1:
                out[high], out[low], out[whole] = (extent[0],), (div,), (extent[0], div)
    return out


def _rename_root(factor: str, rename: dict[str, str]) -> str:
    bound = KernelFacts.root_bound(factor)
    if bound is not None:
        return "mask<" + rename.get(bound, bound)
    if factor.startswith("loop:"):
        return "loop:" + rename.get(factor[5:], factor[5:])
    return rename.get(factor, factor)


def _expand_strides(poly: Poly, known: dict[str, tuple[str, ...]], aliases: dict[str, str]) -> Poly:
    out = Poly()
    for m, c in poly.terms:
        term = Poly.const(c)
        for f in m:
            term = term * _stride_poly(f, known, aliases)
        out = out + term
    return out


def _stride_poly(factor: str, known: dict[str, tuple[str, ...]], aliases: dict[str, str]) -> Poly:
    """``X.stride(i)`` of a contiguous X of known shape -> the product of its later dims (else the atom
    ``X.stride(i)`` with X's alias resolved)."""
    if factor.endswith(")") and ".stride(" in factor:
        tensor, _, rest = factor.partition(".stride(")
        tensor = aliases.get(tensor, tensor)
        factor = f"{tensor}.stride({rest}"
        try:
            axis = int(rest[:-1])
        except ValueError:
            return Poly.atom(factor)
        if tensor in known:
            poly = Poly.const(1)
            for d in known[tensor][axis + 1:] if axis >= 0 else known[tensor][len(known[tensor]) + axis + 1:]:
                poly = poly * (Poly.const(int(d)) if d.isdigit() else Poly.atom(d))
            return poly
    return Poly.atom(factor)


def _is_root(f: str, dims: set[str]) -> bool:
    return f not in dims and not f.isdigit()


def _layout_shape(st: State, tensor: str, polys: dict[str, Poly], known: dict[str, tuple[str, ...]]):
    poly = polys.get(tensor)
    if poly is None:
        return None
    rank = st.lf.ranks.get(tensor)
    for other, shape in known.items():  # indexed exactly like a tensor of known shape (and of its rank)
        if other != tensor and polys.get(other) == poly and (rank is None or len(shape) == rank):
            st.notes.append(f"'{tensor}' has the shape of '{other}' {list(shape)}: the kernel indexes both alike")
            return shape
    dims = set(st.lf.dims) | {d for shape in known.values() for d in shape} | set(st.sizes) | st.free
    if all(not m for m, _ in poly.terms):  # fixed elements only: as many as the last one read
        size = str(sum(c for _, c in poly.terms) + 1)
        st.notes.append(f"'{tensor}' [{size}]: {st.kf.name} reads fixed elements, the last at {int(size) - 1}")
        return (size,)
    own_axes = _own_strides(st, tensor, poly, polys, known, dims)
    addresses = _more_polys(st, tensor, known) if own_axes else []
    if len(addresses) > 1:  # the layout over every access, where the first does not show it all
        saved = list(st.notes), dict(st.rows), set(st.free)
        wider = _strided_axes(st, tensor, polys, known, dims)
        if wider is None and "parts" in st.why.get(tensor, ""):
            return None  # ``y + half + offs`` beside ``y + offs``: not the one dim the first access shows
        if wider is not None and (any(not m for a in addresses for m, _ in a.terms)
                                  or st.lf.ranks.get(tensor, len(own_axes)) != len(own_axes)):
            return wider  # another access reads fixed elements past the first (``w + d*s + 1``, ``+ 2``)
        st.notes[:], st.rows, st.free = saved
    if own_axes:
        st.notes.append(f"'{tensor}' {list(own_axes)}: {st.kf.name} indexes each of its dims through its own stride")
        return own_axes
    own = f"{tensor}.stride("  # the tensor's own stride: whatever its inner dims make it
    lead = [m for m, _ in poly.terms if any(f.startswith(own) for f in m)]
    inner = Poly.of({m: c for m, c in poly.terms if not any(f.startswith(own) for f in m)})
    if len(lead) > 1:
        return _strided_axes(st, tensor, polys, known, dims)
    prefix: list[str] = []
    if lead:
        roots = tuple(f for f in lead[0] if not f.startswith(own))
        if len(roots) != 1:
            return _strided_axes(st, tensor, polys, known, dims)
        src = KernelFacts.loaded_from(roots[0])
        if src:  # a slot index into a pool: the leading dim is the pool's
            prefix = [POOL]
            st.notes.append(f"'{tensor}' is a pool indexed by the values of '{src}' (slots): leading dim {POOL}")
        else:
            span = _span(st, tensor, roots, True, polys, known, dims)
            if not span:
                return _strided_axes(st, tensor, polys, known, dims)
            prefix = list(span)
        if not inner.terms:
            st.notes.append(f"'{tensor}' {prefix}: read off its strides in {st.kf.name}")
            return tuple(prefix)
        poly = inner
    terms = sorted(((Counter(f for f in m if not _is_root(f, dims)), tuple(sorted(f for f in m if _is_root(f, dims))))
                    for m, _ in poly.terms), key=lambda t: sum(t[0].values()))
    shape = _chain(st, tensor, terms, polys, known, dims)
    for loops, chunks in ((True, True), (False, True), (False, False)):  # inside an axis: a loop over a
        if shape is None:  # size, an index scaled by a chunk size (i_t * BT)
            shape = _chain_of_axes(st, tensor, terms, polys, known, dims, loops, chunks)
    if shape is None:
        return _strided_axes(st, tensor, polys, known, dims)
    shape = prefix + shape
    st.notes.append(f"'{tensor}' {shape}: read off its strides in {st.kf.name}")
    return tuple(shape)


def _chain(st: State, tensor: str, terms: list, polys: dict[str, Poly], known: dict[str, tuple[str, ...]],
           dims: set[str]) -> list[str] | None:
    """A contiguous layout read innermost first: each term an axis, each stride the one before times the
    dims placed (an index of unknown extent spans what the next stride adds)."""
    if not terms or sum(terms[0][0].values()) or any(not roots for _, roots in terms):
        return None
    shape: list[str] = []
    for k, (stride, roots) in enumerate(terms):
        outer = k == len(terms) - 1
        part = _known_part(st, tensor, roots, outer, k == 0, polys, known, dims)
        if part is None and not outer:
            extra = terms[k + 1][0] - stride
            if stride - terms[k + 1][0] or sum(extra.values()) != 1:
                return None
            part = [next(iter(extra))]
        if part is None and shape:
            part = _leading(st, tensor, shape, known)
        if part is None and shape and outer:
            part = _rows(st, tensor, roots, stride, dims)
        if part is None:
            return None
        shape = part + shape
        # a contiguous layout: the next stride is this one times the dims just placed
        if not outer and terms[k + 1][0] != stride + Counter(part):
            return None
    return shape


def _leading(st: State, tensor: str, inner: list[str], known: dict[str, tuple[str, ...]]) -> list[str] | None:
    """An outermost index of unknown extent (``i_n`` of a program id split the launcher does not show)
    over axes ``[T, ...]``: the leading dim of the tensors of known shape whose second axis is ``T``
    (``B`` of ``k [B, T, H, K]``), when they all agree."""
    leads = {shape[0] for other, shape in known.items() if other != tensor and len(shape) >= 2
             and shape[1] == inner[0] and not shape[0].isdigit()}
    if len(leads) != 1:
        return None
    lead = leads.pop()
    st.notes.append(f"'{tensor}': its outermost index has no extent the code shows; taken as {lead}, the leading"
                    f" dim of the tensors whose next axis is {inner[0]}")
    return [lead]


def _rows(st: State, tensor: str, roots: tuple[str, ...], stride: Counter, dims: set[str]) -> list[str] | None:
    """An outermost program id over a grid axis the launcher counts from a tensor (``(delta.numel(),)``,
    rows of a flattened view) with a stride of dims only: one row per program, a dim of its own (``N``),
    shared by every tensor the same program id indexes."""
    if len(roots) != 1 or not roots[0].startswith("pid") or not roots[0][3:].isdigit():
        return None
    if any(f not in dims or f in st.sizes or f in st.free for f in stride):
        return None
    axis = int(roots[0][3:])
    if axis < len(st.grid) and st.grid[axis]:
        return None  # a grid axis of dims: already read
    if roots[0] not in st.rows:
        taken = dims | set(st.rows.values())
        st.rows[roots[0]] = next(n for n in ("N", "R", "N_rows", "ROWS") if n not in taken)
    name = st.rows[roots[0]]
    st.notes.append(f"'{tensor}': one row per program of grid axis {axis}, which the launcher counts from a tensor"
                    f" (not a dim): rows taken as a dim of their own, {name}")
    return [name]


def _chain_of_axes(st: State, tensor: str, terms: list, polys: dict[str, Poly],
                   known: dict[str, tuple[str, ...]], dims: set[str], loops: bool = True,
                   chunks: bool = True) -> list[str] | None:
    """The layout read off the terms whose index has a known extent, the others taken as offsets inside
    an axis: ``BT*H*T*mask<B + BT*H*mask<T + BT*mask<H + BC*i_i + loop:j`` (a sub-block ``i_i`` and a
    loop ``j`` inside the last axis) is [B, T, H, BT]; a constant (``-1*H``: the row before) is an offset
    too. Every offset's stride must be of lower order than the outermost axis's (it moves inside the
    tensor), and an innermost stride of one dim is that axis (the offsets walk it). With ``loops`` False a
    loop over a size is an offset too (``for j in range(BC)`` stepping inside a row of BT); with ``chunks``
    False so is an index a chunk size scales (``i_t * BT * H*V``, a chunk's first row). An axis only
    offsets index sits between two known ones (``BT*H*V*i_t + H*T*V*mask<B + V*mask<H + mask<V``:
    [B, T, H, V])."""
    tiles = set(st.sizes) | st.free
    axes = [(stride, roots) for stride, roots in terms
            if roots and (loops or not any(r.startswith("loop:") for r in roots))
            and (chunks or not (set(stride) & tiles and not any(r.startswith("mask<") for r in roots)))
            and _known_part(st, tensor, roots, False, False, polys, known, dims) is not None]
    if not axes or len(axes) == len(terms):
        return None
    outer = axes[-1][0]

    def order(stride: Counter) -> int:  # a chunk or tile size scales an index inside an axis
        return sum(n for f, n in stride.items() if f not in tiles)
    offsets = [stride for stride, roots in terms if (stride, roots) not in axes]
    if any(order(stride) >= order(outer) for stride in offsets):
        return None
    inner: list[str] = []
    if sum(axes[0][0].values()):
        if sum(axes[0][0].values()) != 1:
            return None
        inner = [next(iter(axes[0][0]))]
        axes = [(Counter(), ())] + axes
    shape: list[str] = []
    for k, (stride, roots) in enumerate(axes):
        if k == 0 and inner:
            part = inner
        else:
            part = _known_part(st, tensor, roots, k == len(axes) - 1, k == 0, polys, known, dims)
        if part is None:
            return None
        shape = part + shape
        if k < len(axes) - 1 and axes[k + 1][0] != stride + Counter(part):
            # an axis only offsets index (``(i_t * BT + i_i * BC) * H*V`` in [B, T, H, V]): one dim between
            # this stride and the next, and an offset moving at exactly this stride
            here = stride + Counter(part)
            gap = axes[k + 1][0] - here
            if here - axes[k + 1][0] or sum(gap.values()) != 1 or next(iter(gap)) in tiles \
                    or not any(Counter({f: n for f, n in o.items() if f not in tiles}) == here for o in offsets):
                return None
            shape = [next(iter(gap))] + shape
    st.notes.append(f"'{tensor}': offsets of unknown extent inside its axes taken as such")
    return shape


def _known_part(st: State, tensor: str, roots: tuple[str, ...], outer: bool, first: bool, polys: dict[str, Poly],
                known: dict[str, tuple[str, ...]], dims: set[str]) -> list[str] | None:
    """The dims an axis index spans when its extent is known: a masked offset or a loop over a dim, a
    ``min(..., T)`` over [0, T], a program id over grid dims, an index another tensor shows."""
    bound = KernelFacts.root_bound(roots[0]) if len(roots) == 1 else None
    if len(roots) == 1 and roots[0].startswith("loop:") and roots[0][5:] in dims:
        bound = roots[0][5:]  # a loop index spans [0, its stop)
    if len(roots) == 1 and bound is None:
        bound = _min_bound(roots[0], st, dims) or _arange_bound(roots[0], st, dims) or _mod_bound(roots[0], st, dims)
    span = _span(st, tensor, roots, outer, polys, known, dims)
    grid = grid_spans(st)
    if first and bound and not outer:
        return [bound]
    if span:
        return list(span)
    if bound and bound in dims:  # an index over [0, DIM) (a masked offset, a program id over DIM)
        return [bound]
    if len(roots) == 1 and roots[0] in grid:  # a program id over a grid axis of several dims
        return list(grid[roots[0]])
    return None


def _arange_bound(root: str, st: State, dims: set[str]) -> str | None:
    """``arange(D)`` unmasked over a dim D spans it (not over a tile, ``BN = next_power_of_2(N)``, which
    only covers a dim: its extent is what the next stride says)."""
    if not (root.startswith("arange(") and root.endswith(")")):
        return None
    name = launcher_dim(st, root[7:-1], dims)
    return name if name is not None and name not in st.sizes and name not in st.free else None


def launcher_dim(st: State, kparam: str, dims: set[str]) -> str | None:
    """The launcher dim kernel parameter ``kparam`` is bound to (``n_cols=n_cols``, through a dim alias),
    if it is one of ``dims``."""
    name = st.binding.get(kparam, kparam)
    name = st.lf.dim_alias.get(name, name)
    return name if name in dims else None


def _mod_bound(root: str, st: State, dims: set[str]) -> str | None:
    """``i_hv = i_nh % HV``: a remainder spans [0, HV) (an index split off a flattened program id)."""
    value = st.kf.root_defs.get(root)
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.Mod) and isinstance(value.right, ast.Name):
        return launcher_dim(st, value.right.id, dims)
    return None


def _min_bound(root: str, st: State, dims: set[str]) -> str | None:
    """``min(i_t * BT + BT, T)``: an index clipped to a dim (the end of a chunk, less one) spans it."""
    try:
        node = ast.parse(root, mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "min"):
        return None
    for arg in node.args:
        if isinstance(arg, ast.Name) and (name := launcher_dim(st, arg.id, dims)) is not None:
            return name
    return None


def _own_strides(st: State, tensor: str, poly: Poly, polys: dict[str, Poly], known: dict[str, tuple[str, ...]],
                 dims: set[str]) -> tuple[str, ...] | None:
    """``x.stride(0)*mask<B + x.stride(1)*loop:T + x.stride(2)*mask<H`` (each axis i indexed through
    ``x.stride(i)`` by an index of known extent, the last perhaps with stride 1): [B, T, H]. Other terms
    on an axis (a constant, an index of unknown extent beside a known one) are offsets inside it."""
    axes: dict[int | None, str] = {}  # stride axis (None: unit stride) -> dim
    offsets: set[int | None] = set()
    own = f"{tensor}.stride("
    for m, c in poly.terms:
        strides = [f[len(own):-1] for f in m if f.startswith(own)]
        roots = tuple(f for f in m if not f.startswith(own))
        if len(strides) > 1 or (strides and not strides[0].isdigit()):
            return None
        axis = int(strides[0]) if strides else None
        if not roots:
            offsets.add(axis)
            continue
        part = _known_part(st, tensor, roots, False, False, polys, known, dims) if len(roots) == 1 else None
        if c != 1 or part is None or len(part) != 1:
            offsets.add(axis)
            continue
        if axes.get(axis, part[0]) != part[0]:
            return None
        axes[axis] = part[0]
    numbered = sorted(a for a in axes if a is not None)
    if not numbered or numbered != list(range(len(numbered))) or any(o not in axes for o in offsets):
        return None
    return tuple(axes[i] for i in numbered) + ((axes[None],) if None in axes else ())


def _span(st: State, tensor: str, roots: tuple[str, ...], outer: bool, polys: dict[str, Poly],
          known: dict[str, tuple[str, ...]], dims: set[str]) -> tuple[str, ...] | None:
    """The dims an index spans in a tensor of known shape that the kernel indexes with it: the axis
    whose stride it carries there (and, for an outermost index, every axis before it). An index the
    kernel splits (``i_n = r // H``, ``i_h = r % H``) spans its parts' dims."""
    if len(roots) == 1:
        for whole, high, low, _ in st.kf.splits:
            if _rename_root(whole, st.binding) == roots[0]:
                a = _span(st, tensor, (high,), outer, polys, known, dims)
                b = _span(st, tensor, (low,), False, polys, known, dims)
                if a and b:
                    return a + b
    for other, shape in known.items():
        poly = polys.get(other)
        if other == tensor or poly is None:
            continue
        terms = sorted(((Counter(f for f in m if not _is_root(f, dims)), tuple(sorted(f for f in m if _is_root(f, dims))))
                        for m, _ in poly.terms), key=lambda t: sum(t[0].values()))
        for k, (stride, r) in enumerate(terms):
            if r != roots:
                continue
            for axis in range(len(shape)):
                if Counter(d for d in shape[axis + 1:] if not d.isdigit()) == stride:
                    first = 0 if k == len(terms) - 1 else _axis_after(terms[k + 1][0], shape)
                    if first is None or first > axis:
                        break
                    return tuple(d for d in shape[first:axis + 1] if not d.isdigit()) or None
    return None


def _axis_after(stride: Counter, shape: tuple[str, ...]) -> int | None:
    """The first axis after the one whose stride is ``stride``."""
    for axis in range(len(shape)):
        if Counter(d for d in shape[axis + 1:] if not d.isdigit()) == stride:
            return axis + 1
    return None


def _passed_strides(st: State, tensor: str) -> set[int]:
    """The axes ``i`` of the ``tensor.stride(i)`` the launcher passes to the judged kernel."""
    out: set[int] = set()
    for expr in st.binding.values():
        name, _, rest = expr.partition(".stride(")
        if rest.endswith(")") and rest[:-1].lstrip("-").isdigit() and st.lf.aliases.get(name, name) == tensor:
            out.add(int(rest[:-1]))
    return out


def _strided_axes(st: State, tensor: str, polys: dict[str, Poly], known: dict[str, tuple[str, ...]],
                  dims: set[str]) -> tuple[str, ...] | None:
    """``_read_strided``, leaving the notes, rows and free dims as they were where it reads no layout."""
    notes, rows, free = list(st.notes), dict(st.rows), set(st.free)
    shape = _read_strided(st, tensor, polys, known, dims)
    if shape is None:
        st.notes[:], st.rows, st.free = notes, rows, free
    return shape


def _read_strided(st: State, tensor: str, polys: dict[str, Poly], known: dict[str, tuple[str, ...]],
                  dims: set[str]) -> tuple[str, ...] | None:
    """A tensor whose axes the kernel addresses through the launcher's ``tensor.stride(i)``, in any of its
    loads and stores (``lse + b*stride_lb + h*stride_lh``, then ``+ i*stride_ln`` in a loop over N): axis
    i spans the extent of the index its stride scales (a masked offset, a loop or program id over a dim, a
    value loaded from a slot index: a pool of ``POOL``), a unit-stride index is the innermost axis, and an
    axis whose stride the launcher passes but no address moves along is read at index 0 only: the
    launcher's own dim for it where it reads one, else 1. Where an axis's index has no extent the code
    shows, the reason is kept for the refusal (``st.why``)."""
    own = f"{tensor}.stride("
    axes: dict[int | None, str] = {}  # stride axis (None: unit stride) -> dim
    unknown: dict[int | None, str] = {}  # axis -> an index of unknown extent moving along it
    consts: set[int | None] = set()
    fixed: dict[int | None, int] = {}  # axis -> the last fixed element read along it (``+ 2``, ``+ stride_w``)
    addresses = _more_polys(st, tensor, known)
    numbers = {f[len(own):-1] for a in addresses for m, _ in a.terms for f in m if f.startswith(own)}
    numbers |= {str(a) for a in _passed_strides(st, tensor)}
    if not numbers or not all(n.lstrip("-").isdigit() for n in numbers):
        return None
    shift = 0
    if all(n.startswith("-") for n in numbers):  # x.stride(-2) with a unit-stride last axis: from the end
        shift = max(-int(n) for n in numbers)
    elif any(n.startswith("-") for n in numbers):
        st.why[tensor] = f"its strides are counted from both ends ({', '.join(sorted(numbers))}): no rank to place them"
        return None
    for address in addresses:
        for m, c in address.terms:
            strides = [f[len(own):-1] for f in m if f.startswith(own)]
            roots = tuple(f for f in m if not f.startswith(own))
            if len(strides) > 1:
                st.why[tensor] = f"one index is scaled by several of its strides ({' * '.join(strides)})"
                return None
            axis = int(strides[0]) + shift if strides else None
            if not roots:
                consts.add(axis)
                fixed[axis] = max(fixed.get(axis, 0), c)
                continue
            if all(r in dims for r in roots):  # ``ffn_size + offs``: a second part of the axis, past the first
                st.why[tensor] = (f"it is read at an offset of {'*'.join(roots)} along "
                                  f"{'its unit stride' if axis is None else f'{tensor}.stride({axis})'}: an axis of"
                                  " several parts (concatenated?), which a shape of dims cannot say")
                return None
            part = _axis_extent(st, tensor, roots, axis, polys, known, dims)
            if c != 1:  # ``2*d + arange(2)``: two indices share the axis, interleaved
                st.why[tensor] = (f"{c}*{'*'.join(roots)} moves along "
                                  f"{'its unit stride' if axis is None else f'{tensor}.stride({axis})'} with"
                                  " another index: an axis of interleaved parts, which a shape of dims cannot say")
                return None
            if c != 1 or part is None or len(part) != 1:
                unknown.setdefault(axis, ("*".join(roots) if c == 1 else f"{c}*{'*'.join(roots)}"))
                continue
            if axes.get(axis, part[0]) != part[0]:
                where = "its unit stride" if axis is None else f"{tensor}.stride({axis})"
                st.why[tensor] = (f"indices over {axes[axis]} and {part[0]} both move along {where}: an axis"
                                  " of several parts (concatenated?), which a shape of dims cannot say")
                return None
            axes[axis] = part[0]
    used = {a for a in (*axes, *unknown, *consts) if a is not None}
    unit = None in axes or None in unknown
    if not used:
        return None
    if None in consts and not unit:  # fixed elements only (w + d*stride_d + 1, + 2): an axis of them
        if fixed[None] <= 0:
            return None
        axes[None], unit = str(fixed[None] + 1), True
    passed = {a + shift for a in _passed_strides(st, tensor)}
    top = max(used | passed)
    rank = top + 1 + (1 if unit and top in used else 0)
    asserted = st.lf.ranks.get(tensor)
    pad = asserted - rank if asserted and unit and asserted > rank else 0  # axes before the unit-stride one
    if asserted and asserted < rank:
        return None
    shape: list[str] = []
    launcher_axes = st.lf.axes.get(tensor, {})
    for i in range(rank):
        key = None if unit and i == rank - 1 else i
        if key in axes:
            shape.append(axes[key])
        elif key in unknown:
            where = "unit stride" if key is None else f"{tensor}.stride({key})"
            st.why[tensor] = (f"axis {i} of '{tensor}' is indexed (through {where}) by {unknown[key]}, whose extent"
                              " the code does not show")
            return None
        elif key in consts and fixed[key] > 0:
            shape.append(str(fixed[key] + 1))  # fixed elements only (``+ stride_w``: 0 and 1)
        elif key in consts:
            return None
        elif (dim := launcher_axes.get(i) or launcher_axes.get(i - rank)) is not None:
            shape.append(dim)
        else:
            shape.append("1")
            st.notes.append(f"'{tensor}': {st.kf.name} never moves along axis {i} (its stride is passed, no index"
                            " scales it): only index 0 is read, taken as 1")
    if pad:  # len(x.shape) == 3 asserted, the kernel moving along fewer axes: the others only at index 0
        shape[-1:-1] = ["1"] * pad
        st.notes.append(f"'{tensor}': the launcher asserts {asserted} dims; {pad} the kernel never moves along taken as 1")
    if asserted and len(shape) != asserted:
        return None
    if POOL in shape[1:]:
        st.why[tensor] = "a loaded slot moves along an inner axis: no pool extent the code shows"
        return None
    if POOL in shape:
        st.notes.append(f"'{tensor}' is a pool indexed by slot values: leading dim {POOL}")
    st.notes.append(f"'{tensor}' {shape}: {st.kf.name} indexes its axes through the strides the launcher passes")
    return tuple(shape)


def _axis_extent(st: State, tensor: str, roots: tuple[str, ...], axis: int | None, polys: dict[str, Poly],
                 known: dict[str, tuple[str, ...]], dims: set[str]) -> list[str] | None:
    """The extent of an index moving along one axis of a strided tensor: what ``_known_part`` reads, a
    masked offset or ``arange`` over a literal size (``arange(0, 512)``, ``HEAD_DIM=128``), a slot loaded
    from another tensor on the leading axis (``POOL``), a program id alone over a grid axis the launcher
    counts from a tensor (a row dim of its own, as ``_rows`` names it)."""
    if len(roots) != 1:
        return None
    root = roots[0]
    part = _known_part(st, tensor, roots, False, False, polys, known, dims)
    if part is not None:
        return part
    if KernelFacts.loaded_from(root):
        return [POOL] if axis == 0 else None  # a slot index into a pool: the leading dim is the pool's
    bound = KernelFacts.root_bound(root)
    if bound is None and root.startswith("arange(") and root.endswith(")"):
        bound = st.binding.get(root[7:-1], root[7:-1])
    if bound is None and root.startswith("loop:"):
        bound = root[5:]  # a loop to a literal (``for t in range(4)``, or a local the launcher sets to one)
    if bound is not None and bound.isdigit() and int(bound) > 0:
        return [bound]
    arg = _int_argument(st, bound) if bound is not None and bound.isidentifier() else None
    if arg is not None:  # offs < hidden with hidden a required int argument: a dim of that name
        st.free.add(arg)
        st.rows[root] = arg
        st.notes.append(f"'{tensor}': axis {'innermost' if axis is None else axis} spans [0, {arg}), {arg} an int"
                        " argument of the launcher: a dim of that name, passed as it")
        return [arg]
    if root.startswith("pid") and root[3:].isdigit():
        k = int(root[3:])
        if k < len(st.grid) and st.grid[k]:
            return None  # a grid axis over dims, which _known_part reads: not one program per row
        count = _grid_count(st, k)
        if count is not None:
            st.free.add(count)
            st.rows[root] = count
            st.notes.append(f"'{tensor}': one row per program of grid axis {k}, which the launcher sizes by its"
                            f" int argument '{count}': a dim of that name, passed as it")
            return [count]
        if root not in st.rows:
            taken = dims | set(st.rows.values())
            st.rows[root] = next(n for n in ("N", "R", "N_rows", "ROWS") if n not in taken)
        st.notes.append(f"'{tensor}': one row per program of grid axis {k}, which the launcher counts from a"
                        f" tensor (not a dim): rows taken as a dim of their own, {st.rows[root]}")
        return [st.rows[root]]
    return None


def _grid_count(st: State, axis: int) -> str | None:
    """The required int argument of the launcher a grid axis is (``grid = (bs, num_heads)``), if it is one."""
    launch = next((l for l in st.lf.launches if l.kernel == st.kf.name), None)
    axes = grid_axes(st.lf, launch) if launch is not None else []
    node = axes[axis] if axis < len(axes) else None
    return _int_argument(st, node.id) if isinstance(node, ast.Name) else None


def _int_argument(st: State, name: str) -> str | None:
    """``name`` if it is a required int argument of the launcher (not a tensor, no default)."""
    name = st.lf.aliases.get(name, name)
    p = st.lf.param(name)
    if p is None or p.has_default or p.optional or "Tensor" in p.annotation or name in st.lf.used_as_tensor \
            or p.annotation not in ("", "int"):
        return None
    return name
