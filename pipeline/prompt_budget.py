"""Keep an agent brief under a token budget by dropping its least useful parts first.

Tokens are ``estimate_tokens`` of the rendered Markdown: ceil(characters / 4). Parts go in
this order, each step taken only while the brief is still over budget (lower-ranked means
every applicable skeleton but the first, taken from the last one up):

 1. the list of skeletons that do not apply
 2. provenance beyond the first entry of each skeleton
 3. examples of lower-ranked skeletons
 4. resource constraints of lower-ranked skeletons
 5. transformation methods of lower-ranked skeletons
 6. the kernel profile's detail lines (kernel names and lines stay)
 7. measurements beyond the first
 8. the top skeleton's example, then its constraints
 9. all provenance
10. the top skeleton's method
11. commands of lower-ranked skeletons (a one-line note says how to form them)
12. evidence lines
13. the measurements

Never dropped: the target, kernel names, each applicable skeleton's code, name and its
conditions with the lines that make them hold, and the top skeleton's commands. When even
that does not fit, ``BudgetError`` says how many tokens it needs (the CLI exits 1).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator

from skel.pipeline.prompt import ApplicableSkeleton, Brief, estimate_tokens, render_markdown

Step = tuple[str, Callable[[Brief], Brief]]


class BudgetError(Exception):
    """The smallest brief (names and conditions) does not fit; ``brief`` is that smallest brief."""

    def __init__(self, budget: int, needed: int, brief: Brief):
        self.budget, self.needed, self.brief = budget, needed, brief
        n = len(brief.applicable)
        super().__init__(
            f"--budget {budget}: the smallest brief (target, kernel names, the {n} applicable skeleton(s) "
            f"with their conditions, the top skeleton's commands) needs {needed} tokens "
            f"(ceil(chars / 4)); raise --budget to at least {needed}"
        )


def fit_budget(brief: Brief, budget: int | None) -> Brief:
    """``brief`` unchanged when it fits (or budget is None); else a trimmed copy that fits."""
    if budget is None:
        return brief
    if budget < 1:
        raise ValueError(f"--budget must be a positive number of tokens, got {budget}")
    current = replace(brief, budget=budget)
    if _tokens(current) <= budget:
        return current
    for label, step in _steps(brief):
        smaller = step(current)
        if smaller == current:
            continue  # nothing of that kind left to drop
        current = replace(smaller, trimmed=current.trimmed + (label,))
        if _tokens(current) <= budget:
            return current
    # The footer names the budget, so the size depends on its digits: find the budget that fits itself.
    needed = _tokens(current)
    while _tokens(replace(current, budget=needed)) > needed:
        needed = _tokens(replace(current, budget=needed))
    raise BudgetError(budget, needed, replace(current, budget=needed))


def _tokens(brief: Brief) -> int:
    return estimate_tokens(render_markdown(brief))


def _on(rank: int, **changes) -> Callable[[Brief], Brief]:
    def apply(b: Brief) -> Brief:
        return replace(b, applicable=tuple(replace(s, **changes) if s.rank == rank else s for s in b.applicable))
    return apply


def _on_all(fn: Callable[[ApplicableSkeleton], ApplicableSkeleton]) -> Callable[[Brief], Brief]:
    return lambda b: replace(b, applicable=tuple(fn(s) for s in b.applicable))


def _steps(brief: Brief) -> Iterator[Step]:
    lower = [s for s in reversed(brief.applicable) if s.rank > 1]
    top = [s for s in brief.applicable if s.rank == 1]
    yield "not-applicable list", lambda b: replace(b, not_applicable=())
    yield "provenance beyond the first", _on_all(lambda s: replace(s, provenance=s.provenance[:1]))
    for field, label in (("example", "example"), ("constraints", "constraints"), ("method", "method")):
        empty = None if field != "constraints" else ()
        for s in lower:
            yield f"{label} of {s.code}", _on(s.rank, **{field: empty})
    yield "profile details", lambda b: replace(b, kernels=tuple(replace(k, detailed=False) for k in b.kernels))
    yield "measurements beyond the first", lambda b: replace(b, measurements=b.measurements[:1])
    for s in top:
        yield f"example of {s.code}", _on(1, example=None)
        yield f"constraints of {s.code}", _on(1, constraints=())
    yield "provenance", _on_all(lambda s: replace(s, provenance=()))
    for s in top:
        yield f"method of {s.code}", _on(1, method=None)
    for s in lower:
        yield f"commands of {s.code}", _on(s.rank, commands=())
    yield "evidence", _on_all(lambda s: replace(s, evidence=None))
    yield "measurements", lambda b: replace(b, show_measurements=False, measurements=())
