"""Cluster mined kernel edits into ranked patterns (see ``history_patterns`` for the terms).

Ranking: ``score = 2 * commits + log2(1 + kernels) + 2 * perf_commits``, where kernels and
commits count distinct occurrences (commits weigh more: one sweeping commit that edits 200
kernels the same way is one decision, not 200) and perf_commits the commits whose message
speaks of speed
(speed, faster, perf, optimize, latency, a percentage, "1.3x"). Gate verdicts lower it at
read time (numerics failures, slower-only trials) and decide admission: skel.pipeline.preview.
"""
from __future__ import annotations

import ast
import copy
import math
import re
from collections import defaultdict

from skel.catalog.records import Condition
from skel.miner.history_patterns import (
    _HOLE, MAX_EDITS, MIN_SUPPORT, PERF_RE, VARIANT_MIN_SUPPORT, VARIANT_PREFIX, REDUCTIONS, Hole, MinedEdit, Occurrence, Pattern, PatternEdit,
    _Compound, compound, compound_key, meaningful, numbered,
)

_IDENT = re.compile(r"^[A-Za-z_]\w*$")


def distill(mined: list[MinedEdit], min_support: int = MIN_SUPPORT) -> list[Pattern]:
    """Every pattern seen in at least ``min_support`` distinct (commit, file, kernel) occurrences, or in
    ``VARIANT_MIN_SUPPORT`` aligned variant pairs (``skel mine --variants``), best first."""
    clusters: dict[str, list[tuple[MinedEdit, _Compound, list[int]]]] = defaultdict(list)
    sizes: dict[str, int] = {}
    for m in mined:
        try:
            c = compound(m.kernel_edit)
        except (SyntaxError, ValueError, RecursionError):  # a stored edit that does not parse back: skip it
            continue
        kinds = {t[0] for t in c.texts}
        if len(c.texts) <= MAX_EDITS and ("replace" in kinds or {"insert", "delete"} <= kinds):
            pe, _ = numbered(c.texts)
            if meaningful(pe):
                key = compound_key(pe)
                clusters[key].append((m, c, list(range(len(c.texts)))))
                sizes[key] = len(pe)
        if len(c.texts) > 1:
            for i, text in enumerate(c.texts):
                if text[0] != "replace":
                    continue
                pe, _ = numbered([text])
                if meaningful(pe):
                    key = compound_key(pe)
                    clusters[key].append((m, c, [i]))
                    sizes[key] = 1
    occ = {k: {_where(m) for m, _, _ in v} for k, v in clusters.items()}
    keep = [k for k, v in clusters.items() if len(occ[k]) >= min_support
            or sum(w[0].startswith(VARIANT_PREFIX) for w in occ[k]) >= VARIANT_MIN_SUPPORT]
    # A cluster whose occurrences a larger compound explains entirely adds nothing.
    keep = [k for k in keep if not any(sizes[o] > sizes[k] and occ[k] <= occ[o] for o in keep)]
    patterns = [_pattern(k, _dedupe(clusters[k])) for k in keep]
    patterns.sort(key=lambda p: (-p.score, p.key))
    return patterns


def _where(m: MinedEdit) -> tuple[str, str, str, str]:
    return (m.repo, m.commit, m.kernel_edit.path, m.kernel_edit.kernel)


def _dedupe(items):
    seen, out = set(), []
    for it in items:
        w = _where(it[0])
        if w not in seen:
            seen.add(w)
            out.append(it)
    return out


def _pattern(key: str, items: list[tuple[MinedEdit, _Compound, list[int]]]) -> Pattern:
    m0, c0, idx0 = items[0]
    edits, _ = numbered([c0.texts[i] for i in idx0])
    holes = _core_holes(items)
    refined, refined_holes, bindings = _anti_unify(items)
    occurrences = tuple(
        Occurrence(m.repo, m.commit, m.kernel_edit.path, c.edits[idx[0]].line, m.kernel_edit.kernel,
                   m.message.splitlines()[0] if m.message else "", m.date)
        for m, c, idx in items
    )
    kernels = len({(o.repo, o.path, o.kernel) for o in occurrences})
    commits = {(m.repo, m.commit): m.message for m, _, _ in items}
    perf = sum(bool(PERF_RE.search(msg)) for msg in commits.values())
    return Pattern(
        key=key, edits=tuple(edits), holes=holes, refined=tuple(refined), refined_holes=refined_holes,
        conditions=_conditions(items, refined, refined_holes, bindings), occurrences=occurrences, kernels=kernels,
        commits=len(commits), perf_commits=perf, score=round(2 * len(commits) + math.log2(1 + kernels) + 2 * perf, 2),
        sources=tuple(sorted({h for m, _, _ in items for h in m.kernel_edit.sources})),
    )


def _kind(texts: list[str]) -> str:
    if all(_IDENT.match(t) for t in texts):
        return "name"
    try:
        if all(isinstance(ast.parse(t, mode="eval").body, ast.Constant) for t in texts):
            return "const"
    except SyntaxError:
        pass
    return "expr"


def _distinct(texts: list[str], n: int = 4) -> tuple[str, ...]:
    return tuple(dict.fromkeys(texts))[:n]


def _core_holes(items) -> tuple[Hole, ...]:
    per_hole: dict[int, list[str]] = defaultdict(list)
    for _, c, idx in items:
        _, order = numbered([c.texts[i] for i in idx])
        for n, placeholder in enumerate(order):
            per_hole[n].append(c.binder.texts[placeholder])
    return tuple(Hole(f"${n + 1}", _kind(t), _distinct(t)) for n, t in sorted(per_hole.items()))


# --------------------------------------------------------- anti-unification
class _AntiUnifier:
    """Most specific generalisation of n trees; one variable per distinct tuple of differing subtrees."""

    def __init__(self, names: list[frozenset[str]]):
        self.names = names
        self.store: dict[tuple[str, ...], int] = {}
        self.bindings: list[list[str]] = []
        self.shared: list[set[str]] = [set() for _ in names]  # constants on both sides of the current edit

    def var(self, nodes: list[ast.AST]) -> ast.Name:
        key = tuple(ast.unparse(n) for n in nodes)  # unparse ignores load/store context
        if key not in self.store:
            self.store[key] = len(self.bindings)
            self.bindings.append([ast.unparse(n) for n in nodes])
        return ast.Name(f"{_HOLE}{self.store[key]}", ast.Load())

    def au(self, nodes: list[ast.AST]) -> ast.AST:
        first = nodes[0]
        if all(isinstance(n, ast.Name) for n in nodes):
            local = any(n.id in names for n, names in zip(nodes, self.names))
            return self.var(nodes) if local or len({n.id for n in nodes}) > 1 else copy.deepcopy(first)
        if all(isinstance(n, ast.Constant) for n in nodes):
            same = len({(type(n.value), repr(n.value)) for n in nodes}) == 1
            introduced = all(repr(n.value) not in sh for n, sh in zip(nodes, self.shared))
            return copy.deepcopy(first) if same and introduced else self.var(nodes)
        if len({type(n) for n in nodes}) > 1:
            return self.var(nodes)
        new = ast.copy_location(type(first)(), first)
        for field in first._fields:
            vals = [getattr(n, field, None) for n in nodes]
            if all(isinstance(v, ast.AST) for v in vals):
                if isinstance(vals[0], (ast.operator, ast.unaryop, ast.cmpop, ast.boolop, ast.expr_context)):
                    if not isinstance(vals[0], ast.expr_context) and len({type(v) for v in vals}) > 1:
                        return self.var(nodes)
                    setattr(new, field, copy.deepcopy(vals[0]))
                else:
                    setattr(new, field, self.au(vals))
            elif all(isinstance(v, list) for v in vals):
                if len({len(v) for v in vals}) > 1:
                    return self.var(nodes)
                column = []
                for pos in zip(*vals):
                    if all(isinstance(x, ast.AST) for x in pos):
                        column.append(self.au(list(pos)))
                    elif len({repr(x) for x in pos}) == 1:
                        column.append(copy.deepcopy(pos[0]))
                    else:
                        return self.var(nodes)
                setattr(new, field, column)
            elif len({repr(v) for v in vals}) == 1:
                setattr(new, field, copy.deepcopy(vals[0]))
            else:
                return self.var(nodes)
        return new


def _constants(node: ast.AST | None) -> set[str]:
    return {repr(n.value) for n in ast.walk(node) if isinstance(n, ast.Constant)} if node is not None else set()


def _anti_unify(items) -> tuple[list[PatternEdit], tuple[Hole, ...], list[list[str]]]:
    au = _AntiUnifier([c.names for _, c, _ in items])
    texts = []
    for pos in range(len(items[0][2])):
        pairs = [c.full[idx[pos]] for _, c, idx in items]
        au.shared = [_constants(b) & _constants(a) for b, a in pairs]
        sides = []
        for side in (0, 1):
            nodes = [p[side] for p in pairs]
            sides.append("" if nodes[0] is None else ast.unparse(au.au(nodes)))
        texts.append((items[0][1].texts[items[0][2][pos]][0], sides[0], sides[1]))
    edits, order = numbered(texts)
    holes = tuple(Hole(f"${n + 1}", _kind(au.bindings[i]), _distinct(au.bindings[i])) for n, i in enumerate(order))
    return edits, holes, [au.bindings[i] for i in order]


# --------------------------------------------------------------- conditions
def _conditions(items, refined: list[PatternEdit], holes: tuple[Hole, ...], bindings: list[list[str]]) -> tuple[Condition, ...]:
    """What every occurrence has in common, stated over the refined pattern's holes."""
    n = len(items)
    forms = "; ".join(f"`{e.before}`" for e in refined if e.before)
    out = []
    if forms:
        out.append(Condition("seen-form", f"the code has the form {forms}, as in all {n} occurrences",
                             f"the code does not have the form {forms}"))
    for h, texts in zip(holes, bindings):
        if h.kind != "expr":
            continue
        calls = [r for r in REDUCTIONS if all(r + "(" in t for t in texts)]
        if calls:
            out.append(Condition(f"hole-{h.name[1:]}-reduction",
                                 f"{h.name} is computed by a reduction ({', '.join(calls)}) in every occurrence",
                                 f"{h.name} is not computed by a reduction ({', '.join(calls)})"))
        if all("float32" in t for t in texts):
            out.append(Condition(f"hole-{h.name[1:]}-float32", f"{h.name} is computed in float32 in every occurrence",
                                 f"{h.name} is not computed in float32"))
    nestings = [c.edits[i].nesting for _, c, idx in items for i in idx if c.edits[i].kind != "insert"]
    if nestings and all(("for" in s or "while" in s) for s in nestings):
        out.append(Condition("inside-loop", "the edited code lies inside a loop in every occurrence",
                             "the code is not inside a loop"))
    if all(m.kernel_edit.jit for m, _, _ in items):
        out.append(Condition("in-jit-function", "every occurrence is in a @triton.jit function",
                             "the code is not in a @triton.jit function"))
    return tuple(out)
