"""Infer a harness for a Triton kernel file from its code: which launcher to call, the shape of every
tensor argument, sizes for the interpreter and for a decode sweep, values that keep the kernel in its
numerical regime, and which results to compare. Static: the file is parsed, never imported.

Shapes come from the launcher (unpacked ``.shape``, asserts, allocations) and, for tensors the
launcher never unpacks, from the kernel's address arithmetic (``layout``): a tensor indexed exactly
like one of known shape has that shape; otherwise its dims are read off its strides, innermost
first (a masked offset ``o < K`` spans ``K``; a stride ``H*K`` over a stride ``K`` spans ``H``),
and its outermost dim off a tensor of known shape indexed by the same program id.
"""
from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from skel.harness.kernel_facts import KernelFacts, kernel_facts
from skel.harness.launchers import jit_functions, launcher_functions
from skel.harness.launcher_facts import PRESENT, UNKNOWN, LauncherFacts, module_values, read_launcher
from skel.harness.poly import Poly

# Decode-sweep sizes by a dim's role (model-like: 32 heads of 128, hidden 4096), batch swept.
BATCH_SWEEP = (1, 8, 32, 64, 256)
_DECODE = {"tokens": 1, "heads": 32, "head_dim": 128, "hidden": 4096, "pool": 0, "other": 16, "flat": 4096}
_CI = {"batch": (2, 1), "tokens": (1, 3), "heads": (2, 2), "head_dim": (32, 24), "hidden": (64, 80),
       "other": (4, 3), "pool": (0, 0), "flat": (256, 1000)}
_POW2_CI = {"head_dim": (32, 16), "hidden": (64, 32), "other": (4, 2), "flat": (256, 1024)}


POOL = "POOL"  # the leading dim of a state pool indexed by slot indices


class HarnessError(Exception):
    """No harness can be inferred; the message says what and where."""


@dataclass(frozen=True)
class TensorArg:
    name: str
    dims: tuple[str, ...]
    dtype: str  # "work" (the spec's dtype), "float32", "int32", "int64"
    values: str  # "normal", "log-decay", "positive", "slots", "slots-padded"
    why: str


@dataclass(frozen=True)
class ValueArg:
    name: str
    code: str  # Python expression in the spec (may use dims)
    why: str


@dataclass(frozen=True)
class Dim:
    name: str
    role: str
    ci: tuple[int, int]
    decode: int
    pow2: bool


@dataclass(frozen=True)
class Harness:
    path: Path
    entry: str
    kernel: str
    line: int
    arguments: tuple[str, ...]  # the launcher's parameters this harness passes, in order
    tensors: tuple[TensorArg, ...]
    values: tuple[ValueArg, ...]
    dims: tuple[Dim, ...]
    outputs: tuple[str, ...]
    inplace: tuple[str, ...]
    notes: tuple[str, ...]
    others: tuple[str, ...] = ()  # other launchers of the file
    written: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)  # output -> (dims, dtype)
    dispatch: tuple[tuple[str, str], ...] = ()  # dim -> expression over the launcher's arguments
    slots: tuple[str, ...] = ()  # dims of the slot-index tensor: a POOL holds twice as many entries

    def to_json(self) -> dict:
        return {"path": str(self.path), "entry": self.entry, "kernel": self.kernel,
                "tensors": {t.name: {"dims": list(t.dims), "dtype": t.dtype, "values": t.values, "why": t.why}
                            for t in self.tensors},
                "values": {v.name: {"code": v.code, "why": v.why} for v in self.values},
                "dims": {d.name: {"role": d.role, "ci": list(d.ci), "decode": d.decode, "pow2": d.pow2}
                         for d in self.dims},
                "outputs": list(self.outputs), "inplace": list(self.inplace), "notes": list(self.notes),
                "other_launchers": list(self.others)}


@dataclass
class _State:
    lf: LauncherFacts
    kf: KernelFacts
    binding: dict[str, str]  # kernel param -> launcher name/expression
    shapes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _rank(name: str) -> tuple[int, str]:
    low = name.lower()
    backward = any(w in low for w in ("bwd", "backward", "grad"))
    return (1 if backward else 0, name)


def infer(path: Path, source: str, entry: str | None = None, variants: tuple[str, ...] = (),
          dims: dict[str, int] | None = None) -> Harness:
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise HarnessError(f"{path}:{exc.lineno}: does not parse: {exc.msg}") from None
    kernels, found = jit_functions(tree), launcher_functions(tree)
    if not kernels:
        raise HarnessError(f"{path}: no @triton.jit kernel in this file: judge the file that defines the kernels it"
                           " calls (skel harness THAT_FILE), or record real calls of this one with skel capture")
    if not found:
        raise HarnessError(f"{path}: its kernels ({', '.join(kernels)}) are launched from no function of this file; "
                           "launched from another file, they can be judged through that launcher "
                           "(skel capture records its calls from your own test or benchmark)")
    if entry is None:
        entry = sorted(found, key=_rank)[0]
    if entry not in found:
        raise HarnessError(f"{path}: no launcher {entry!r} (launchers here: {', '.join(sorted(found))})")
    fn = found[entry]
    params = {k: tuple(a.arg for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs) for k, n in kernels.items()}
    values_of = module_values(tree)
    lf = read_launcher(fn, params, values_of)  # every branch: which parameters are tensors at all
    launch = lf.launches[0]
    kernel = kernels[launch.kernel]
    st = _State(lf, kernel_facts(kernel), _binding(lf, launch))
    variants = tuple(variants)
    for _ in range(3):  # the judged path: read again with the values chosen, until its asserts ask nothing new
        tensors = _tensor_params(st, variants)
        env = _env(st, tensors, variants)
        lf = read_launcher(fn, params, values_of, env)
        if not lf.launches:
            raise HarnessError(
                f"{path}:{launch.line}: on the path judged (defaults{', --variant ' + ', '.join(variants) if variants else ''})"
                f" {fn.name} launches no kernel: the launch of {launch.kernel} is under a condition that path does"
                " not take (--variant ARG sets a flag or passes an Optional argument)")
        launch = lf.launches[0]
        more = tuple(sorted(lf.required - set(tensors) - set(variants)))
        st = _State(lf, st.kf, _binding(lf, launch), notes=[n for n in st.notes if "is Optional" not in n])
        if not more:
            break
        variants += more
        st.notes.append(f"{', '.join(more)}: required on the default path (the launcher asserts it is not None)")
    tensors = _tensor_params(st, variants)
    flags = _flags(st, kernel, launch, env)
    st.kf = kernel_facts(kernel, flags)
    if flags:
        st.notes.append("kernel read on the path " + ", ".join(f"{k}={v}" for k, v in sorted(flags.items())))
    _shapes(st, tensors, path)
    dim_list = _dims(st, tensors, dims or {})
    tensor_args = tuple(_tensor_arg(st, t) for t in tensors)
    values = _values(st, tensors, variants, {d.name for d in dim_list})
    outputs = _outputs(st, tensors)
    inplace = tuple(t for t in tensors if _pointer(st, t) and _pointer(st, t).stored)
    arguments = tuple(p.name for p in lf.params if p.name in tensors or p.name in {v.name for v in values})
    others = tuple(sorted(n for n in found if n != entry))
    written = {}
    for name in outputs:
        alloc = st.lf.allocs.get(name)
        shape = _alloc_shape(alloc[0], st, st.shapes) if alloc else None
        if shape is not None:
            dtype = alloc[1]
            source = dtype.removesuffix(".dtype") if dtype.endswith(".dtype") else alloc[2]
            like = next((t for t in tensor_args if t.name == source), None)
            if not dtype or dtype.endswith(".dtype") or dtype not in ("float32", "float16", "bfloat16", "int32", "int64"):
                dtype = like.dtype if like else "work"
            written[name] = (shape, dtype)
    names = {d.name for d in dim_list}
    dispatch = tuple((d, f"{t}.shape[{axis}]") for d, (t, axis) in st.lf.dims.items() if d in names and t in tensors)
    return Harness(path, entry, launch.kernel, fn.lineno, arguments, tensor_args, values, dim_list, outputs,
                   inplace, tuple(st.notes), others, written, dispatch,
                   next((t.dims for t in tensor_args if t.values.startswith("slots")), ()))


# -- which parameters are tensors -------------------------------------------------------------------------
def _param_of(st: _State, expr: str) -> str | None:
    name = st.lf.aliases.get(expr, expr)
    return name if st.lf.param(name) else None


def _pointer(st: _State, tensor: str):
    """How the kernel uses ``tensor`` through every pointer parameter bound to it (h0 and ht may be one)."""
    uses = [st.kf.pointers[k] for k, e in st.binding.items() if _param_of(st, e) == tensor and k in st.kf.pointers]
    if not uses:
        return None
    first = next((u for u in uses if u.loaded), uses[0])
    return replace(first, loaded=any(u.loaded for u in uses), stored=any(u.stored for u in uses))


def _kernel_param(st: _State, tensor: str) -> str | None:
    return next((k for k, e in st.binding.items() if _param_of(st, e) == tensor and k in st.kf.pointers), None)


def _binding(lf: LauncherFacts, launch) -> dict[str, str]:
    """Kernel parameter -> the launcher's expression, with locals that hold a stride, a dim or an argument
    replaced by their value (``stride_s = state.stride(0)`` -> ``state.stride(0)``)."""
    out = {}
    for kparam, expr in launch.args.items():
        for _ in range(3):
            if isinstance(expr, ast.Name) and expr.id in lf.exprs and expr.id not in lf.dims \
                    and not lf.param(expr.id) and expr.id not in lf.allocs and expr.id not in lf.aliases:
                value = lf.exprs[expr.id]
                if isinstance(value, (ast.Name, ast.Constant)) or (isinstance(value, ast.Call) and
                                                                   ast.unparse(value.func).endswith(".stride")):
                    expr = value
                    continue
            break
        out[kparam] = ast.unparse(expr)
    return out


def _env(st: _State, tensors: list[str], variants: tuple[str, ...]) -> dict[str, object]:
    """Each parameter's value on the judged path: given tensors PRESENT, omitted ones None, flags chosen."""
    env: dict[str, object] = {}
    for p in st.lf.params:
        if p.name in tensors:
            env[p.name] = PRESENT
        elif p.name in variants:
            env[p.name] = True if not ("Tensor" in p.annotation or p.name in st.lf.used_as_tensor) else PRESENT
        elif p.has_default:
            env[p.name] = p.default
        elif p.annotation == "bool" or p.name in st.lf.conditions:
            env[p.name] = p.name in st.lf.gates
        else:
            env[p.name] = UNKNOWN
    return env


def _flags(st: _State, kernel: ast.FunctionDef, launch, env: dict[str, object]) -> dict[str, bool]:
    """The kernel's constexpr flags on the judged path: from the launch's arguments (``FLAG=x is not None``,
    ``FLAG=flag``), ``triton.heuristics`` lambdas (``args['h0'] is not None``) and the kernel's defaults."""
    from skel.harness.launcher_facts import _Reader

    reader = _Reader(st.lf, set(), {}, env)
    flags: dict[str, bool] = {}
    args = kernel.args.posonlyargs + kernel.args.args + kernel.args.kwonlyargs
    constexprs = {a.arg for a in args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation)}
    defaults = dict(zip([a.arg for a in kernel.args.args][::-1], kernel.args.defaults[::-1]))
    for name, default in defaults.items():
        if name in constexprs and isinstance(default, ast.Constant) and isinstance(default.value, bool):
            flags[name] = default.value
    for d in kernel.decorator_list:
        if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("heuristics") and d.args \
                and isinstance(d.args[0], ast.Dict):
            for key, value in zip(d.args[0].keys, d.args[0].values):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Lambda):
                    truth = _heuristic(value.body, launch, reader)
                    if truth is not None:
                        flags[key.value] = truth
    for name, expr in launch.args.items():
        if name in constexprs:
            truth = reader.truth(expr)
            if truth is not None:
                flags[name] = truth
    return flags


def _heuristic(body: ast.AST, launch, reader) -> bool | None:
    """``args['x'] is not None`` (or ``is None``) with x the launch's argument for kernel parameter x."""
    if isinstance(body, ast.Compare) and len(body.ops) == 1 and isinstance(body.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(body.left, ast.Subscript) and isinstance(body.left.slice, ast.Constant):
        arg = launch.args.get(body.left.slice.value)
        if arg is None:
            return None
        test = ast.Compare(left=arg, ops=body.ops, comparators=body.comparators)
        return reader.truth(test)
    return None


def _tensor_params(st: _State, variants: tuple[str, ...]) -> list[str]:
    out = []
    for p in st.lf.params:
        is_tensor = "Tensor" in p.annotation or p.name in st.lf.used_as_tensor or _pointer(st, p.name) is not None
        if not is_tensor:
            continue
        if p.optional and p.name not in variants:
            st.notes.append(f"'{p.name}' is Optional: judged on the default path (None); --variant {p.name} adds it")
            continue
        out.append(p.name)
    unknown = [v for v in variants if not st.lf.param(v)]
    if unknown:
        raise HarnessError(f"{st.lf.name}: --variant {', '.join(unknown)}: no such parameter")
    return out


# -- shapes --------------------------------------------------------------------------------------------
def _shapes(st: _State, tensors: list[str], path: Path) -> None:
    lf = st.lf
    for t, axes in lf.axes.items():
        rank = lf.ranks.get(t)
        if rank is None and set(axes) == {0, -1}:  # x.shape[0] and x.shape[-1] read (x.view(-1, D)): [N, D]
            rank = 2
            st.notes.append(f"'{t}' taken as 2-D [{axes[0]}, {axes[-1]}]: the launcher reads its first and last dims")
        if rank is not None and all(any(a % rank == i for a in axes) for i in range(rank)):
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
        shape = _alloc_shape(items, st, known)
        if shape is not None:
            known[name] = shape
    polys = _launcher_polys(st, known)
    for t in tensors:
        if t in st.shapes:
            continue
        shape = _layout_shape(st, t, polys, known)
        if shape is None:
            raise HarnessError(
                f"{path}:{lf.line}: cannot infer the shape of '{t}' (launcher {lf.name}): it is never unpacked "
                f"and its address in {st.kf.name} ({polys.get(t, 'not indexed')}) does not determine it; "
                f"write it in a spec (skel harness -o spec.py, then edit)")
        st.shapes[t] = shape
        known[t] = shape
        polys = _launcher_polys(st, known)


def _alloc_shape(items: list, st: _State, known: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    out: list[str] = []
    for kind, value in items:
        if kind == "*" and value in known:
            out += known[value]
        elif kind == "dim" and value in st.lf.dims:
            out.append(value)
        elif kind == "dim" and value in st.lf.dim_alias:
            out.append(st.lf.dim_alias[value])
        elif kind == "axis" and value[0] in known:
            out.append(known[value[0]][value[1]])
        elif kind in ("int", "dim"):
            out.append("1")  # a size that is not a shape dim (a tile count such as NK: 1 on the default path)
        else:
            return None
    return tuple(out)


def _launcher_polys(st: _State, known: dict[str, tuple[str, ...]]) -> dict[str, Poly]:
    """Each bound pointer's address in the launcher's dims (kernel sizes renamed, strides expanded)."""
    rename: dict[str, str] = {}
    for kparam, expr in st.binding.items():
        rename[kparam] = expr
    polys: dict[str, Poly] = {}
    for kparam, use in st.kf.pointers.items():
        expr = st.binding.get(kparam)
        target = st.lf.aliases.get(expr, expr) if expr else None
        if target is None or use.address is None:
            continue
        poly = use.address.rename({r: _rename_root(r, rename) for m, _ in use.address.terms for r in m})
        polys.setdefault(target, _expand_strides(poly, known, st.lf.aliases))
    return polys


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
                poly = poly * (Poly.const(1) if d == "1" else Poly.atom(d))
            return poly
    return Poly.atom(factor)


def _is_root(f: str, dims: set[str]) -> bool:
    return f not in dims and not f.isdigit()


def _layout_shape(st: _State, tensor: str, polys: dict[str, Poly], known: dict[str, tuple[str, ...]]):
    poly = polys.get(tensor)
    if poly is None:
        return None
    for other, shape in known.items():  # indexed exactly like a tensor of known shape
        if other != tensor and polys.get(other) == poly:
            st.notes.append(f"'{tensor}' has the shape of '{other}' {list(shape)}: the kernel indexes both alike")
            return shape
    dims = set(st.lf.dims) | {d for shape in known.values() for d in shape}
    own = f"{tensor}.stride(0)"  # the tensor's own leading stride: whatever its inner dims make it
    lead = [m for m, _ in poly.terms if own in m]
    inner = Poly.of({m: c for m, c in poly.terms if own not in m})
    if len(lead) > 1:
        return None
    prefix: list[str] = []
    if lead:
        roots = tuple(f for f in lead[0] if f != own)
        if len(roots) != 1:
            return None
        src = KernelFacts.loaded_from(roots[0])
        if src:  # a slot index into a pool: the leading dim is the pool's
            prefix = [POOL]
            st.notes.append(f"'{tensor}' is a pool indexed by the values of '{src}' (slots): leading dim {POOL}")
        else:
            span = _span(st, tensor, roots, True, polys, known, dims)
            if not span:
                return None
            prefix = list(span)
        if not inner.terms:
            st.notes.append(f"'{tensor}' {prefix}: read off its strides in {st.kf.name}")
            return tuple(prefix)
        poly = inner
    terms = sorted(((Counter(f for f in m if not _is_root(f, dims)), tuple(sorted(f for f in m if _is_root(f, dims))))
                    for m, _ in poly.terms), key=lambda t: sum(t[0].values()))
    if not terms or sum(terms[0][0].values()) or any(not roots for _, roots in terms):
        return None
    shape: list[str] = []
    for k, (stride, roots) in enumerate(terms):
        outer = k == len(terms) - 1
        bound = KernelFacts.root_bound(roots[0]) if len(roots) == 1 else None
        if len(roots) == 1 and roots[0].startswith("loop:") and roots[0][5:] in dims:
            bound = roots[0][5:]  # a loop index spans [0, its stop)
        span = _span(st, tensor, roots, outer, polys, known, dims)
        if k == 0 and bound and not outer:
            part = [bound]
        elif span:
            part = list(span)
        elif not outer:
            extra = terms[k + 1][0] - stride
            if stride - terms[k + 1][0] or sum(extra.values()) != 1:
                return None
            part = [next(iter(extra))]
        else:
            return None
        shape = part + shape
        # a contiguous layout: the next stride is this one times the dims just placed
        if not outer and terms[k + 1][0] != stride + Counter(part):
            return None
    shape = prefix + shape
    st.notes.append(f"'{tensor}' {shape}: read off its strides in {st.kf.name}")
    return tuple(shape)


def _span(st: _State, tensor: str, roots: tuple[str, ...], outer: bool, polys: dict[str, Poly],
          known: dict[str, tuple[str, ...]], dims: set[str]) -> tuple[str, ...] | None:
    """The dims an index spans in a tensor of known shape that the kernel indexes with it: the axis
    whose stride it carries there (and, for an outermost index, every axis before it). An index the
    kernel splits (``i_n = r // H``, ``i_h = r % H``) spans its parts' dims."""
    if len(roots) == 1:
        for whole, high, low in st.kf.splits:
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
                if Counter(d for d in shape[axis + 1:] if d != "1") == stride:
                    first = 0 if k == len(terms) - 1 else _axis_after(terms[k + 1][0], shape)
                    if first is None or first > axis:
                        break
                    return tuple(d for d in shape[first:axis + 1] if d != "1") or None
    return None


def _axis_after(stride: Counter, shape: tuple[str, ...]) -> int | None:
    """The first axis after the one whose stride is ``stride``."""
    for axis in range(len(shape)):
        if Counter(d for d in shape[axis + 1:] if d != "1") == stride:
            return axis + 1
    return None


# -- sizes ---------------------------------------------------------------------------------------------
def _role(st: _State, dim: str, tensors: list[str]) -> str:
    """tokens: a loop runs to it; head_dim/hidden: the last axis of a 3-D+/2-D tensor, tiled by a masked
    offset when it is also a middle axis; heads: a middle axis; batch: the first axis. The first that
    holds, in that order."""
    if dim in st.lf.flat:
        return "flat"
    if dim in {st.binding.get(k) for k in st.kf.loop_bounds}:
        return "tokens"
    shapes = [st.shapes.get(t, ()) for t in tensors]
    masked = {st.binding.get(b, b) for b in (KernelFacts.root_bound(r) for r in st.kf.roots) if b}
    for shape in shapes:
        if len(shape) >= 2 and shape[-1] == dim and (dim in masked or not any(dim in s[1:-1] for s in shapes)):
            return "hidden" if len(shape) == 2 else "head_dim"
    if any(dim in shape[1:-1] for shape in shapes):
        return "heads"
    for t in tensors:
        shape = st.shapes.get(t, ())
        if shape and shape[0] == dim:
            return "batch"
    return "other"


def _dims(st: _State, tensors: list[str], fixed: dict[str, int]) -> tuple[Dim, ...]:
    names: list[str] = []
    for t in tensors:
        for d in st.shapes.get(t, ()):
            if d not in names and d not in ("1", POOL):
                names.append(d)
    unknown = [d for d in fixed if d not in names]
    if unknown:
        raise HarnessError(f"--dims {', '.join(unknown)}: not a dim of {st.lf.name} (its dims: {', '.join(names)})")
    pow2 = {st.binding[k] for k in st.kf.arange_bounds if k in st.binding}
    out = []
    for d in names:
        role = _role(st, d, tensors)
        is_pow2 = d in pow2
        ci = (_POW2_CI if is_pow2 else _CI).get(role, _CI[role])
        decode = fixed.get(d, _DECODE.get(role, 0) or 16)
        bound = st.lf.bounds.get(d)
        if bound is not None:
            decode = min(decode, bound)
            ci = tuple(min(c, bound) for c in ci)
        if d in fixed:
            ci = tuple(min(c, fixed[d]) for c in ci)
        out.append(Dim(d, role, ci, decode, is_pow2))
    if not any(d.role == "batch" for d in out) and out:
        st.notes.append(f"no batch-like dim found: the decode sweep keeps every dim fixed")
    return tuple(out)


# -- values ----------------------------------------------------------------------------------------------
def _tensor_arg(st: _State, t: str) -> TensorArg:
    use = _pointer(st, t)
    dtype, why = "work", "the spec's dtype"
    if t in st.lf.dtypes:
        dtype, why = st.lf.dtypes[t], f"the launcher asserts its dtype"
    elif use is not None and use.stored:
        dtype, why = "float32", "updated in place by the kernel (a state): float32"
    else:
        for name, (items, adtype, _) in st.lf.allocs.items():
            if adtype == "float32" and st.shapes.get(t) == _alloc_shape(items, st, st.shapes):
                dtype, why = "float32", f"float32 like '{name}', the launcher's allocation of its shape"
    values, vwhy = "normal", "N(0, 1): the code shows no regime"
    kparam = _kernel_param(st, t)
    if kparam in st.kf.index_tensors:
        padded = kparam in st.kf.skips_negative
        return TensorArg(t, st.shapes[t], "int32", "slots-padded" if padded else "slots",
                         f"its values index '{st.kf.index_tensors[kparam]}' in {st.kf.name}: distinct slots of the pool"
                         + (", about a quarter -1 (the kernel skips negative slots)" if padded else ""))
    if use is not None and use.regime == "log-decay":
        values, vwhy = "log-decay", f"{st.kf.name} takes exp() of it: log-decays in (-inf, 0), logsigmoid(N(0, 1))"
    elif use is not None and use.regime == "positive":
        values, vwhy = "positive", f"{st.kf.name} takes log/sqrt of it: U(0.5, 2)"
    return TensorArg(t, st.shapes[t], dtype, values, f"{why}; {vwhy}")


def _values(st: _State, tensors: list[str], variants: tuple[str, ...], dims: set[str]) -> tuple[ValueArg, ...]:
    out = []
    for p in st.lf.params:
        if p.name in tensors:
            continue
        kparam = next((k for k, e in st.binding.items() if _param_of(st, e) == p.name), None)
        unfilled = (p.has_default and p.default is None and p.name not in st.lf.exprs and kparam is not None
                    and st.kf.scalar_use.get(kparam) in ("scale", "eps", "offset"))
        if p.has_default and p.name not in variants and not unfilled:
            continue  # the default path: the launcher's own default
        if unfilled:
            st.notes.append(f"'{p.name}' defaults to None, which the launcher passes to {st.kf.name} unreplaced"
                            f" (its callers fill it): given a value")
        if p.name in st.lf.choices:
            choice = st.lf.choices[p.name][0]
            out.append(ValueArg(p.name, repr(choice), f"the first value the launcher's check allows {st.lf.choices[p.name]}"))
            continue
        kparam = next((k for k, e in st.binding.items() if _param_of(st, e) == p.name), None)
        use = st.kf.scalar_use.get(kparam, "") if kparam else ""
        if p.annotation == "bool" or isinstance(p.default, bool) or p.name in st.lf.conditions:
            on = p.name in variants or p.name in st.lf.gates
            out.append(ValueArg(p.name, repr(on), "a flag that allocates an output: True" if on
                                else "a flag: False (--variant NAME sets it)"))
        elif use == "eps":
            out.append(ValueArg(p.name, "1e-6", f"added under a root or division in {st.kf.name}: an epsilon"))
        elif use == "offset":
            out.append(ValueArg(p.name, "0.0", f"added to values in {st.kf.name}: an offset"))
        elif use == "scale" or "float" in p.annotation:
            head = next((d for t in tensors for d in st.shapes.get(t, ())[-1:]
                         if _role(st, d, tensors) == "head_dim"), None)  # the first tensor's head dim
            code = f"{head} ** -0.5" if head else "1.0"
            out.append(ValueArg(p.name, code, f"multiplies values in {st.kf.name}: a scale ({code})"))
        elif "int" in p.annotation:
            out.append(ValueArg(p.name, "1", "an int the code does not constrain"))
        else:
            raise HarnessError(f"{st.lf.name}: cannot tell what the required argument '{p.name}' is (line {st.lf.line}); "
                               f"write it in a spec (skel harness -o spec.py, then edit)")
    return tuple(out)


def _outputs(st: _State, tensors: list[str]) -> tuple[str, ...]:
    out = []
    for i, node in enumerate(st.lf.returns):
        base = node
        while isinstance(base, (ast.Call, ast.Attribute, ast.Subscript)):
            base = base.func.value if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) else \
                base.value if isinstance(base, (ast.Attribute, ast.Subscript)) else None
            if base is None:
                break
        name = base.id if isinstance(base, ast.Name) else f"out{i}"
        if name in tensors or name not in st.lf.allocs:
            name = "_" + name  # an input handed back, a tile size, a flag: passed over
        out.append(name)
    if not any(not n.startswith("_") for n in out) and not any(_pointer(st, t) and _pointer(st, t).stored
                                                             for t in tensors):
        raise HarnessError(f"{st.lf.name}: returns no tensor it allocates and updates no input in place: nothing to compare")
    return tuple(dict.fromkeys(out))
