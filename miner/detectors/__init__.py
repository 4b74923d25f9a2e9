"""Skeleton detectors: where each skeleton is used (instance) and where it could be (opportunity).

    run_detectors(profile, source_text) -> list[Finding]
    evaluate(skeleton, profile, source_text) -> list[ConditionResult]

One module per skeleton (``sk001_rsqrt.py`` ...), each with ``CODE``, ``CONDITIONS``
(condition id -> predicate, ids exactly as in the skeleton's ``[[conditions]]`` table),
``instances`` and ``candidates`` (see ``base``). An opportunity is reported only when every
condition of the skeleton holds for the kernel, at the sites ``candidates`` names; a kernel
that already uses the technique at a site is not also an opportunity there.
"""
from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType
from typing import Any

from skel.miner.detectors.base import Check, ConditionResult, Ctx, Hit
from skel.miner.profile import KernelProfile

__all__ = ["ConditionResult", "DETECTORS", "evaluate", "run_detectors", "detector_for"]

# Every module of this package named skNNN_<what>.py is a detector, keyed by its CODE.
DETECTORS: dict[str, ModuleType] = {
    m.CODE: m
    for m in (importlib.import_module(f"{__name__}.{info.name}")
              for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name)
              if re.fullmatch(r"sk\d{3}_\w+", info.name))
}


def detector_for(code: str) -> ModuleType:
    try:
        return DETECTORS[code.upper()]
    except KeyError:
        raise KeyError(f"no detector for skeleton {code!r} (known: {', '.join(DETECTORS)})") from None


def _code_of(skeleton: Any) -> str:
    return skeleton if isinstance(skeleton, str) else skeleton.code


def _condition_ids(skeleton: Any, module: ModuleType) -> list[str]:
    """The skeleton's own condition ids when a library Skeleton is given, else the detector's."""
    if isinstance(skeleton, str):
        return list(module.CONDITIONS)
    return [c.id for c in skeleton.conditions]


def _check(module: ModuleType, cond_id: str, ctx: Ctx) -> Check:
    pred = module.CONDITIONS.get(cond_id)
    if pred is None:
        raise KeyError(f"{module.CODE}: condition {cond_id!r} has no implementation in {module.__name__}")
    key = f"{module.CODE}:{cond_id}"
    if key not in ctx.cache:
        ctx.cache[key] = pred(ctx)
    return ctx.cache[key]


def _applies_to(module: ModuleType, profile: KernelProfile) -> bool:
    return profile.language in getattr(module, "LANGUAGES", ("triton", "cuda"))


def evaluate(skeleton: Any, profile: KernelProfile, source_text: str, ctx: Ctx | None = None) -> list[ConditionResult]:
    """Every condition of ``skeleton`` (a code or a library Skeleton) on one kernel, in order.

    A skeleton whose detector does not cover the kernel's language reports one failing
    pseudo-condition ``language`` so that the reason is shown rather than silence.
    """
    module = detector_for(_code_of(skeleton))
    ctx = ctx or Ctx(profile, source_text)
    if not _applies_to(module, profile):
        langs = ", ".join(getattr(module, "LANGUAGES", ()))
        return [ConditionResult("language", False, f"{module.CODE} targets {langs}, not {profile.language}")]
    return [_check(module, cid, ctx).result(cid) for cid in _condition_ids(skeleton, module)]


def _finding(code: str, kind: str, profile: KernelProfile, hit: Hit):
    from skel.catalog.store import Finding  # the store owns the record type

    return Finding(code, kind, profile.path, hit.line, hit.end_line, profile.name, hit.params)


def detect(module: ModuleType, ctx: Ctx) -> tuple[list[Hit], list[Hit]]:
    """(instances, opportunities) of one skeleton on one kernel."""
    if not _applies_to(module, ctx.p):
        return [], []
    instances = module.instances(ctx)
    if not all(_check(module, cid, ctx).holds for cid in module.CONDITIONS):
        return instances, []
    used = {h.line for h in instances}
    return instances, [h for h in module.candidates(ctx) if h.line not in used]


def run_detectors(profile: KernelProfile, source_text: str, codes: list[str] | None = None) -> list:
    """All findings of every detector (or of ``codes``) on one kernel, sorted by line and code."""
    ctx = Ctx(profile, source_text)
    out = []
    for code, module in DETECTORS.items():
        if codes is not None and code not in codes:
            continue
        instances, opportunities = detect(module, ctx)
        out += [_finding(code, "instance", profile, h) for h in instances]
        out += [_finding(code, "opportunity", profile, h) for h in opportunities]
    out.sort(key=lambda f: (f.line, f.skeleton, f.kind))
    return out
