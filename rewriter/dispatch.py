"""Emit one file holding several accepted variants and a dispatch on shape.

When different candidates win in different shape buckets (e.g. one launch config at T = 1,
a merged-tile kernel at T = 8), the output keeps the first bucket's variant as the file
body and appends, for every other variant, the top-level functions it changed (plus every
function that calls one of them, so each variant is self-consistent), renamed with a
``_skel_vN`` suffix. The original entry function becomes a dispatcher with the same
signature that picks a variant by the bucket's dimension (e.g. ``T = q.shape[1]``).
"""
from __future__ import annotations

import ast
import re

from skel.rewriter.select import SMALL_BATCH
from skel.rewriter.targets import dispatch_dims
from skel.validate.spec import Shape


def _defs(source: str) -> dict[str, tuple[int, int, ast.FunctionDef]]:
    """Top-level functions: name -> (first line incl. decorators, last line, node)."""
    tree = ast.parse(source)
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            out[node.name] = (start, node.end_lineno, node)
    return out


def _text(source: str, span: tuple[int, int, ast.FunctionDef]) -> str:
    lines = source.splitlines(True)
    return "".join(lines[span[0] - 1: span[1]])


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _rename(text: str, renames: dict[str, str]) -> str:
    if not renames:
        return text
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(renames, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: renames[m.group(1)], text)


def _changed_closure(base: str, variant: str, entry: str) -> list[str]:
    base_defs, var_defs = _defs(base), _defs(variant)
    changed = {n for n, span in var_defs.items()
               if n not in base_defs or _text(variant, span) != _text(base, base_defs[n])}
    changed.add(entry)
    grew = True
    while grew:  # callers of changed functions must call the renamed versions
        grew = False
        for name, span in var_defs.items():
            if name not in changed and _names_used(span[2]) & changed:
                changed.add(name)
                grew = True
    return [n for n in var_defs if n in changed]  # source order


def _dispatch_dim(buckets: list[str], dims: dict[str, str]) -> str | None:
    """The one dimension (with an expression in ``dims``) that separates the buckets."""
    parsed = [dict(Shape.parse(b).dims) for b in buckets]
    for dim in dims:
        values = [p.get(dim) for p in parsed]
        if None not in values and len(set(values)) == len(values):
            return dim
    return None


def build_dispatch(original: str, variants: list[tuple[str, str]], binding) -> str:
    """variants: [(bucket label, rewritten source)], bucket labels like "T1-H32-HV32-K128-V128"; a small-batch
    bucket (``skel.rewriter.select``) carries its regime's bound as the batch dim ("N8-T1-H32-...")."""
    found, note = dispatch_dims(binding)
    dims = dict(found)
    entry = binding.entry
    batch = getattr(binding, "batch", "") or "N"
    small = [bv for bv in variants if batch in dict(Shape.parse(bv[0]).dims)]
    large = [bv for bv in variants if bv not in small]
    if small and large and batch not in dims:
        raise ValueError(f"cannot dispatch between the small-batch and the other buckets: no expression for {batch} "
                         f"among the dims the launcher's arguments show ({sorted(dims)})" + (f"; {note}" if note else ""))
    groups = [g for g in (small, large) if g]
    ordered: list[tuple[str, str]] = []
    plans: list[tuple[str | None, list[tuple[str, str]]]] = []
    for group in groups:
        rest = [(_without(b, batch) if group is small else b, src) for b, src in group]
        dim = _dispatch_dim([b for b, _ in rest], dims) if len(group) > 1 else None
        if len(group) > 1 and dim is None:
            raise ValueError(f"cannot dispatch between buckets {[b for b, _ in group]}: no separating dimension "
                             f"among {sorted(dims)} (the dims the launcher's arguments show; a harness can name them "
                             "in TargetSpec.dims)" + (f"; {note}" if note else ""))
        keyed = sorted(zip(rest, group), key=lambda pair: Shape.parse(pair[0][0])[dim] if dim else 0)
        plans.append((dim, [r for r, _ in keyed]))
        ordered += [g for _, g in keyed]
    base_bucket, base = ordered[0]
    base_defs = _defs(base)
    entry_node = base_defs[entry][2]
    # The file body is the first variant with its entry renamed to _skel_v1.
    pieces = [_rename_def(base, entry, f"{entry}_skel_v1")]
    callees = [f"{entry}_skel_v1"]
    for i, (bucket, src) in enumerate(ordered[1:], 2):
        names = _changed_closure(base, src, entry)
        renames = {n: f"{n}_skel_v{i}" for n in names}
        var_defs = _defs(src)
        block = "\n\n".join(_rename(_text(src, var_defs[n]), renames) for n in names)
        pieces.append(f"\n\n# --- skel: variant {i}, accepted for {bucket} ---\n\n{block}")
        callees.append(f"{entry}_skel_v{i}")
    split = (batch, dims[batch], SMALL_BATCH) if small and large else None
    pieces.append(_dispatcher(entry, entry_node, plans, dims, callees, split))
    return "".join(pieces)


def _without(bucket: str, dim: str) -> str:
    return "-".join(f"{k}{v}" for k, v in Shape.parse(bucket).dims if k != dim) or "all"


def _rename_def(source: str, name: str, new: str) -> str:
    start, end, node = _defs(source)[name]
    lines = source.splitlines(True)
    header = node.lineno - 1
    lines[header] = re.sub(rf"\bdef\s+{re.escape(name)}\b", f"def {new}", lines[header], count=1)
    return "".join(lines)


def _dispatcher(entry: str, node: ast.FunctionDef, plans, dims: dict[str, str], callees: list[str],
                split: tuple[str, str, int] | None) -> str:
    """The entry with the original signature: (on a batch split, ``if N <= 8:`` first) then, within each regime,
    an if-chain on the dim that separates its buckets."""
    params = ast.unparse(node.args)
    call = _call_args(node.args)
    read = sorted({d for d, _ in plans if d} | ({split[0]} if split else set()))
    lines = ["", "", f"def {entry}({params}):",
             f'    """skel dispatch: picks the variant accepted for this shape (by {", ".join(read)})."""']
    lines += [f"    {d} = {dims[d]}" for d in read]
    index = 0
    for n, (dim, group) in enumerate(plans):
        indent = "    "
        if split:
            indent = "        "
            lines.append(f"    if {split[0]} <= {split[2]}:" if n == 0 else "    else:")
        names = callees[index:index + len(group)]
        index += len(group)
        if dim is None:
            lines.append(f"{indent}return {names[0]}({call})")
            continue
        values = [Shape.parse(b)[dim] for b, _ in group]
        for i, (value, callee) in enumerate(zip(values, names)):
            if i == len(names) - 1:
                lines.append(f"{indent}return {callee}({call})")
            else:
                keyword = "if" if i == 0 else "elif"
                # Between two measured buckets, the smaller one's winner serves up to the midpoint.
                bound = (value + values[i + 1]) // 2 if values[i + 1] - value > 1 else value
                lines.append(f"{indent}{keyword} {dim} <= {bound}:")
                lines.append(f"{indent}    return {callee}({call})")
    return "\n".join(lines) + "\n"


def _call_args(args: ast.arguments) -> str:
    parts = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        parts.append(f"*{args.vararg.arg}")
    parts += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        parts.append(f"**{args.kwarg.arg}")
    return ", ".join(parts)
