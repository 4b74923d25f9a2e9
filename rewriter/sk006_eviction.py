"""SK006: eviction hints on the streaming loads and stores of a loop.

DESCRIPTION: sibling programs are the programs that differ only in a tile the launch grid
is built from (``grid = cdiv(V, BV) * N * HV`` makes the ``BV`` tiles of one head siblings).
Inside the loops of the kernel, a ``tl.load`` with no ``eviction_policy`` whose address does
not depend on that tile's offsets (``o_v = i_v * BV + tl.arange(0, BV)``) is read again by
every sibling -- ``evict_last`` keeps it in L2 for them (q, k, a per-head gate); one whose
address does depend on it is read by this program only -- ``evict_first`` (v, a per-column
beta). A store whose address depends on the tile (the output) gets ``evict_first``. Hints
already present are kept; loads outside loops (the state, read once) are left alone.

Needs the launch in the same file (to know which tiles have siblings). Safe: a cache hint
never changes a value.
"""
from __future__ import annotations

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions, register
from skel.rewriter.sk005_launch import Launch

CODE = "SK006"
SAFETY = "safe"


def _tile_offsets(kernel: cst.FunctionDef, tiles: set[str]) -> set[str]:
    """Names holding a sibling tile's index or offsets: ``o_v = i_v * BV + tl.arange(0, BV)`` -> {o_v, i_v}."""
    out: set[str] = set()
    for small, *_ in F.walk(kernel.body.body):
        name = F.single_target(small)
        if not name or not isinstance(small, cst.Assign):
            continue
        for call in C.calls_in(small.value):
            if C.last_part(C.call_name(call)) == "arange" and C.names_in(call) & tiles:
                out.add(name)
                out |= _multiplied_by(small.value, tiles)
    return out


def _multiplied_by(node: cst.CSTNode, tiles: set[str]) -> set[str]:
    found: set[str] = set()

    class V(cst.CSTVisitor):
        def visit_BinaryOperation(self, n: cst.BinaryOperation) -> None:
            if isinstance(n.operator, cst.Multiply):
                for a, b in ((n.left, n.right), (n.right, n.left)):
                    if isinstance(b, cst.Name) and b.value in tiles and isinstance(a, cst.Name):
                        found.add(a.value)

    node.visit(V())
    return found


def _policy(call: cst.Call) -> bool:
    return C.kwarg(call, "eviction_policy") is not None


@register(CODE)
def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    ks = {k.name.value: k for k in C.kernels(src.module, options)}
    if not ks:
        return C.no_kernel(CODE, SAFETY, source, options)
    sites = C.launches(src.module, ks)
    edits: dict = {}
    changes: list[Change] = []
    hinted = 0
    reasons: list[str] = []
    for name, kernel in ks.items():
        mine = [(c, h) for c, k, h in sites if k is kernel]
        if not mine:
            reasons.append(f"{name}: launched outside this file, so which tiles have sibling programs is unknown")
            continue
        tiles = set().union(*(Launch(c, kernel, h, dict(options.shape)).grid_tiles() for c, h in mine))
        if not tiles:
            reasons.append(f"{name}: its grid is not built from a tile size, so no program re-reads another's data")
            continue
        offsets = _tile_offsets(kernel, tiles)
        deps = F.dependencies(kernel)
        tile_text = "/".join(sorted(tiles))
        for small, _line, chain, loops in F.walk(kernel.body.body):
            if not loops:
                continue
            for call in C.calls_in(small):
                kind = C.last_part(C.call_name(call))
                if kind not in ("load", "store") or not call.args:
                    continue
                if _policy(call):
                    hinted += 1
                    continue
                per_tile = F.depends_on(C.names_in(call.args[0].value), offsets, deps, chain)
                if kind == "store" and not per_tile:
                    continue
                policy = "evict_first" if per_tile else "evict_last"
                why = (f"read by this {tile_text} tile only" if per_tile and kind == "load" else
                       f"written once per {tile_text} tile" if per_tile else
                       f"re-read by the sibling {tile_text} programs")
                edits[call] = (lambda p: lambda upd: upd.with_changes(args=[
                    *upd.args, cst.Arg(cst.SimpleString(f"'{p}'"), keyword=cst.Name("eviction_policy"),
                                       equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]))(policy)
                changes.append(Change(src.line(call), f"tl.{kind}({C.code_of(call.args[0].value)}, ...): "
                                      f"eviction_policy='{policy}' ({why})"))
    if not edits:
        if hinted:
            return C.skip(CODE, SAFETY, source, f"already applied: all {hinted} loads/stores in the loops carry an eviction policy"
                           + (f" ({'; '.join(reasons)})" if reasons else ""))
        return C.skip(CODE, SAFETY, source, "not applicable: " + ("; ".join(reasons) or "no load or store inside a loop"))
    new = C.apply_edits(src.module, edits).code
    return [C.applied_result(CODE, source, new, changes, f"{len(edits)} eviction hint(s) added", SAFETY)]
