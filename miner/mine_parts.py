"""Sharing one large file among ``skel mine``'s workers.

A file far larger than the rest would keep one worker busy while the others wait: with two
cores, one file of thousands of kernels takes as long as if there were one. Such a Triton file
is analysed in parts instead: part k of n profiles the k-th contiguous slice of the file's
kernels (``triton_frontend.profile_source(part=...)``; each part reads the whole module, the
profiles are those of the whole-file call), and the parts' results are joined in order, so the
file's profiles and findings are exactly those one worker would give.
"""
from __future__ import annotations

import math

MIN_PART_CHARS = 200_000  # below this a part's own read of the module costs more than it saves

Analysis = tuple[list, list, "str | None"]  # (profiles, findings, error): mine.analyze's result


def parts_for(size: int, language: str, total: int, jobs: int) -> int:
    """How many parts a file of ``size`` characters gets, ``total`` being all files' size."""
    if jobs < 2 or language != "triton":
        return 1
    share = max(total / jobs, MIN_PART_CHARS)  # a fair share of the work per worker
    return max(1, min(jobs, math.ceil(size / share) if size > share else 1))


def join(results: list[Analysis]) -> Analysis:
    """One file's analysis from its parts' (in part order)."""
    # A part with an error and nothing else could not be analysed (a syntax error: every part says
    # so; a worker that died): the file failed, and says why once.
    failed = next((r for r in results if r[2] and not r[0] and not r[1]), None)
    if failed is not None:
        return [], [], failed[2]
    profiles = [p for r in results for p in r[0]]
    findings = [f for r in results for f in r[1]]
    problems = [r[2] for r in results if r[2]]
    return profiles, findings, "; ".join(problems) or None
