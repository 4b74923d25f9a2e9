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
from pathlib import Path

from skel.pipeline.select import SMALL_BATCH
from skel.pipeline.targets import dispatch_dims
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


def _split_dim(parsed: list[dict[str, int]], dims: dict[str, str], first: str) -> str | None:
    """A dimension (with an expression in ``dims``) every bucket gives and on which they differ; ``first`` is
    preferred (the batch dim inside the small-batch regime)."""
    for dim in [first, *(d for d in dims if d != first)]:
        values = [p.get(dim) for p in parsed]
        if dim in dims and None not in values and len(set(values)) > 1:
            return dim
    return None


def _tree(items: list[tuple[dict[str, int], int]], dims: dict[str, str], first: str):
    """A decision tree over the buckets (parsed dims, variant index): a leaf is an index; a node is
    (dim, [(bound, subtree), ...]) with the last bound None (everything above the previous one)."""
    if len(items) == 1:
        return items[0][1]
    dim = _split_dim([p for p, _ in items], dims, first)
    if dim is None:
        return None
    values = sorted({p[dim] for p, _ in items})
    branches = []
    for i, value in enumerate(values):
        sub = _tree([(p, v) for p, v in items if p[dim] == value], dims, first)
        if sub is None:
            return None
        # Between two measured buckets, the smaller one's winner serves up to the midpoint.
        bound = None if i == len(values) - 1 else ((value + values[i + 1]) // 2 if values[i + 1] - value > 1 else value)
        branches.append((bound, sub))
    return dim, branches


def _leaves(tree) -> list[int]:
    return [tree] if isinstance(tree, int) else [i for _, sub in tree[1] for i in _leaves(sub)]


def _dims_read(tree) -> set[str]:
    return set() if isinstance(tree, int) else {tree[0], *(d for _, sub in tree[1] for d in _dims_read(sub))}


def build_dispatch(original: str, variants: list[tuple[str, str]], binding) -> str:
    """variants: [(bucket label, rewritten source)], bucket labels like "T1-H32-HV32-K128-V128". A small-batch
    bucket (``skel.pipeline.select``) keeps its batch dim ("N1-T1-H32-..."): the dispatch tests
    ``N <= SMALL_BATCH`` first, then, in each regime, the dims that separate its buckets."""
    found, note = dispatch_dims(binding)
    dims = dict(found)
    entry = binding.entry
    batch = getattr(binding, "batch", "") or "N"
    parsed = [dict(Shape.parse(b).dims) for b, _ in variants]
    small = [(p, i) for i, p in enumerate(parsed) if batch in p]
    large = [(p, i) for i, p in enumerate(parsed) if batch not in p]
    why = (f"among the dims the launcher's arguments show ({sorted(dims)}; a harness can name them in "
           "TargetSpec.dims)" + (f"; {note}" if note else ""))
    if small and large:
        if batch not in dims:
            raise ValueError(f"cannot dispatch between the small-batch and the other buckets: no expression for {batch} {why}")
        parts = [_tree(small, dims, batch), _tree(large, dims, batch)]
        tree = None if None in parts else (batch, [(SMALL_BATCH, parts[0]), (None, parts[1])])
    else:
        tree = _tree(small or large, dims, batch)
    if tree is None:
        raise ValueError(f"cannot dispatch between buckets {[b for b, _ in variants]}: no dimension separates them {why}")
    order = _leaves(tree)  # variant indices in the order the dispatch lists them
    ordered = [variants[i] for i in order]
    callee = {i: f"{entry}_skel_v{n}" for n, i in enumerate(order, 1)}
    base_bucket, base = ordered[0]
    base_defs = _defs(base)
    entry_node = base_defs[entry][2]
    # The file body is the first variant with its entry renamed to _skel_v1.
    pieces = [_rename_def(base, entry, f"{entry}_skel_v1")]
    for n, (bucket, src) in enumerate(ordered[1:], 2):
        names = _changed_closure(base, src, entry)
        renames = {name: f"{name}_skel_v{n}" for name in names}
        var_defs = _defs(src)
        block = "\n\n".join(_rename(_text(src, var_defs[name]), renames) for name in names)
        pieces.append(f"\n\n# --- skel: variant {n}, accepted for {bucket} ---\n\n{block}")
    pieces.append(_dispatcher(entry, entry_node, tree, dims, callee))
    return "".join(pieces)


def _rename_def(source: str, name: str, new: str) -> str:
    start, end, node = _defs(source)[name]
    lines = source.splitlines(True)
    header = node.lineno - 1
    lines[header] = re.sub(rf"\bdef\s+{re.escape(name)}\b", f"def {new}", lines[header], count=1)
    return "".join(lines)


def _dispatcher(entry: str, node: ast.FunctionDef, tree, dims: dict[str, str], callee: dict[int, str]) -> str:
    """The entry with the original signature, reading the dims the tree tests and walking it; the decision tree
    is walked here into its statements, the wrapper's text is ``templates/dispatch.py.j2``."""
    from skel.catalog.render import render

    call = _call_args(node.args)
    body: list[str] = []

    def emit(t, indent: str) -> None:
        if isinstance(t, int):
            body.append(f"{indent}return {callee[t]}({call})")
            return
        dim, branches = t
        for i, (bound, sub) in enumerate(branches):
            if bound is None:
                if i == 0:
                    emit(sub, indent)
                    continue
                body.append(f"{indent}else:")
            else:
                body.append(f"{indent}{'if' if i == 0 else 'elif'} {dim} <= {bound}:")
            emit(sub, indent + "    ")

    emit(tree, "    ")
    return render(Path(__file__).parent / "templates", "dispatch.py.j2", entry=entry, params=ast.unparse(node.args),
                  read=sorted(_dims_read(tree)), dims=dims, body=body)


def _call_args(args: ast.arguments) -> str:
    parts = [a.arg for a in args.posonlyargs + args.args]
    if args.vararg:
        parts.append(f"*{args.vararg.arg}")
    parts += [f"{a.arg}={a.arg}" for a in args.kwonlyargs]
    if args.kwarg:
        parts.append(f"**{args.kwarg.arg}")
    return ", ".join(parts)
