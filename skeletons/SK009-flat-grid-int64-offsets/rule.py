"""SK009-flat-grid-int64-offsets: one flat grid axis, decomposed in the kernel, in int64.

Conditions (detector):
Grid axes 1 and 2 are limited to 65535 programs, and offsets like ``(i_n * HV + i_hv) * K * V``
overflow int32 at serving sizes. Opportunity: the kernel reads program-id axis 1 or 2 and
none of its program ids is widened to int64. Instance: axis 0 widened to int64
(``tl.program_id(0).to(tl.int64)``, ``(int64_t)blockIdx.x``) and split into several indices
with ``//`` and ``%``.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.helpers import terms as _terms
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

WIDE = re.compile(r"tl\.int64|int64_t|\bsize_t\b|long\s+long|uint64_t|\bint64\b")


def _widened(ctx: Ctx, ax) -> str | None:
    if WIDE.search(ctx.statement(ax.line)) and not _redefined(ctx, ax.var, ax.line):
        return f"line {ax.line}: {ctx.text(ax.line)}"
    names = _reach(ctx, ax)
    for a in ctx.assigns:
        if not WIDE.search(a.rhs) or any(_redefined(ctx, t, a.line) for t in a.targets):
            continue
        # the id itself (``pid = pid.to(tl.int64)``), or an index computed from it widened before it
        # scales an offset (``row_idx = i.to(tl.int64)`` for a row loop over the program's rows,
        # ``row = (m_start + offs_m[:, None]).to(tl.int64)`` in a persistent tile loop)
        # (a cast of a product is not: ``(pid * K).to(tl.int64)`` multiplied in int32 first)
        if set(a.targets) & ({ax.var} | set(ax.derived)) or (set(_NAMES.findall(a.rhs)) & names and "*" not in a.rhs):
            return f"line {a.line}: {' '.join(a.targets)} = {a.rhs}"
    return None


_NAMES = re.compile(r"[A-Za-z_]\w*")


def _reach(ctx: Ctx, ax) -> set[str]:
    """The axis's id and every value computed from it without a cast, loop variables over ranges
    built from them included (``for i in range(row_start, ...)``)."""
    cache = ctx.cache.setdefault(CODE, {}).setdefault("reach", {})
    if ax.axis not in cache:
        names = {ax.var, *ax.derived}
        loops = [(lp.var, set(_NAMES.findall(lp.iter_text))) for lp in ctx.p.loops if lp.var]
        for _ in range(4):
            before = len(names)
            for a in ctx.assigns:
                if set(_NAMES.findall(a.rhs)) & names and not WIDE.search(a.rhs):
                    names.update(a.targets)
            names.update(v for v, used in loops if used & names)
            if len(names) == before:
                break
        cache[ax.axis] = names
    return cache[ax.axis]


def _redefined(ctx: Ctx, name: str, line: int) -> bool:
    """``name`` is assigned again after ``line`` with a value that neither reads it nor is 64-bit
    (``pid = tl.program_id(0).to(tl.int64)`` then ``pid = tl.program_id(0)``): the widening is dead."""
    word = re.compile(rf"\b{re.escape(name)}\b")
    return any(a.line > line and a.op == "=" and a.targets == (name,) and not word.search(a.rhs)
               and not WIDE.search(a.rhs) for a in ctx.assigns)


def _decomposed(ctx: Ctx, ax) -> list[str]:
    """Index assignments that split the axis with // or % (following derived names forward)."""
    names = {ax.var} | set(ax.derived)
    rows = []
    for a in ctx.assigns:
        if a.line < ax.line or not names & set(re.findall(r"\w+", a.rhs)):
            continue
        if re.search(r"//|%|(?<![/])/(?![/])", a.rhs) and len(a.rhs) < 80:
            names |= set(a.targets)
            rows.append(f"line {a.line}: {', '.join(a.targets)} = {a.rhs}")
    return rows


TINY_AXIS = re.compile(r"^(?:\d+|[A-Z]*H[A-Z]*|N[VK]|num_(?:q_|kv_)?heads?|head_num|n_heads|\w*heads?\w*|\w*SPLITS?\w*|"
                       r"\w*splits?\w*|\w*CHUNKS?\w*|\w*_tiles?|\w*TILES?|\w*groups?|\w*GROUPS?)$")


def _high_axes(ctx: Ctx):
    """Grid axes 1 and 2 whose extent, as a launch in the file shows it, can pass 65535: not a
    literal, a head count, a split or chunk count, or a cdiv of a head dim by its tile (``NV``)."""
    out = []
    for ax in ctx.p.program_axes:
        if ax.axis not in (1, 2):
            continue
        dims = [s.grid_dims[ax.axis] for s in ctx.p.launches if len(s.grid_dims) > ax.axis]
        if dims and all(_tiny(d) for d in dims):
            continue
        if not dims and ctx.p.launches:
            continue  # the grid is built elsewhere (a lambda, a variable): its extent is not known here
        if not ctx.p.launches:
            continue  # no launch in the file: nothing says the axis is large
        out.append(ax)
    return out


def _tiny(dim: str) -> bool:
    d = dim.replace(" ", "")
    m = re.fullmatch(r"(?:triton\.)?cdiv\(([A-Za-z_]\w*),[A-Za-z_]\w*\)", d)
    if m and m.group(1) in ("K", "V", "D", "head_dim", "HEAD_DIM", "Lk", "Lv", "dim"):
        return True
    return all(TINY_AXIS.match(t) for t in re.split(r"[*+]", d) if t)


def _pid_names(ctx: Ctx) -> set[str]:
    """Program ids and every variable computed from them (following assignments forward)."""
    cache = ctx.cache.setdefault(CODE, {})
    if "pid" not in cache:
        names = set()
        for ax in ctx.p.program_axes:
            names |= {ax.var, *ax.derived, *(v for v, _ in ax.roles)}
        for a in ctx.assigns:
            if set(re.findall(r"[A-Za-z_]\w*", a.rhs)) & names and not WIDE.search(a.rhs):
                names |= set(a.targets)
        cache["pid"] = names
    return cache["pid"]


def _offsets(ctx: Ctx) -> list[tuple[int, str, int]]:
    """(line, text, size factors) for pointer offsets that multiply a program-id value by sizes,
    in a kernel whose program ids are never widened to int64."""

    if any(_widened(ctx, ax) for ax in ctx.p.program_axes):
        return []
    pids = _pid_names(ctx)
    pointers = {p.name for p in ctx.p.params if not p.constexpr and not (p.annotation or "").startswith(("tl.int", "int"))}
    heads = pointers | _pointer_vars(ctx)
    in_addresses = {n for mo in ctx.p.memops for n in re.findall(r"[A-Za-z_]\w*", mo.pointer)}
    shared = {a.name for a in ctx.p.shared}
    added = _added_to_pointers(ctx, heads)
    exprs = []  # (line, shown text, address expression)
    for a in ctx.assigns:
        head = re.match(r"\s*\(?\s*([A-Za-z_]\w*)", a.rhs)
        # a pointer built from a base (``p_q = q + ...``), a pointer advanced in place (``input += n * H * W * C``),
        # or an offset later added to one (``p_h = i_nh * K * V + ...`` used as ``tl.load(h0 + p_h)``; an offset
        # computed from program ids counts when it is added to a pointer as it is, not when it is an index
        # scaled again there, like ``i_nh`` in ``h0 + i_nh * K * V``); a CUDA read ``x = s_a[pos * H + h]`` is a
        # memory op below
        if (head and head.group(1) in heads and head.group(1) not in shared) or (
                a.op in ("+=", "-=") and set(a.targets) & heads and not set(a.targets) & shared) or (
                set(a.targets) & in_addresses and not set(a.targets) & pids) or set(a.targets) & added:
            shown = f"{', '.join(a.targets)} {a.op} {a.rhs}"
            exprs.append((a.line, shown, a.rhs))
    assigned = {ln for ln, _, _ in exprs}
    for mo in ctx.p.memops:  # an address written inside the load/store call itself
        if mo.line not in assigned and mo.space == "global":
            exprs.append((mo.line, f"{mo.kind} {mo.pointer}", _index_of(mo.pointer)))
    out = []
    for line, shown, expr in sorted(exprs):
        for term in _terms(expr, "+-"):
            if "*" in term and set(re.findall(r"[A-Za-z_]\w*", term)) & pids and not _wide_product(term):
                out.append((line, shown, _size_factors(term, pids, ctx)))
                break
    return out


def _added_to_pointers(ctx: Ctx, heads: set[str]) -> set[str]:
    """Names added as they are to a pointer: a whole additive term of a global load/store address
    (``ptr_o + offset_o``, CUDA ``out[off]``) or of a pointer update (``input += input_offset``)."""
    cache = ctx.cache.setdefault(CODE, {})
    if "added" not in cache:
        exprs = [_index_of(mo.pointer) if ctx.p.language == "cuda" else mo.pointer
                 for mo in ctx.p.memops if mo.space == "global"]
        exprs += [a.rhs for a in ctx.assigns if set(a.targets) & heads and (
            a.op in ("+=", "-=") or (m := re.match(r"\s*\(?\s*([A-Za-z_]\w*)", a.rhs)) and m.group(1) in heads)]
        cache["added"] = {t.strip() for e in exprs for t in _terms(e, "+-") if re.fullmatch(r"\s*[A-Za-z_]\w*\s*", t)}
    return cache["added"]


# one factor of a product already int64: ``offs_m[:, None].to(tl.int64) * N``, ``(int64_t)bx * stride``
WIDE_FACTOR = re.compile(r"^\(?\s*(?:[A-Za-z_]\w*(?:\[[^\]*]*\])?\.to\(\s*tl\.int64\s*\)"
                         r"|\((?:int64_t|long long|size_t)\)\s*[A-Za-z_]\w*"
                         r"|static_cast<\s*(?:int64_t|long long|size_t)\s*>\(\s*[A-Za-z_]\w*\s*\))\s*\)?$")


def _wide_product(term: str) -> bool:
    """A product one of whose factors is a name cast to int64 is computed in int64 (the other operand is
    promoted): its program-id offset cannot overflow. A cast of a product (``(pid * K).to(tl.int64)``) is not:
    the product inside it was int32."""
    return any(WIDE_FACTOR.match(f.strip()) for f in _terms(term, "*"))


_NOT_SIZES = {"tl", "arange", "to", "int64", "int32", "None", "True", "False", "threadIdx", "blockDim", "x", "y", "z",
              "static_cast", "reinterpret_cast", "size_t", "int64_t", "uint32_t", "int", "float"}


def _index_of(pointer: str) -> str:
    """The index of a CUDA subscript ``base[expr]`` (the element offset); other pointers as they are."""
    m = re.match(r"^\s*(?:reinterpret_cast<[^>]*>\([^)]*\)|[A-Za-z_][\w.]*)\s*\[(.*)\]\s*$", pointer, re.S)
    return m.group(1) if m else pointer


def _size_factors(term: str, pids: set[str], ctx: Ctx) -> int:
    """How many size factors multiply the program id in ``term``: ``(bos * H + i_h) * K`` -> 2 (H, K);
    ``pos * num_heads + head_idx`` -> 1; ``bx * seed_stride`` -> 1. Only names count (not literals,
    ``None`` of ``[None, :]``, index vectors like ``tl.arange``, thread indices or the ids themselves)."""
    factors = _terms(term, "*")
    count, has_pid = 0, False
    for f in factors:
        f = f.strip()
        inner = f[1:-1] if f.startswith("(") and f.endswith(")") else None
        names = set(re.findall(r"[A-Za-z_]\w*", f))
        if inner is not None and names & pids:
            sub = [t for t in _terms(inner, "+-") if set(re.findall(r"[A-Za-z_]\w*", t)) & pids]
            count += max((_size_factors(t, pids, ctx) for t in sub), default=0)
            has_pid = True
        elif names & pids:
            has_pid = True
        elif re.fullmatch(r"[A-Za-z_]\w*", f) and f not in _NOT_SIZES and not _thread_index(ctx, f):
            count += 1
    return count if has_pid else 0


def _thread_index(ctx: Ctx, name: str) -> bool:
    """A CUDA lane/thread index (``tx = threadIdx.x``): it bounds nothing beyond the block."""
    cache = ctx.cache.setdefault(CODE, {}).setdefault("tidx", {})
    if name not in cache:
        cache[name] = any(name in a.targets and "threadIdx" in a.rhs for a in ctx.assigns)
    return cache[name]


def _pointer_vars(ctx: Ctx) -> set[str]:
    return {m.group(1) for mo in ctx.p.memops if (m := re.match(r"\s*\(?\s*([A-Za-z_]\w*)", mo.pointer))}


def program_id_multiplied_into_offset(ctx: Ctx) -> Check:
    rows = _offsets(ctx)
    if not rows:
        wide = [w for ax in ctx.p.program_axes if (w := _widened(ctx, ax))]
        return no(f"program ids are widened to int64 before use ({wide[0]})" if wide else "no program id is multiplied into a pointer offset")
    return yes("; ".join(f"line {ln}: {t} (int32)" for ln, t, _ in rows[:3]))


def offset_can_exceed_int32(ctx: Ctx) -> Check:
    big = [(ln, t, n) for ln, t, n in _offsets(ctx) if n >= 2]
    axes = _high_axes(ctx)
    if not big and not axes:
        return no("offsets multiply a program id by at most one size and the grid uses only axis 0")
    parts = [f"line {ln}: {t} multiplies a program id by {n} sizes (e.g. N * H * K * V elements can pass 2**31)" for ln, t, n in big[:2]]
    parts += [f"line {ax.line}: grid axis {ax.axis} is limited to 65535 programs" for ax in axes[:1]]
    return yes("; ".join(parts))


CONDITIONS = {
    "program-id-multiplied-into-offset": program_id_multiplied_into_offset,
    "offset-can-exceed-int32": offset_can_exceed_int32,
}


def candidates(ctx: Ctx) -> list[Hit]:
    rows = _offsets(ctx)
    big = [r for r in rows if r[2] >= 2] or (rows if _high_axes(ctx) else [])
    return [Hit.at(ln, ln, offset=t, sizes=n, high_axes=[ax.axis for ax in _high_axes(ctx)]) for ln, t, n in big]


def _scaled_into_offset(ctx: Ctx, ax) -> str | None:
    """The first statement that multiplies the (widened) axis-0 id, or a name derived from it, into
    an address: ``X_ptr += row * stride``, ``y_base = Y_ptr + row * Y_row_stride``."""
    names = {ax.var, *ax.derived}
    for a in ctx.assigns:
        if a.line <= ax.line:
            continue
        for term in _terms(a.rhs, "+-"):
            if "*" in term and names & set(re.findall(r"[A-Za-z_]\w*", term)):
                return f"line {a.line}: {', '.join(a.targets)} {a.op} {a.rhs}"
    # an address passed straight to a helper: ``_row(dY + row_idx * dY_row_stride, ...)``
    inline = re.compile(r"\b[A-Za-z_]\w*\s*\+\s*\(?\s*(?:" + "|".join(map(re.escape, sorted(names))) + r")\b\s*\*")
    for ln in range(ax.line + 1, ctx.p.end_line + 1):
        if inline.search(ctx.text(ln)):
            return f"line {ln}: {ctx.text(ln).strip()}"
    return None


def instances(ctx: Ctx) -> list[Hit]:
    """Axis 0 widened to int64 and either decomposed into several indices (a flat grid), or the
    kernel's only program axis (the grid is already flat) multiplied into an offset: the end state
    the method describes ("when the grid is already flat, only insert the .to(tl.int64)")."""
    out = []
    axes = {ax.axis for ax in ctx.p.program_axes}
    for ax in ctx.p.program_axes:
        if ax.axis != 0:
            continue
        wide = _widened(ctx, ax)
        if not wide:
            continue
        parts = _decomposed(ctx, ax)
        if sum(len(p.split(" = ", 1)[0].split(",")) for p in parts) >= 2:
            out.append(Hit.at(ax.line, ax.line, widened=wide, decomposition=parts[:4]))
        elif axes == {0} and (use := _scaled_into_offset(ctx, ax)):
            out.append(Hit.at(ax.line, ax.line, widened=wide, offset=use))
    return out


class FlatGridInt64Offsets(Rule):
    """Use one flat 1-D grid decomposed in the kernel, with program ids widened to int64 before offsets."""

    SAFETY = "safe"  # of the method docs.md describes (no automatic rewrite)
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)
