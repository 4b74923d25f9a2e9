"""Running the library's skeleton rules on kernel profiles: where each skeleton is used (instance)
and where it could be (opportunity).

    run_detectors(profile, source_text, codes=None, library=None) -> list[Finding]
    evaluate(skeleton, profile, source_text, ctx=None) -> list[ConditionResult]

The rules themselves live in the skeleton folders (``skeletons/SKnnn-*/rule.py``, or
``[[pattern]]`` tables), found by the library loader; what they share is ``skel.miner.detectors``
(``base``: ``Ctx``, ``Check``, ``Hit``; ``helpers``, ``text``). This module runs them, so it sits above
them (the layers: tests/test_layers.py) and loads the shipped library when none is given. An
opportunity is reported only when every condition of the skeleton holds for the kernel, at the sites the rule names; a
kernel that already uses the technique at a site is not also an opportunity there.
"""
from __future__ import annotations

from typing import Any

from skel.miner.detectors.base import ConditionResult, Ctx, Hit
from skel.catalog.records import Finding, KernelProfile

__all__ = ["ConditionResult", "evaluate", "run_detectors", "rule_for"]


def _library(library=None):
    if library is not None:
        return library
    from skel.skeletons.library import load_library

    return load_library()


def rule_for(skeleton: Any, library=None):
    """The Rule instance of ``skeleton`` (a code, or a library Skeleton); KeyError naming the known codes."""
    if not isinstance(skeleton, str):
        return skeleton.rule()
    lib = _library(library)
    sk = lib.get(skeleton)
    if sk is None:
        raise KeyError(f"no rule for skeleton {skeleton!r} (known: {', '.join(s.code for s in lib)})")
    return sk.rule()


def evaluate(skeleton: Any, profile: KernelProfile, source_text: str, ctx: Ctx | None = None,
             library=None, confirm: bool = False) -> list[ConditionResult]:
    """Every condition of ``skeleton`` (a code or a library Skeleton) on one kernel, in the library's order.

    A skeleton whose rule does not cover the kernel's language reports one failing
    pseudo-condition ``language`` so that the reason is shown rather than silence. ``confirm``:
    see ``Rule.evaluate`` (a rewrite that produces nothing adds ``rewrite-applies``).
    """
    rule = rule_for(skeleton, library)
    ids = None if isinstance(skeleton, str) else tuple(c.id for c in skeleton.conditions)
    return list(rule.evaluate(ctx or Ctx(profile, source_text), ids, confirm))


def _finding(code: str, kind: str, profile: KernelProfile, hit: Hit):
    return Finding(code, kind, profile.path, hit.line, hit.end_line, profile.name, hit.params)


def run_detectors(profile: KernelProfile, source_text: str, codes: list[str] | None = None, library=None) -> list:
    """All findings of every rule (or of ``codes``) on one kernel, sorted by line and code."""
    ctx = Ctx(profile, source_text)
    out = []
    for sk in _library(library):
        if codes is not None and sk.code not in codes:
            continue
        found = sk.rule().detect(ctx)
        out += [_finding(sk.code, "instance", profile, h) for h in found.instances]
        out += [_finding(sk.code, "opportunity", profile, h) for h in found.opportunities]
    out.sort(key=lambda f: (f.line, f.skeleton, f.kind))
    return out
