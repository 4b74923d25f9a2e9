"""A rule made of ``[[pattern]]`` tables in ``skeleton.toml``, run by the pattern engine.

    [[pattern]]
    before = "$1 / tl.sqrt($2)"          # holes $1, $2 ... match any subexpression
    after = "$1 * tl.rsqrt($2)"
    safety = "unsafe"                    # this edit's safety (default unsafe: rounding may change)
    where = { "$2" = { calls = ["sum"] } }   # hole constraints (see rewriter/pattern.py)

    [[pattern]]
    insert = "$3 = $2 * 1.4426950408889634"  # a statement defining a fresh variable before the match

Detection and rewrite are one engine call, so they cannot disagree: an opportunity is a line
of a kernel where the file's pattern edits apply (together, or not at all). ``skeleton.toml``
may omit ``[[conditions]]``: the rule's one condition is ``matches-pattern``.
"""
from __future__ import annotations

from skel.catalog.records import Condition
from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.rewriter.base import RewriteOptions
from skel.rewriter.pattern import CONSTRAINTS, apply_pattern, pattern_problem
from skel.skeletons.rule import SAFETIES, Rule

MATCHES = "matches-pattern"


class PatternProblem(Exception):
    def __init__(self, index: int, message: str):
        self.index, self.message = index, message
        super().__init__(f"pattern[{index}]: {message}")


def _edits(patterns) -> tuple[list[dict], dict[str, dict], set[str]]:
    """The engine's edit list, the hole constraints and the safeties, checked; PatternProblem otherwise."""
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, dict) for p in patterns):
        raise PatternProblem(0, "must be a non-empty array of tables ([[pattern]])")
    edits, where, safeties = [], {}, set()
    for i, p in enumerate(patterns):
        unknown = set(p) - {"before", "after", "insert", "safety", "where"}
        if unknown:
            raise PatternProblem(i, f"unknown field(s) {', '.join(sorted(unknown))} (allowed: before, after, insert, safety, where)")
        safety = p.get("safety", "unsafe")
        if safety not in SAFETIES:
            raise PatternProblem(i, f"safety {safety!r} is not one of {', '.join(SAFETIES)}")
        safeties.add(safety)
        if "insert" in p:
            if "before" in p or "after" in p or not isinstance(p["insert"], str):
                raise PatternProblem(i, "an insert table has `insert = \"$N = ...\"` and nothing to replace")
            edits.append({"kind": "insert", "before": "", "after": p["insert"]})
        elif isinstance(p.get("before"), str) and isinstance(p.get("after"), str):
            edits.append({"kind": "replace", "before": p["before"], "after": p["after"]})
        else:
            raise PatternProblem(i, "needs `before` and `after` strings (or `insert`)")
        for hole, rule in (p.get("where") or {}).items():
            if not isinstance(rule, dict) or set(rule) - set(CONSTRAINTS):
                raise PatternProblem(i, f"where {hole!r}: a table of {', '.join(CONSTRAINTS)}")
            where[hole] = rule
    problem = pattern_problem(edits)
    if problem:
        raise PatternProblem(0, problem)
    return edits, where, safeties


def pattern_rule(code: str, patterns, conditions: tuple[Condition, ...]) -> type[Rule]:
    """A ``Rule`` subclass for ``code`` whose conditions and rewrite are the pattern engine's."""
    edits, where, safeties = _edits(patterns)
    if conditions and {c.id for c in conditions} != {MATCHES}:
        raise PatternProblem(0, f"a pattern rule has one condition, {MATCHES!r}; others need a rule.py")
    summary = "; ".join(f"`{e['before']}` -> `{e['after']}`" for e in edits if e["kind"] == "replace")

    def rewrite(source: str, options: RewriteOptions = RewriteOptions()):
        r = apply_pattern(code, source, edits, [{"id": "in-jit-function"}], where=where, safety=safety)
        return [r]

    def matches(ctx: Ctx) -> Check:
        lines = _sites(ctx)
        if not lines:
            return no(f"no expression of {ctx.p.name} matches {summary}")
        return yes("; ".join(f"line {ln}" for ln in lines[:3]) + f": {summary}", [Hit.at(ln) for ln in lines])

    def _sites(ctx: Ctx) -> list[int]:
        key = f"pattern:{code}"
        if key not in ctx.file.cache:
            r = rewrite(ctx.source)[0]
            ctx.file.cache[key] = sorted({c.line for c in r.changes}) if r.applied else []
        return [ln for ln in ctx.file.cache[key] if ctx.p.line <= ln <= ctx.p.end_line]

    safety = "unsafe" if "unsafe" in safeties else "safe"

    class PatternRule(Rule):
        __doc__ = f"{code}: {summary}"
        SAFETY = safety
        KIND = "pattern"
        LANGUAGES = ("triton",)
        CONDITIONS = {MATCHES: matches}

        def sites(self, ctx):
            return [Hit.at(ln) for ln in _sites(ctx)]

        @staticmethod
        def default_conditions() -> tuple[Condition, ...]:
            return (Condition(MATCHES, f"an expression of the kernel matches the pattern ({summary})",
                              "no expression of the kernel matches the pattern"),)

    PatternRule.rewrite = staticmethod(rewrite)
    PatternRule.code = code
    PatternRule.__name__ = PatternRule.__qualname__ = f"PatternRule_{code}"
    return PatternRule
