"""SK015-empty-output: allocate with ``empty`` an output buffer the kernel overwrites.

Conditions (detector):
Opportunity: a host wrapper allocates ``X = torch.zeros_like(...)`` (``torch.zeros``, ``.new_zeros``),
passes ``X`` to the kernel's launch, the kernel only stores through that parameter (no load, no
atomic), and the host does not read ``X``'s values between the allocation and the launch: the
zero fill is a separate kernel launch whose result is overwritten. Instance: ``X = torch.empty_like``
(``empty``, ``new_empty``) passed to a kernel that only stores to it.

Rewrite:
SK015: allocate a kernel's output with ``empty`` when the kernel overwrites it.

DESCRIPTION: a host wrapper that allocates ``out = torch.zeros_like(v)`` (``torch.zeros``,
``x.new_zeros``) and passes ``out`` to a ``@triton.jit`` kernel that only stores to it (no load,
no atomic, so no element is read before it is written) launches a separate fill kernel before
the real one on every call: in a decode step of ~37 us that is a few per cent. The rewrite
allocates with ``torch.empty_like`` / ``torch.empty`` / ``new_empty`` instead. The allocation
must not be read on the host before the launch, and exactly one launch may take it.

Unsafe: it assumes the kernel's stores cover every element (true for decode kernels whose grid
and token loop cover the output; not checkable in general). The gate runs the candidate with its
allocations poisoned (NaN), so an element left unwritten at a validated shape fails numerics.
"""
from __future__ import annotations

import re

import libcst as cst

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.helper_params import accesses_through
from skel.miner.detectors.helpers import indirect_launch, root_param
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "unsafe"


# ---------------------------------------------------------------- conditions

# ``name = torch.KIND(`` or ``name = x.new_KIND(``: one pattern for every name (a pattern per name,
# compiled per launch argument, was a twelfth of fla-core's mining time)
_ALLOC = re.compile(r"^\s*([A-Za-z_]\w*)\s*=\s*(?:torch\.(\w+)|\w+\.new_(\w+))\s*\(")
_META = r"\.(?:shape|dtype|device|stride|numel|dim|ndim|size|is_contiguous|element_size)\b|\s+is\b"


def _alloc_line(ctx: Ctx, name: str, before: int, kinds: str, new: str) -> int | None:
    allowed = set(kinds.split("|"))
    # the nearest allocation above the launch, no further up than the enclosing module-level def
    for ln in ctx.file.assignment_lines(name, ctx.file.top_def_before(before), before):
        m = _ALLOC.match(ctx._lines[ln - 1])
        if m and m.group(1) == name and (m.group(2) in allowed or m.group(3) == new):
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


def _store_only(ctx: Ctx, param: str, helpers: bool = False) -> str | None:
    """Why the kernel's use of ``param`` needs the zeros (None when it only stores through it). With
    ``helpers``, what the kernel's jit helpers do through a pointer into ``param`` counts too: for
    instances only, since the rewrite does not check helpers (an opportunity is what it can apply)."""
    stored = False
    for m in ctx.p.memops:
        through = root_param(ctx, m.pointer, m.line) == param or re.search(rf"\b{re.escape(param)}\b", m.pointer)
        if not through:
            continue
        if m.kind == "store":
            stored = True
        else:  # any operand, not only the leftmost: ``tl.load(offs + o)`` reads o too
            return f"line {m.line}: {m.kind} through {param}"
    for kind, line in accesses_through(ctx, param) if helpers else ():  # a jit helper handed a pointer into it
        if kind != "store":
            return f"line {line}: {kind} through {param} in a helper"
        stored = True
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


def launched_directly(ctx: Ctx) -> Check:
    rows = _zero_sites(ctx)
    if not rows:
        return no("no zero-filled buffer")
    why = indirect_launch(ctx, [ln for _a, ln, _n, _p in rows])
    return no(why) if why else yes("the buffer reaches a direct launch in its host function")


CONDITIONS = {
    "host-zero-fills-output": host_zero_fills_output,
    "kernel-only-stores-output": kernel_only_stores_output,
    "not-read-before-launch": not_read_before_launch,
    "stores-look-complete": stores_look_complete,
    "launched-directly": launched_directly,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(a, a, buffer=n, parameter=p, launch_line=ln) for a, ln, n, p in _zero_sites(ctx)
            if _store_only(ctx, p) is None and _early_read(ctx, n, a, ln) is None and _incomplete(ctx, p) is None
            and indirect_launch(ctx, [ln]) is None]


def instances(ctx: Ctx) -> list[Hit]:
    return [Hit.at(a, a, buffer=n, parameter=p, launch_line=ln) for a, ln, n, p in _sites(ctx, "empty_like|empty", "empty")
            if _store_only(ctx, p, helpers=True) is None]


# ---------------------------------------------------------------- rewrite

ZEROS = {"zeros_like": "empty_like", "zeros": "empty", "new_zeros": "new_empty"}


def _zeros_call(node: cst.BaseExpression) -> cst.Call | None:
    if isinstance(node, cst.Call) and C.last_part(C.call_name(node)) in ZEROS:
        name = C.call_name(node) or ""
        if name.startswith("torch.") or C.last_part(name) == "new_zeros":
            return node
    return None


def _param_for(call: cst.Call, kernel: cst.FunctionDef, arg: cst.Arg) -> str | None:
    if arg.keyword is not None:
        return arg.keyword.value
    names = [p.name.value for p in C.params(kernel)]
    pos = [a for a in call.args if a.keyword is None and a.star == ""].index(arg)
    return names[pos] if pos < len(names) else None


class _Allocs(cst.CSTVisitor):
    """``X = torch.zeros...(...)`` statements of one host function (not of functions nested in it)."""

    def __init__(self, host: cst.FunctionDef) -> None:
        self.host = host
        self.allocs: dict[str, list[cst.Assign]] = {}
        self.empty: set[str] = set()  # names allocated with empty (what this rewrite leaves)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return node is self.host

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name):
            if _zeros_call(node.value):
                self.allocs.setdefault(node.targets[0].target.value, []).append(node)
            elif isinstance(node.value, cst.Call) and C.last_part(C.call_name(node.value)) in ZEROS.values():
                self.empty.add(node.targets[0].target.value)


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    opened = C.open_kernels(CODE, SAFETY, source, options)
    if isinstance(opened, list):
        return opened
    src, ks = opened
    helpers = {k.name.value: k for k in C.kernels(src.module)}  # every @triton.jit function, helpers included
    edits: dict = {}
    changes: list[Change] = []
    reasons: list[str] = []
    by_host: dict = {}
    for call, kernel, host in C.launches(src.module, {k.name.value: k for k in ks}):
        by_host.setdefault(host, []).append((call, kernel))
    done: list[str] = []
    for host, calls in by_host.items():
        v = _Allocs(host)
        host.visit(v)
        done += [f"{host.name.value}: {a.value.value}" for call, _k in calls for a in call.args
                 if isinstance(a.value, cst.Name) and a.value.value in v.empty]
        for name, allocs in v.allocs.items():
            uses = [(call, kernel, arg) for call, kernel in calls for arg in call.args if name in C.names_in(arg.value)]
            if not uses:
                continue
            why, alloc = _refusal(name, allocs, uses, host, src, helpers)
            if why:
                reasons.append(f"{host.name.value}: {name}: {why}")
                continue
            call, kernel, arg = uses[0]
            z = _zeros_call(alloc.value)
            new = ZEROS[C.last_part(C.call_name(z))]
            edits[z.func] = lambda u, new=new: (u.with_changes(attr=cst.Name(new)) if isinstance(u, cst.Attribute)
                                               else cst.Name(new))
            changes.append(Change(src.line(alloc), f"{host.name.value}: {name} = ...{new}(...): "
                                  f"{kernel.name.value} only stores to {_param_for(call, kernel, arg)}"))
    if not edits:
        if reasons:
            return C.skip(CODE, SAFETY, source, "not applicable: " + "; ".join(reasons))
        if done:
            return C.skip(CODE, SAFETY, source, "already applied: the launched outputs are allocated with empty ("
                          + ", ".join(done) + ")")
        return C.skip(CODE, SAFETY, source, "not applicable: no zero-filled allocation is passed to a kernel launch")
    new = C.apply_edits(src.module, edits).code
    return [C.applied_result(CODE, source, new, changes, f"{len(changes)} zero fill(s) dropped", SAFETY)]


_LOADS = {"load", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg", "atomic_cas", "atomic_and", "atomic_or",
          "atomic_xor"}


def _through(kernel: cst.FunctionDef, param: str, kinds: set[str], deps: dict) -> list[cst.Call]:
    """Memory calls of ``kinds`` whose pointer argument depends on ``param`` (by any operand, block
    pointers included), following the kernel's assignments (``deps``: ``F.dependencies(kernel)``)."""
    return [c for c in C.calls_in(kernel) if C.last_part(C.call_name(c)) in kinds and c.args
            and F.depends_on(C.names_in(c.args[0].value), {param}, deps)]


def _refusal(name, allocs, uses, host, src, helpers) -> tuple[str | None, cst.Assign | None]:
    """(why the zero fill must stay, None) or (None, the allocation that reaches the launch)."""
    if len(uses) > 1:
        return f"passed {len(uses)} times to kernel launches", None
    call, kernel, arg = uses[0]
    if arg.star or not isinstance(arg.value, cst.Name):
        return f"passed as `{C.code_of(arg).strip()}`, not as one argument", None
    if not any(isinstance(st, cst.SimpleStatementLine) and call in C.calls_in(st) for st in host.body.body):
        return "launched under a condition or in a loop, so a path may return it unwritten", None
    param = _param_for(call, kernel, arg)
    if param is None:
        return "its kernel parameter could not be matched", None
    deps = F.dependencies(kernel)
    reads = _through(kernel, param, _LOADS, deps)
    if reads:
        return (f"{kernel.name.value} reads or accumulates into {param} "
                f"(`{C.code_of(reads[0]).strip()[:60]}`), so its zeros matter"), None
    for c in C.calls_in(kernel):
        callee = C.last_part(C.call_name(c))
        if callee in helpers and helpers[callee] is not kernel and any(
                F.depends_on(C.names_in(a.value), {param}, deps) for a in c.args):
            return f"{kernel.name.value} passes {param} to the helper {callee}, which is not checked", None
    if _reset_to_zero(kernel, param):
        return f"{kernel.name.value}'s autotune resets {param} to zero between trials: its zeros are relied on", None
    early = _early_return(kernel)
    if early:
        return f"{kernel.name.value} returns early under a runtime condition ({early}): programs may write nothing", None
    stores = _through(kernel, param, {"store"}, deps)
    if not stores:
        return f"{kernel.name.value} never stores to {param}", None
    partial = _partial_store(kernel, stores, deps)
    if partial:
        return f"{kernel.name.value} may write only part of {param}: {partial}", None
    launch_line = src.line(call)
    before = [a for a in allocs if src.line(a) < launch_line]
    if not before:
        return "allocated after the launch", None
    alloc = max(before, key=src.line)  # the allocation that reaches the launch
    early = [ln for ln in _read_lines(host, name, src) if src.line(alloc) < ln < launch_line]
    if early:
        return f"read on line {early[0]} between its allocation and the launch (the host may rely on the zeros)", None
    return None, alloc


def _reset_to_zero(kernel: cst.FunctionDef, param: str) -> bool:
    for dec in kernel.decorators:
        if isinstance(dec.decorator, cst.Call) and C.last_part(C.call_name(dec.decorator)) == "autotune":
            arg = C.kwarg(dec.decorator, "reset_to_zero")
            if arg is not None and f"'{param}'" in C.code_of(arg.value).replace('"', "'"):
                return True
    return False


def _early_return(kernel: cst.FunctionDef) -> str | None:
    """The runtime condition of a ``return`` in the kernel, unless it only says a loop has no work
    (``if T == 0: return`` with T bounding a loop: nothing to write then)."""
    bounds = {n for loop in F.fors(kernel) if isinstance(loop.iter, cst.Call) for a in loop.iter.args
              for n in C.names_in(a.value)}
    consts = C.constexpr_params(kernel)
    for small, _line, chain, _loops in F.walk(kernel.body.body):
        if not isinstance(small, cst.Return):
            continue
        for test in F.runtime_tests(chain, consts):
            empty = [m for m in re.finditer(r"\b([A-Za-z_]\w*)\s*(?:==|<=)\s*0\b", test) if m.group(1) in bounds]
            if not empty:
                return test
    return None


def _partial_store(kernel: cst.FunctionDef, stores: list[cst.Call], deps: dict) -> str | None:
    """Why a store may leave elements to the zeros: a block pointer (its coverage is not checked), a
    runtime condition around it, or a mask that reads loaded data or compares two index ranges
    (arange or program-id values on both sides: a triangle, a shift) instead of an index with a bound."""
    defs = F.assignments(kernel)
    consts = C.constexpr_params(kernel)
    loaded = {n for n, values in defs.items() if any(C.is_load(c) for v in values for c in C.calls_in(v))}
    ranged = {n for n, values in defs.items() if any(C.last_part(C.call_name(c)) in ("arange", "program_id")
                                                      for v in values for c in C.calls_in(v))}  # index-valued names
    for small, _line, chain, _loops in F.walk(kernel.body.body):
        for call in C.calls_in(small):
            if call not in stores:
                continue
            text = C.code_of(call).strip()[:70]
            if "make_block_ptr" in text or any(C.last_part(C.call_name(c)) == "make_block_ptr"
                                               for n in C.names_in(call.args[0].value)
                                               for v in defs.get(n, ()) for c in C.calls_in(v)):
                return f"`{text}` stores through a block pointer (coverage not checked)"
            runtime = F.runtime_tests(chain, consts)
            if runtime:
                return f"`{text}` runs under a runtime condition ({runtime[0]})"
            mask = C.kwarg(call, "mask") or (call.args[2] if len(call.args) > 2 and call.args[2].keyword is None else None)
            if mask is None:
                continue
            if F.depends_on(C.names_in(mask.value), loaded, deps) or any(C.is_load(c) for c in C.calls_in(mask.value)):
                return f"`{text}` is masked by loaded data"
            for cmp in _comparisons(mask.value, defs):
                sides = [cmp.left, *(c.comparator for c in cmp.comparisons)]
                if all(F.depends_on(C.names_in(x), ranged, deps) for x in sides):
                    return f"`{text}` is masked by `{C.code_of(cmp)}`, two index ranges compared"
    return None


def _comparisons(expr: cst.BaseExpression, defs: dict, depth: int = 0) -> list[cst.Comparison]:
    """The comparisons a mask is built from, following names to their assignments."""
    found: list[cst.Comparison] = []

    class V(cst.CSTVisitor):
        def visit_Comparison(self, n: cst.Comparison) -> None:
            found.append(n)

        def visit_Name(self, n: cst.Name) -> None:
            if depth < 4:
                for v in defs.get(n.value, ()):
                    found.extend(_comparisons(v, defs, depth + 1))

    expr.visit(V())
    return found


METADATA = {"shape", "dtype", "device", "stride", "numel", "dim", "ndim", "size", "is_contiguous", "element_size"}


def _read_lines(host: cst.FunctionDef, name: str, src) -> list[int]:
    """Lines where the values of ``name`` are read in ``host``: not assignment targets, not metadata
    (``out.shape``), not identity tests (``out is None``)."""
    out: list[int] = []

    class V(cst.CSTVisitor):
        def visit_Assign(self, node: cst.Assign) -> bool:
            node.value.visit(self)
            return False

        def visit_Attribute(self, node: cst.Attribute) -> bool:
            if isinstance(node.value, cst.Name) and node.value.value == name and node.attr.value in METADATA:
                return False
            return True

        def visit_Comparison(self, node: cst.Comparison) -> bool:
            identity = all(isinstance(c.operator, (cst.Is, cst.IsNot)) for c in node.comparisons)
            return not (identity and isinstance(node.left, cst.Name) and node.left.value == name)

        def visit_Name(self, node: cst.Name) -> None:
            if node.value == name:
                out.append(src.line(node))

    host.visit(V())
    return sorted(out)


class EmptyOutput(Rule):
    """Allocate a kernel's output with empty, not zeros, when the kernel overwrites every element."""

    SAFETY = SAFETY
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
