"""``skel match TARGET``: which skeletons apply to each kernel of one file, and why not the others.

A skeleton applies to a kernel when every one of its conditions holds (the
detectors evaluate them on the kernel's profile). For a skeleton that does not
apply, the reason is its first failing condition: the library's ``fails`` text
followed by what the detector saw ("no division whose denominator is a square
root: no division in the kernel").
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from skel.catalog.records import reported
from skel.errors import UsageError
from skel.miner.sourcefile import read_source
from skel.miner.walk import language_of


@dataclass(frozen=True)
class Applicable:
    skeleton: str
    conditions: tuple[tuple[str, str], ...]  # (condition id, what the detector saw)
    sites: tuple[int, ...] = ()  # lines an opportunity points at (empty: applies, site not singled out)
    used_at: tuple[int, ...] = ()  # lines where the technique is already applied
    rewrite: bool = True  # False: the rule has no automatic rewrite (apply its method by hand)

    def to_json(self) -> dict:
        return {"skeleton": self.skeleton,
                "conditions": [{"id": i, "detail": d} for i, d in self.conditions],
                "sites": list(self.sites), "used_at": list(self.used_at),
                "rewrite": "always" if self.rewrite else "never"}


@dataclass(frozen=True)
class NotApplicable:
    skeleton: str
    condition: str  # id of the first failing condition
    reason: str

    def to_json(self) -> dict:
        return {"skeleton": self.skeleton, "reason": self.reason, "condition": self.condition}


@dataclass(frozen=True)
class KernelMatch:
    name: str
    line: int
    language: str
    applicable: tuple[Applicable, ...]
    not_applicable: tuple[NotApplicable, ...]

    def to_json(self) -> dict:
        return {"name": self.name, "line": self.line, "language": self.language,
                "applicable": [a.to_json() for a in self.applicable],
                "not_applicable": [n.to_json() for n in self.not_applicable]}


@dataclass(frozen=True)
class MatchReport:
    path: str
    kernels: tuple[KernelMatch, ...]

    @property
    def any_applicable(self) -> bool:
        return any(k.applicable for k in self.kernels)

    def to_json(self) -> dict:
        return {"kernels": [k.to_json() for k in self.kernels]}


def read_target(path: str, max_bytes: int | None = None) -> tuple[str, str]:
    """(text, language) of a target file; UsageError naming the file and the problem otherwise.

    Read by ``skel.miner.sourcefile``'s rules: regular files only, at most ``max_bytes``
    (default ``SKEL_MAX_BYTES`` or 5 MB), no NUL byte, Python decoded per PEP 263.
    """
    if not os.path.lexists(path):
        raise UsageError(f"{path}: no such file")
    if os.path.isdir(path):
        raise UsageError(f"{path}: is a directory; skel match takes one kernel file (use skel mine for folders)")
    language = language_of(path)
    if language is None:
        raise UsageError(f"{path}: not a kernel source (expected .py, or .cu/.cuh/.h/.hpp/.cpp for CUDA)")
    return read_source(path, language, max_bytes).text, language


def profile_target(path: str, text: str, language: str) -> list:
    from skel.miner.gc_pause import gc_paused
    from skel.miner.mine import _frontend

    try:
        with gc_paused():
            profiles = _frontend(language)(text, path)
    except SyntaxError as exc:
        raise UsageError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
    except ValueError as exc:  # the CUDA frontend's "path:line: why"
        raise UsageError(str(exc)) from None
    except RecursionError:
        raise UsageError(f"{path}: too deeply nested for the parser (RecursionError)") from None
    except Exception as exc:  # a frontend bug: name the file, as skel mine does, rather than a traceback
        raise UsageError(f"{path}: {language} frontend failed: {type(exc).__name__}: {exc}") from None
    return reported(profiles)


def match_file(path: str, skeleton: str | None = None, library=None, max_bytes: int | None = None) -> MatchReport:
    """Evaluate every skeleton of ``library`` (default: the shipped one), or only ``skeleton``."""
    from skel.skeletons.library import load_library

    lib = library if library is not None else load_library()
    skeletons = list(lib)
    if skeleton is not None:
        sk = lib.get(skeleton.upper())
        if sk is None:
            known = ", ".join(s.code for s in skeletons)
            raise UsageError(f"--skeleton {skeleton}: no such skeleton in {lib.root} (known: {known})")
        skeletons = [sk]
    text, language = read_target(path, max_bytes)
    profiles = profile_target(path, text, language)
    return MatchReport(path, tuple(match_kernel(p, text, skeletons) for p in profiles))


def match_kernel(profile, text: str, skeletons) -> KernelMatch:
    from skel.miner import detect
    from skel.miner.detectors.base import Ctx

    ctx = Ctx(profile, text)
    try:
        findings = detect.run_detectors(profile, text, library=skeletons)
    except Exception:  # sites are a convenience; the verdicts below still stand
        findings = []
    applicable, not_applicable = [], []
    for sk in skeletons:
        try:
            results = detect.evaluate(sk, profile, text, ctx, confirm=True)
        except KeyError as exc:
            not_applicable.append(NotApplicable(sk.code, "detector", f"no detector implements {sk.code} yet ({exc})"))
            continue
        failing = next((r for r in results if not r.holds), None)
        if failing is None:
            mine_ = [f for f in findings if f.skeleton == sk.code]
            applicable.append(Applicable(
                sk.code, tuple((r.id, r.detail) for r in results),
                tuple(sorted({f.line for f in mine_ if f.kind == "opportunity"})),
                tuple(sorted({f.line for f in mine_ if f.kind == "instance"})), sk.rule.rewrite is not None))
        else:
            words = next((c.fails for c in sk.conditions if c.id == failing.id), "")
            detail = failing.detail.strip()
            if not words or not detail or detail.lower() in words.lower() or words.lower() in detail.lower():
                reason = detail if len(detail) >= len(words) else words  # one says it all; don't repeat it
            else:
                reason = f"{words}: {detail}"
            not_applicable.append(NotApplicable(sk.code, failing.id, reason))
    return KernelMatch(profile.name, profile.line, profile.language, tuple(applicable), tuple(not_applicable))
