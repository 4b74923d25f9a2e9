"""SK015 empty-output: allocate with ``empty`` an output buffer the kernel overwrites.

Opportunity: a host wrapper allocates ``X = torch.zeros_like(...)`` (``torch.zeros``, ``.new_zeros``),
passes ``X`` to the kernel's launch, the kernel only stores through that parameter (no load, no
atomic), and the host does not read ``X``'s values between the allocation and the launch: the
zero fill is a separate kernel launch whose result is overwritten. Instance: ``X = torch.empty_like``
(``empty``, ``new_empty``) passed to a kernel that only stores to it.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.sk003_hoist_invariant_loads import root_param

CODE = "SK015"
_ALLOC = r"^\s*{name}\s*=\s*(?:torch\.({kinds})|\w+\.(new_{new}))\s*\("
_META = r"\.(?:shape|dtype|device|stride|numel|dim|ndim|size|is_contiguous|element_size)\b|\s+is\b"


def _alloc_line(ctx: Ctx, name: str, before: int, kinds: str, new: str) -> int | None:
    pat = re.compile(_ALLOC.format(name=re.escape(name), kinds=kinds, new=new))
    # the nearest allocation above the launch, no further up than the enclosing module-level def
    for ln in ctx.file.assignment_lines(name, ctx.file.top_def_before(before), before):
        if pat.match(ctx._lines[ln - 1]):
            return ln
    return None


def _sites(ctx: Ctx, kinds: str, new: str) -> list[tuple[int, int, str, str]]:
    """(allocation line, launch line, host name, kernel parameter) for buffers allocated as ``kinds``."""
    out = []
    for site in ctx.p.launches:
        for param, text in site.args:
            name = text.strip()
            if re.fullmatch(r"[A-Za-z_]\w*", name):
                ln = _alloc_line(ctx, name, site.line, kinds, new)
                if ln is not None:
                    out.append((ln, site.line, name, param))
    return out


def _zero_sites(ctx: Ctx):
    return _sites(ctx, "zeros_like|zeros", "zeros")


def _store_only(ctx: Ctx, param: str) -> str | None:
    """Why the kernel's use of ``param`` needs the zeros (None when it only stores through it)."""
    stored = False
    for m in ctx.p.memops:
        through = root_param(ctx, m.pointer, m.line) == param or re.search(rf"\b{re.escape(param)}\b", m.pointer)
        if not through:
            continue
        if m.kind == "store":
            stored = True
        else:  # any operand, not only the leftmost: ``tl.load(offs + o)`` reads o too
            return f"line {m.line}: {m.kind} through {param}"
    return None if stored else f"the kernel never stores through {param}"


def _early_read(ctx: Ctx, name: str, alloc: int, launch: int) -> int | None:
    pat = re.compile(rf"\b{re.escape(name)}\b(?!{_META})")
    for ln in range(alloc + 1, launch):
        if pat.search(ctx.text(ln)) and not re.match(rf"^{re.escape(name)}\s*=", ctx.text(ln)):
            return ln
    return None


def host_zero_fills_output(ctx: Ctx) -> Check:
    rows = _zero_sites(ctx)
    if not rows:
        return no("no buffer passed to the launch is allocated with torch.zeros / zeros_like / new_zeros")
    return yes("; ".join(f"line {a}: {ctx.text(a)} (passed as {p} at line {ln})" for a, ln, _n, p in rows[:2]))


def kernel_only_stores_output(ctx: Ctx) -> Check:
    rows = _zero_sites(ctx)
    good = [(a, p) for a, _l, _n, p in rows if _store_only(ctx, p) is None]
    if not good:
        why = "; ".join(f"{p}: {_store_only(ctx, p)}" for _a, _l, _n, p in rows[:2])
        return no(why or "no zero-filled buffer")
    return yes("; ".join(f"{p} is only stored to" for _a, p in good[:2]))


def not_read_before_launch(ctx: Ctx) -> Check:
    rows = _zero_sites(ctx)
    bad = [(n, _early_read(ctx, n, a, ln)) for a, ln, n, _p in rows if _early_read(ctx, n, a, ln)]
    if rows and len(bad) == len(rows):
        n, ln = bad[0]
        return no(f"line {ln}: {n} is read between its allocation and the launch")
    if not rows:
        return no("no zero-filled buffer")
    return yes("the host reads the buffer's values only after the launch")


def _incomplete(ctx: Ctx, param: str) -> str | None:
    """Why the kernel's stores may leave part of ``param`` to the zeros (None when nothing says so)."""
    head = "\n".join(ctx._lines[max(0, ctx.p.line - 15):ctx.p.line])
    if re.search(rf"reset_to_zero\s*=\s*\[[^\]]*['\"]{re.escape(param)}['\"]", head):
        return f"its autotune resets {param} to zero between trials"
    bounds = {n for lp in ctx.p.loops for n in re.findall(r"[A-Za-z_]\w*", lp.iter_text)}
    for ln in ctx.body:
        if ctx.text(ln) != "return" and not ctx.text(ln).startswith("return "):
            continue
        for test in ctx.enclosing_tests(ln, ctx.p.line):
            empty = any(g in bounds for g in re.findall(r"\b([A-Za-z_]\w*)\s*(?:==|<=)\s*0\b", test))
            if not ctx.constexpr_test(test) and not empty:
                return f"line {ln}: returns early when {test}"
    for m in ctx.p.memops:
        if m.kind == "store" and root_param(ctx, m.pointer, m.line) == param and "make_block_ptr" in ctx.statement(
                (ctx.last_def(m.pointer.split()[0], m.line) or m).line):
            return f"line {m.line}: stores through a block pointer (coverage not checked)"
    return None


def stores_look_complete(ctx: Ctx) -> Check:
    rows = [(p, _incomplete(ctx, p)) for _a, _l, _n, p in _zero_sites(ctx) if _store_only(ctx, p) is None]
    bad = [(p, why) for p, why in rows if why]
    if rows and len(bad) == len(rows):
        return no("; ".join(f"{p}: {why}" for p, why in bad[:2]))
    if not rows:
        return no("no zero-filled buffer the kernel only stores to")
    return yes("no early return on data, no block-pointer store, no autotune reset of the buffer")


CONDITIONS = {
    "host-zero-fills-output": host_zero_fills_output,
    "kernel-only-stores-output": kernel_only_stores_output,
    "not-read-before-launch": not_read_before_launch,
    "stores-look-complete": stores_look_complete,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(a, a, buffer=n, parameter=p, launch_line=ln) for a, ln, n, p in _zero_sites(ctx)
            if _store_only(ctx, p) is None and _early_read(ctx, n, a, ln) is None and _incomplete(ctx, p) is None]


def instances(ctx: Ctx) -> list[Hit]:
    return [Hit.at(a, a, buffer=n, parameter=p, launch_line=ln) for a, ln, n, p in _sites(ctx, "empty_like|empty", "empty")
            if _store_only(ctx, p) is None]
