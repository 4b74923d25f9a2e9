"""From many kernel edits to a few patterns with holes: abstraction, clustering, anti-unification.

1. *Core* of one edit: every subtree the old and new code share (an operand, the
   argument of the function that changed) becomes a hole, and so does every other
   local name; API names (``tl.sqrt``), operators and constants the edit introduces
   stay literal. ``b_q / tl.sqrt(tl.sum(b_q * b_q) + 1e-6)`` ->
   ``b_q * tl.rsqrt(...)`` has the core ``$1 / tl.sqrt($2)`` -> ``$1 * tl.rsqrt($2)``.
2. *Compound*: all edits one commit made to one function, holes shared between them
   (the ``qk_scale`` a statement defines is the same hole where it is used); repeated
   edits of one shape count once. Its key is the cluster.
3. *Clusters*: identical keys across commits, files and repositories. A single edit
   also forms its own cluster when it recurs inside different compounds; it is dropped
   when a compound explains exactly the same occurrences.
4. *Anti-unification* of the full (unabstracted) instances of a cluster gives the most
   specific pattern they share (``$1 / tl.sqrt(tl.sum($1 * $1) + $2)``): the
   candidate's refined pattern and the source of its inferred conditions.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import re
from dataclasses import dataclass

from skel.catalog.records import Condition, Edit, KernelEdit, MinedEdit

MIN_SUPPORT = 2  # occurrences in distinct (commit, kernel) pairs
# Variant mining (skel.miner.variants) stores its edits under pseudo-repositories with this prefix;
# one aligned pair is deliberate evidence on its own, so its edits need this many occurrences.
VARIANT_PREFIX = "variants:"
VARIANT_MIN_SUPPORT = 1
MAX_EDITS = 6  # a compound with more distinct edits is a refactor, not a skeleton
PERF_RE = re.compile(r"\b(speed\w*|fast\w*|perf\w*|optimi[sz]\w*|accelerat\w*|latency|throughput)\b"
                     r"|\d+(\.\d+)?\s?%|\b\d+(\.\d+)?x\b", re.IGNORECASE)
REDUCTIONS = ("tl.sum", "tl.max", "tl.min", "tl.reduce", "tl.cumsum", "tl.argmax", "tl.argmin")
_HOLE = "__hole_"


@dataclass(frozen=True)
class PatternEdit:
    kind: str  # replace | insert | delete
    before: str  # with holes $1, $2 ... ("" for insert)
    after: str

    def to_json(self) -> dict:
        return {"kind": self.kind, "before": self.before, "after": self.after}


@dataclass(frozen=True)
class Hole:
    name: str  # "$1"
    kind: str  # name | const | expr
    examples: tuple[str, ...]  # distinct bindings seen, in occurrence order (at most 4)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "examples": list(self.examples)}


@dataclass(frozen=True)
class Occurrence:
    repo: str
    commit: str
    path: str
    line: int
    kernel: str
    message: str  # first line of the commit message
    date: str

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Pattern:
    key: str
    edits: tuple[PatternEdit, ...]  # the core pattern (what changes; shared context as holes)
    holes: tuple[Hole, ...]
    refined: tuple[PatternEdit, ...]  # anti-unified over every occurrence
    refined_holes: tuple[Hole, ...]
    conditions: tuple[Condition, ...]
    occurrences: tuple[Occurrence, ...]
    kernels: int  # distinct (path, kernel)
    commits: int  # distinct commits
    perf_commits: int  # commits whose message speaks of speed
    score: float
    sources: tuple[str, ...] = ()  # sha256 of every file version it was distilled from (held-out check)

    @property
    def code(self) -> str:
        return candidate_code(self.key)

    def to_json(self) -> dict:
        """The candidate's content as the catalog stores it (``pattern_json``)."""
        return {
            "key": self.key,
            "edits": [e.to_json() for e in self.edits],
            "holes": [h.to_json() for h in self.holes],
            "refined": [e.to_json() for e in self.refined],
            "refined_holes": [h.to_json() for h in self.refined_holes],
            "conditions": [{"id": c.id, "holds": c.holds, "fails": c.fails} for c in self.conditions],
            "occurrences": [o.to_json() for o in self.occurrences],
            "kernels": self.kernels, "commits": self.commits, "perf_commits": self.perf_commits, "score": self.score,
            "sources": list(self.sources),
        }


def candidate_code(key: str) -> str:
    """A stable code for a pattern key: re-mining finds the same candidate again."""
    return "SKP" + hashlib.sha1(key.encode()).hexdigest()[:5].upper()


# ------------------------------------------------------------------ parsing
def parse_side(src: str, stmt: bool) -> ast.AST | None:
    if not src:
        return None
    return ast.parse(src).body[0] if stmt else ast.parse(src, mode="eval").body


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def _has_local(node: ast.AST, names: frozenset[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


# ------------------------------------------------------------------ core
class _Binder:
    """Hole keys shared by the edits of one compound; ``keys[i]`` names placeholder ``__hole_i``."""

    def __init__(self):
        self.keys: list[str] = []
        self.texts: list[str] = []

    def hole(self, key: str, text: str) -> ast.Name:
        if key not in self.keys:
            self.keys.append(key)
            self.texts.append(text)
        return ast.Name(f"{_HOLE}{self.keys.index(key)}", ast.Load())


def _key_of(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return "name:" + node.id
    return "expr:" + _dump(node)


def _abstract(node: ast.AST | None, shared: set[str], names: frozenset[str], binder: _Binder) -> ast.AST | None:
    if node is None:
        return None

    class T(ast.NodeTransformer):
        def visit(self, n):
            if n is not node and isinstance(n, ast.expr):
                d = _dump(n)
                if d in shared and (_has_local(n, names) or isinstance(n, ast.Constant)):
                    return binder.hole(_key_of(n), ast.unparse(n))
            if isinstance(n, ast.Name) and n.id in names:
                return binder.hole(_key_of(n), n.id)
            return self.generic_visit(n)

    return T().visit(copy.deepcopy(node))


def _subtree_dumps(node: ast.AST | None) -> set[str]:
    return {_dump(n) for n in ast.walk(node) if isinstance(n, ast.expr)} if node is not None else set()


def _render(node: ast.AST | None) -> str:
    return ast.unparse(node) if node is not None else ""


@dataclass
class _Compound:
    shapes: list[str]  # hole-agnostic "kind: before => after", sorted, distinct
    texts: list[tuple[str, str, str]]  # (kind, before, after) with __hole_i placeholders
    full: list[tuple[ast.AST | None, ast.AST | None]]  # the representative edits, unabstracted
    edits: list[Edit]  # the representative edits
    binder: _Binder
    names: frozenset[str]


def compound(ke: KernelEdit) -> _Compound:
    names = frozenset(ke.local_names)
    binder = _Binder()
    reps: dict[str, tuple] = {}
    for e in ke.edits:
        b, a = parse_side(e.before, e.stmt), parse_side(e.after, e.stmt)
        shared = _subtree_dumps(b) & _subtree_dumps(a)
        cb, ca = _abstract(b, shared, names, binder), _abstract(a, shared, names, binder)
        text = (e.kind, _render(cb), _render(ca))
        shape = _agnostic(f"{e.kind}: {text[1]} => {text[2]}")
        reps.setdefault(shape, (text, (b, a), e))
    order = sorted(reps)
    return _Compound(order, [reps[s][0] for s in order], [reps[s][1] for s in order],
                     [reps[s][2] for s in order], binder, names)


def _agnostic(text: str) -> str:
    return re.sub(_HOLE + r"\d+", "$", text)


def numbered(texts: list[tuple[str, str, str]]) -> tuple[list[PatternEdit], list[int]]:
    """Placeholders -> $1, $2 ... in order of first appearance; also the placeholder index of each $n."""
    order: list[int] = []

    def sub(m):
        i = int(m.group(1))
        if i not in order:
            order.append(i)
        return f"${order.index(i) + 1}"

    out = [PatternEdit(k, re.sub(_HOLE + r"(\d+)", sub, b), re.sub(_HOLE + r"(\d+)", sub, a)) for k, b, a in texts]
    return out, order


def compound_key(edits: list[PatternEdit]) -> str:
    return "\n".join(f"{e.kind}: {e.before} => {e.after}" for e in edits)


def meaningful(edits: list[PatternEdit]) -> bool:
    """Some API name, keyword or constant changes; a pure reshuffle of holes is not a skeleton."""
    sides = [re.sub(r"\$\d+", "", e.before + " " + e.after) for e in edits]
    return any(re.search(r"[A-Za-z0-9]", s) for s in sides) and any(e.before != e.after for e in edits)
