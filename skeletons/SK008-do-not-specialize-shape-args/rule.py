"""SK008-do-not-specialize-shape-args: stop recompiling when a per-call size changes.

Conditions (detector):
Triton specializes plain integer arguments (== 1, divisible by 16), so a sequence length or
batch size that changes between calls (T = 1 in decode, T = 7 in speculative decode, N from
the batch) makes a new compilation. Opportunity: the kernel takes such a size as a plain
(non-constexpr) integer and does not list it in ``do_not_specialize``. Instance:
``@triton.jit(do_not_specialize=[...])`` naming one. Head counts and head dims (H, K, V)
are fixed per model and are not candidates, nor are sizes the code shows to be a weight's
(``_weight_sizes``: a packing kernel that touches weights only, a docstring, a launch that passes
the size from a weight's shape).

Rewrite:
SK008: ``do_not_specialize`` for runtime shape arguments of a ``@triton.jit`` kernel.

DESCRIPTION: Triton specializes integer arguments on their value being 1 and on divisibility
by 16, so a kernel called with a new sequence length ``T`` or batch ``N`` may compile again
(a JIT stall in decode). The rewrite lists, in ``@triton.jit(do_not_specialize=[...])``, the
non-constexpr parameters the conditions select: plain integers named as per-call sizes (T, N,
seq_len, batch...) that the kernel uses as numbers (not pointers it loads through), except where
the value multiplies an address without a constexpr factor (its divisibility lets Triton
vectorise). Names already listed are kept; nothing else changes.

Safe: specialization affects compilation, never values.
"""
from __future__ import annotations

import re

import libcst as cst

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.helpers import terms as _terms, decorator_line
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "safe"


# ---------------------------------------------------------------- conditions

LANGUAGES = ("triton",)
VARYING = re.compile(
    r"^(T|N|B|L|NT|S|seq_?len\w*|seqlen\w*|max_seq\w*|num_tokens|n_tokens|total_tokens|num_seqs|n_seqs|batch\w*|"
    r"n_rows|num_rows|M|n_ctx|N_CTX|ctx_len|kv_len|q_len|token_num|num_reqs|"
    r"n_elements|num_elements|numel|n_elem|NUM_TOKENS|N_TOKENS|TOTAL_TOKENS)$"
)
SCALAR_ANN = re.compile(r"^(tl\.)?(int32|int64|uint32|uint64|int)$")


def _named_sizes(ctx: Ctx):
    """Plain integer parameters that name a per-call size and that the kernel uses as a number:
    a parameter it reads memory through (``tl.load(seq_lens + i)``, a bias pointer ``B``) is a
    pointer whatever its name, and pointers are not specialised on their value."""
    out = []
    pointers = _pointer_params(ctx)
    for p in ctx.p.params:
        if p.constexpr or not VARYING.match(p.name) or p.name in pointers:
            continue
        if p.annotation and not SCALAR_ANN.match(p.annotation.strip()):
            continue
        out.append(p)
    return out


def _varying(ctx: Ctx):
    """The named per-call sizes less those the code shows to be a weight's dimensions."""
    weights = _weight_sizes(ctx)
    return [p for p in _named_sizes(ctx) if p.name not in weights]


# A weight tensor's name: W, W_q, W1, w13, weight, qweight, w_packed... (a trailing _ptr / ptr
# dropped). A lone lowercase ``w`` is not one (the WY factor of delta-rule kernels, a window), nor
# is a gradient (dW).
_WEIGHT = re.compile(r"^(?:W(?:_|\d|$)|w\d|q?weights?(?:_|\d|$)|\w*_weights?(?:_|$))")
_SHAPE_OF = re.compile(r"\b([A-Za-z_]\w*)\s*\.\s*(?:shape\b|size\s*\(|numel\s*\()")


def _weightish(name: str) -> bool:
    return bool(_WEIGHT.match(re.sub(r"_?ptr$", "", name, flags=re.I)))


def _weight_sizes(ctx: Ctx) -> dict[str, str]:
    """Size parameters the code shows to be a weight's dimensions (fixed per model, so Triton
    compiles once per weight shape, not once per call), each with the evidence:

    - the kernel's docstring describes the parameter as a weight's size
      (``M (int): Number of rows in the weight matrix.``);
    - every tensor the kernel reads or writes is a weight (a packing or quantisation kernel:
      ``W_q_ptr`` in, ``W_q_out_ptr`` out), so all its sizes are the weight's;
    - a launch in the file passes a size unpacked from a weight's shape
      (``num_rows, num_cols = W_q.shape``, ``K = weight.size(1)``)."""
    cache = ctx.cache.setdefault(CODE, {})
    if "weights" in cache:
        return cache["weights"]
    sizes = {p.name for p in _named_sizes(ctx)}
    out: dict[str, str] = {}
    if sizes:
        for name, line in _docstring(ctx):
            if name in sizes and re.search(r"\bweights?\b", line, re.I):
                out[name] = f"the docstring says so ({line.strip()[:80]})"
        # (cheap test first: a kernel with no weight-named parameter has no weight-only tensors)
        pointers = _tensor_params(ctx) if any(_weightish(p.name) for p in ctx.p.params) else []
        if pointers and all(_weightish(n) for n in pointers):
            for name in sizes - out.keys():
                out[name] = f"every tensor the kernel touches is a weight ({', '.join(pointers)})"
        launched = _launch_shapes(ctx)
        for name, tensors, line in launched:
            # a weight's size at every launch that passes it from a shape
            if name in sizes and name not in out and all(
                    all(_weightish(t) for t in ts.split(", ")) for n, ts, _ in launched if n == name):
                out[name] = f"the launch at line {line} passes it from {tensors}'s shape"
    cache["weights"] = out
    return out


def _tensor_params(ctx: Ctx) -> list[str]:
    """Parameters an address the kernel loads or stores through is built from, other than those
    it uses as sizes or strides (``X_cur = pid * stride + X`` makes ``X`` one; ``stride`` is not)."""
    params = {p.name for p in ctx.p.params if not p.constexpr}
    names: set[str] = set()
    for mo in ctx.p.memops:
        names |= set(re.findall(r"[A-Za-z_]\w*", mo.pointer))
        for a in ctx.closure(mo.pointer, mo.line, through_loads=False):
            names |= set(re.findall(r"[A-Za-z_]\w*", a.rhs))
    return sorted(n for n in names & params if not _used_as_size(ctx, n))


def _docstring(ctx: Ctx) -> list[tuple[str, str]]:
    """(first word, line) for each line of the kernel's docstring."""
    ln = ctx.p.line
    while ln <= ctx.p.end_line and not ctx.text(ln).endswith(":"):
        ln += 1  # the end of the signature
    first = ctx.text(ln + 1)
    quote = next((q for q in ('"""', "'''") if first.lstrip("rRuU").startswith(q)), None)
    if quote is None:
        return []
    rows, i = [], ln + 1
    while i <= ctx.p.end_line:
        t = ctx.text(i).lstrip("rRuU") if i == ln + 1 else ctx.text(i)
        body = t[3:] if i == ln + 1 else t
        m = re.match(r"[`*]*([A-Za-z_]\w*)", body.strip())
        if m:
            rows.append((m.group(1), body))
        if quote in body:
            break
        i += 1
    return rows


def _launch_shapes(ctx: Ctx) -> list[tuple[str, str, int]]:
    """(parameter, tensors, line) where a launch of the kernel passes a size read from tensors'
    shapes: directly (``W.shape[0]``) or through names the launching function assigns from them
    (``num_rows, num_cols = W_q.shape``; ``rows = num_input_rows // pack`` two steps back). All
    the tensors a size is computed from are named (``M = X.numel() // K`` with ``K`` from the
    weight is the activation's as well as the weight's)."""
    out = []
    for site in ctx.p.launches:
        fn = ctx.file.enclosing_def(site.line)
        if fn is None:
            continue
        binds = _bindings(ctx, fn, site.line)
        for param, arg in site.args:
            if tensors := _shape_sources(arg, binds, 3):
                out.append((param, ", ".join(sorted(tensors)), site.line))
    return out


def _bindings(ctx: Ctx, first: int, last: int) -> dict[str, tuple[str, int]]:
    """Name -> (right-hand side, line) of the simple assignments between two lines of host code
    (the last one wins; tuple targets each get the whole right-hand side)."""
    out = {}
    for ln in range(first + 1, last):
        m = re.match(r"\s*([A-Za-z_][\w\s,()*]*?)\s*=(?!=)\s*(.+)$", ctx.file.lines[ln - 1])
        if m:
            for name in re.findall(r"[A-Za-z_]\w*", m.group(1)):
                out[name] = (m.group(2), ln)
    return out


def _shape_sources(expr: str, binds: dict, depth: int) -> set[str]:
    """The tensors whose ``.shape`` / ``.size()`` / ``.numel()`` ``expr`` reads, following ``binds``."""
    out = set(_SHAPE_OF.findall(expr))
    if depth:
        for name in set(re.findall(r"\b[A-Za-z_]\w*\b", _SHAPE_OF.sub("", expr))):
            if name in binds:
                rhs, _ = binds[name]
                out |= _shape_sources(rhs, {k: v for k, v in binds.items() if k != name}, depth - 1)
    return out


_HEAD = re.compile(r"\s*\(?\s*([A-Za-z_]\w*)")


def _pointer_params(ctx: Ctx) -> set[str]:
    """Parameters the kernel dereferences: the base of a load/store address, directly or through
    pointer variables built from them (``p_x = x + off``, ``x += row * stride``)."""
    cache = ctx.cache.setdefault(CODE, {})
    if "pointers" in cache:
        return cache["pointers"]
    heads = {m.group(1) for mo in ctx.p.memops if (m := _HEAD.match(mo.pointer))}
    changed = True
    while changed:  # follow pointer variables back to the parameter they start from
        changed = False
        for a in ctx.assigns:
            if set(a.targets) & heads and (m := _HEAD.match(a.rhs)) and m.group(1) not in heads:
                heads.add(m.group(1))
                changed = True
    cache["pointers"] = out = {p.name for p in ctx.p.params} & heads
    return out


def _jit_line(ctx: Ctx) -> int:

    return decorator_line(ctx, "triton.jit") or ctx.p.line


def _specialized(ctx: Ctx):
    listed = set(ctx.p.tune.do_not_specialize)
    return [p for p in _varying(ctx) if p.name not in listed]


def _address_uses(ctx: Ctx, name: str) -> list:
    """Assignments that build a pointer (a loaded/stored pointer variable or a pointer parameter
    plus offsets) from ``name``."""
    pointer_vars = {re.match(r"\s*\(?\s*(\w+)", m.pointer).group(1) for m in ctx.p.memops if re.match(r"\s*\(?\s*\w+", m.pointer)}
    pat = re.compile(rf"\b{re.escape(name)}\b")
    return [a for a in ctx.assigns if pat.search(a.rhs) and set(a.targets) & pointer_vars]


def _critical(ctx: Ctx, name: str) -> str | None:
    """An address term where ``name`` multiplies an index with no constexpr factor in the same
    product: then its divisibility by 16 is what proves the loads aligned."""

    consts = {p.name for p in ctx.p.params if p.constexpr}
    pat = re.compile(rf"\b{re.escape(name)}\b")
    for a in _address_uses(ctx, name):
        for term in _terms(a.rhs, "+-"):
            if pat.search(term) and "*" in term and not (set(re.findall(r"[A-Za-z_]\w*", term)) & consts):
                return f"line {a.line}: {', '.join(a.targets)} = {a.rhs}"
    return None


def has_runtime_shape_arg(ctx: Ctx) -> Check:
    rows = _varying(ctx)
    if not rows:
        weights = _weight_sizes(ctx)
        if weights:
            return no("; ".join(f"{n} is a weight's size: {why}" for n, why in weights.items())
                      + ": fixed per model, so it compiles once per weight shape, not per call")
        return no("no plain integer parameter names a per-call size (T, N, seq_len, ...); all are constexpr or absent")
    return yes(", ".join(f"{p.name}{': ' + p.annotation if p.annotation else ''}" for p in rows) + " vary between calls")


def shape_arg_specialized(ctx: Ctx) -> Check:
    rows = _specialized(ctx)
    if not rows:
        return no("every per-call size is already in do_not_specialize" if _varying(ctx) else "no per-call size parameter")
    listed = sorted(ctx.p.tune.do_not_specialize)
    return yes(f"{', '.join(p.name for p in rows)} specialised on every value class (do_not_specialize: {listed or 'none'})")


def shape_arg_not_divisibility_critical(ctx: Ctx) -> Check:
    rows = [(p.name, _critical(ctx, p.name)) for p in _specialized(ctx)]
    good = [n for n, c in rows if not c]
    if not good:
        if rows:
            return no(f"{rows[0][0]} is a stride in an address ({rows[0][1]}); its divisibility by 16 helps vectorise the loads")
        return no("no specialised per-call size")
    return yes(f"{', '.join(good)} only bound loops or offset rows scaled by a constexpr")


CONDITIONS = {
    "has-runtime-shape-arg": has_runtime_shape_arg,
    "shape-arg-specialized": shape_arg_specialized,
    "shape-arg-not-divisibility-critical": shape_arg_not_divisibility_critical,
}


def candidates(ctx: Ctx) -> list[Hit]:
    listed = sorted(ctx.p.tune.do_not_specialize)
    rows = [p.name for p in _specialized(ctx) if not _critical(ctx, p.name)]
    return [Hit.at(ln, ln, param=name, listed=listed) for name in rows for ln in [_param_line(ctx, name)]]


def _param_line(ctx: Ctx, name: str) -> int:
    """The signature line that declares ``name`` (the def line for one-line signatures)."""
    pat = re.compile(rf"(?:^|[(,])\s*{re.escape(name)}\s*[:,)=]")
    for ln in range(ctx.p.line, min(ctx.p.end_line, ctx.p.line + 200) + 1):
        t = ctx.text(ln)
        if pat.search(t):
            return ln
        if t.endswith(":") and ln > ctx.p.line and not t.startswith("def"):
            break
    return ctx.p.line


def _used_as_size(ctx: Ctx, name: str) -> bool:
    """``name`` bounds something (``offs < name``, ``range(0, name)``), divides an index (``i // name``,
    ``i % name``) or multiplies one (a stride or a row length) somewhere in the kernel's body: the
    roles of a size. Bit operations and calls (``seed & 0xFFFFFFFF``, ``tl.philox(seed, ...)``) are not."""
    n = re.escape(name)
    role = re.compile(rf"(?<![<>])[<>]=?\s*\(?\s*\b{n}\b|\b{n}\b\s*[<>]=?(?![<>])|(?://|%|\*)\s*\(?\s*\b{n}\b|"
                      rf"\b{n}\b\s*[*/%]|range\([^)]*\b{n}\b")
    body = (ctx.text(ln) for ln in range(ctx.p.line + 1, ctx.p.end_line + 1))
    return any(role.search(t) for t in body if not t.lstrip().startswith("#"))


def instances(ctx: Ctx) -> list[Hit]:
    """``do_not_specialize`` naming an argument the kernel uses as a size (a bound, an index divisor, a
    stride). A list of other arguments only (a random seed and offset fed to ``tl.philox``) leaves every
    size specialised: that is no instance of this skeleton."""
    names = list(ctx.p.tune.do_not_specialize)
    positions = [p.name for p in ctx.p.params]
    listed = {positions[n] if isinstance(n, int) and 0 <= n < len(positions) else n for n in names}
    sizes = {p.name for p in _varying(ctx)}  # named as a per-call size (T in a block pointer's shape)
    if not listed & sizes and not any(_used_as_size(ctx, n) for n in listed if isinstance(n, str)):
        return []
    line = _jit_line(ctx)
    return [Hit.at(line, line, do_not_specialize=names)]


# ---------------------------------------------------------------- rewrite

def _chosen_by_conditions(source: str) -> dict[str, list[str]]:
    """Kernel name -> the parameters its conditions select (``candidates``), in signature order;
    for kernels whose parameters are all listed already, the listed shape parameters (so the
    rewrite can say it is applied)."""
    from skel.miner.triton_frontend import profile_source

    out: dict[str, list[str]] = {}
    try:
        profiles = profile_source(source, "<rewrite>")
    except SyntaxError:
        return out
    for prof in profiles:
        ctx = Ctx(prof, source)
        names = {dict(h.params)["param"] for h in candidates(ctx)}
        names |= {p.name for p in _varying(ctx) if p.name in prof.tune.do_not_specialize}
        out[prof.name] = [p.name for p in prof.params if p.name in names]
    return out


def _listed(dec: cst.Decorator) -> tuple[list[str], cst.Arg | None]:
    if not isinstance(dec.decorator, cst.Call):
        return [], None
    arg = C.kwarg(dec.decorator, "do_not_specialize")
    if arg is None or not isinstance(arg.value, (cst.List, cst.Tuple)):
        return [], arg
    names = []
    for el in arg.value.elements:
        if isinstance(el.value, cst.SimpleString):
            names.append(el.value.evaluated_value)
        elif isinstance(el.value, cst.Integer):
            names.append(int(el.value.value))
    return names, arg


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    ks = C.kernels(src.module, options)
    edits: dict = {}
    changes: list[Change] = []
    done: list[str] = []
    chosen = _chosen_by_conditions(source)
    for kernel in ks:
        dec = C.jit_decorator(kernel)
        # the parameters the conditions chose (applicability is decided once, by the conditions),
        # plus those already listed, so that "already applied" is recognised
        wanted = chosen.get(kernel.name.value, [])
        if not wanted:
            continue
        listed, arg = _listed(dec)
        positions = [p.name.value for p in C.params(kernel)]
        have = {positions[n] if isinstance(n, int) and n < len(positions) else n for n in listed}
        if arg is not None and not isinstance(arg.value, (cst.List, cst.Tuple)):
            done.append(f"{kernel.name.value}: do_not_specialize is computed ({C.code_of(arg.value)}), left as is")
            continue
        missing = [n for n in wanted if n not in have]
        if not missing:
            done.append(f"{kernel.name.value} already lists {', '.join(wanted)}")
            continue
        edits[dec] = _edit(missing)
        changes.append(Change(src.line(dec), f"{kernel.name.value}: do_not_specialize += {missing}"))
    if not edits:
        if done:
            return C.skip(CODE, SAFETY, source, "already applied: " + "; ".join(done))
        return C.skip(CODE, SAFETY, source, "not applicable: no @triton.jit kernel with a runtime shape argument "
                       "that the conditions select (a plain integer named like T, N, seq_len, used as a "
                       "number, not a stride in an address)")
    new = C.apply_edits(src.module, edits).code
    return [C.applied_result(CODE, source, new, changes, f"do_not_specialize for {len(edits)} kernel(s)", SAFETY)]


def _edit(missing: list[str]):
    def edit(upd: cst.Decorator) -> cst.Decorator:
        new_items = [cst.Element(cst.SimpleString(f'"{n}"')) for n in missing]
        if isinstance(upd.decorator, cst.Call):
            arg = C.kwarg(upd.decorator, "do_not_specialize")
            if arg is not None:
                lst = arg.value
                new_arg = arg.with_changes(value=lst.with_changes(elements=[*lst.elements, *new_items]))
                return upd.with_changes(decorator=upd.decorator.with_changes(
                    args=[new_arg if a is arg else a for a in upd.decorator.args]))
            call = upd.decorator
        else:
            call = cst.Call(func=upd.decorator, args=[])
        kw = cst.Arg(cst.List(new_items), keyword=cst.Name("do_not_specialize"),
                     equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        return upd.with_changes(decorator=call.with_changes(args=[*call.args, kw]))

    return edit


class DoNotSpecializeShapeArgs(Rule):
    """Keep tile sizes constexpr but exclude runtime shape arguments from specialisation."""

    SAFETY = SAFETY
    LANGUAGES = LANGUAGES
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
