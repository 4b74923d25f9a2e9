"""``skel match TARGET``: which skeletons apply to each kernel of one file, and why not the others.

A skeleton applies to a kernel when every one of its conditions holds (the
detectors evaluate them on the kernel's profile). For a skeleton that does not
apply, the reason is its first failing condition: the library's ``fails`` text
followed by what the detector saw ("no division whose denominator is a square
root: no division in the kernel").
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace

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
class Suppressed:
    """A skeleton that applies but a suppression comment silences (``# skel: ignore[SK001] reason``)."""
    skeleton: str
    line: int  # the comment's line
    reason: str
    sites: tuple[int, ...] = ()

    def to_json(self) -> dict:
        return {"skeleton": self.skeleton, "line": self.line, "reason": self.reason, "sites": list(self.sites)}


@dataclass(frozen=True)
class KernelMatch:
    name: str
    line: int
    language: str
    applicable: tuple[Applicable, ...]
    not_applicable: tuple[NotApplicable, ...]
    suppressed: tuple[Suppressed, ...] = ()

    def to_json(self) -> dict:
        return {"name": self.name, "line": self.line, "language": self.language,
                "applicable": [a.to_json() for a in self.applicable],
                "not_applicable": [n.to_json() for n in self.not_applicable],
                "suppressed": [s.to_json() for s in self.suppressed]}


@dataclass(frozen=True)
class MatchReport:
    path: str
    kernels: tuple[KernelMatch, ...]
    notes: tuple[str, ...] = ()  # "LINE: problem" for suppression comments that name no skeleton

    @property
    def any_applicable(self) -> bool:
        return any(k.applicable for k in self.kernels)

    def to_json(self) -> dict:
        return {"path": self.path, "kernels": [{"path": self.path, **k.to_json()} for k in self.kernels],
                "notes": list(self.notes)}


@dataclass(frozen=True)
class MatchError:
    path: str
    reason: str
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}" if self.line else f"{self.path}: {self.reason}"

    def to_json(self) -> dict:
        return {"path": self.path, "line": self.line, "error": self.reason}


@dataclass(frozen=True)
class MatchRun:
    """``skel match PATH...``: one report per kernel file, the files that could not be matched, and
    the skeletons that were evaluated (after --skeleton/--select/--ignore and [tool.skel])."""
    reports: tuple[MatchReport, ...]
    errors: tuple[MatchError, ...]
    skeletons: tuple = ()  # catalog.library.Skeleton, in code order

    @property
    def any_applicable(self) -> bool:
        return any(r.any_applicable for r in self.reports)

    def to_json(self) -> dict:
        return {"files": [r.path for r in self.reports],
                "kernels": [k for r in self.reports for k in r.to_json()["kernels"]],
                "errors": [e.to_json() for e in self.errors],
                "notes": [f"{r.path}:{n}" for r in self.reports for n in r.notes],
                "skeletons": [s.code for s in self.skeletons]}


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


def select_skeletons(lib, selection=None) -> list:
    """The library's skeletons that ``selection`` (a ``catalog.selection.Selection``) keeps."""
    skeletons = list(lib)
    if selection is None:
        return skeletons
    keep = set(selection.apply([s.code for s in skeletons], where=str(lib.root)))
    return [s for s in skeletons if s.code in keep]


def match_file(path: str, skeleton: str | None = None, library=None, max_bytes: int | None = None,
               selection=None, suppress: bool = True, display: str | None = None) -> MatchReport:
    """Evaluate every skeleton of ``library`` (default: the shipped one), or only ``skeleton``, or those
    ``selection`` keeps; applicable skeletons silenced by a suppression comment move to ``suppressed``
    (``suppress=False`` reports them as applicable)."""
    from skel.skeletons.library import load_library
    from skel.catalog.selection import Selection

    lib = library if library is not None else load_library()
    if skeleton is not None:
        selection = Selection(skeletons=(skeleton,), select=getattr(selection, "select", ()),
                              ignore=getattr(selection, "ignore", ()))
    skeletons = select_skeletons(lib, selection)
    text, language = read_target(path, max_bytes)
    return _match_text(display or path, path, text, language, skeletons, suppress)


def _match_text(display: str, path: str, text: str, language: str, skeletons, suppress: bool) -> MatchReport:
    from skel.miner import suppress as sup

    profiles = profile_target(path, text, language)
    comments = sup.parse(text) if suppress else sup.Suppressions()
    spans = sup.headers(text, language) if comments else {}
    kernels = tuple(match_kernel(p, text, skeletons, comments, sup.header_span(spans, p.line, language))
                    for p in profiles)
    return MatchReport(display, kernels, tuple(f"{line}: {why}" for line, why in comments.problems))


POOL_MIN_FILES = 8  # below this a process pool costs more than it saves


def match_paths(paths: list[str], library=None, selection=None, max_bytes: int | None = None,
                config=None, suppress: bool = True, on_file=None, jobs: int | None = None) -> MatchRun:
    """``skel match PATH...``: every kernel file named or found under the folders named. A file named
    explicitly that cannot be matched is an error; under a folder, files without kernel markers
    (``@triton.jit``, ``__global__``) are passed over and the rest that fail are errors. One bad file
    never stops the run. ``config`` (a ``ProjectConfig``) adds its ``exclude`` paths. With ``jobs`` > 1
    (default: every core) and enough files, files are matched in forked worker processes (the library
    is inherited, never re-loaded); the reports come back in path order either way."""
    from skel.skeletons.library import load_library
    from skel.miner.walk import collect

    lib = library if library is not None else load_library()
    skeletons = select_skeletons(lib, selection)
    errors: list[MatchError] = []
    cands, walk_errors = collect(list(paths))
    errors.extend(MatchError(_display(e.path), e.error) for e in walk_errors)
    cands = [c for c in cands if config is None or c.explicit or not config.excluded(c.path)]
    jobs = max(1, jobs or os.cpu_count() or 1)
    work = [(c.path, _display(c.path), c.language, c.explicit) for c in cands]
    global _WORKER_STATE
    _WORKER_STATE = (skeletons, max_bytes, suppress)
    outcomes = list(_match_many(work, jobs, on_file))
    reports = [o for o in outcomes if isinstance(o, MatchReport)]
    errors.extend(o for o in outcomes if isinstance(o, MatchError))
    return MatchRun(tuple(reports), tuple(errors), tuple(skeletons))


_WORKER_STATE: tuple = ((), None, True)  # (skeletons, max_bytes, suppress): set before the pool forks


def _match_one(item: tuple[str, str, str, bool]):
    """One file: its ``MatchReport``, a ``MatchError``, or None (passed over: no kernel markers)."""
    path, shown, language, explicit = item
    skeletons, max_bytes, suppress = _WORKER_STATE
    try:
        if not explicit and not _has_markers(path, language):
            return None
        text = read_source(path, language, max_bytes).text
        if not all(m.decode() in text for m in _MARKERS[language]):
            return MatchReport(shown, ())  # named, readable, no kernel in it: nothing to parse
        return _match_text(shown, path, text, language, skeletons, suppress)
    except UsageError as exc:
        return _error(shown, str(exc), path)


def _match_many(work: list, jobs: int, on_file=None):
    """Each file's outcome, in the order of ``work``; a forked pool when there is enough of it."""
    total = len(work)
    if jobs == 1 or total < POOL_MIN_FILES or not hasattr(os, "fork"):
        for i, item in enumerate(work):
            if on_file is not None:
                on_file(i, total, item[1])
            yield _match_one(item)
        if on_file is not None:
            on_file(total, total, "")
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from skel.miner import detectors  # noqa: F401  (imported before forking: workers inherit it)
    from skel.procs import die_with_parent

    pool = ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=multiprocessing.get_context("fork"),
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        for i, outcome in enumerate(pool.map(_match_one, work, chunksize=1)):
            if on_file is not None:
                on_file(i + 1, total, work[i][1])
            yield outcome
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


_MARKERS = {"triton": (b"triton", b"jit"), "cuda": (b"__global__",)}


def _has_markers(path: str, language: str) -> bool:
    """The text prefilter ``skel mine`` uses: a file without these bytes holds no kernel."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64 * 1024 * 1024)
    except OSError:
        return True  # let the reader say why it cannot be read
    return all(m in head for m in _MARKERS[language])


def _display(path: str) -> str:
    """A path as a linter prints it: relative to the working directory when under it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _error(shown: str, message: str, path: str) -> MatchError:
    """``PATH[:LINE]: reason`` (a UsageError's text) as a ``MatchError`` shown under ``shown``."""
    for p in (path, os.path.relpath(path)):
        if message.startswith(p + ":"):
            rest = message[len(p) + 1:]
            line, colon, reason = rest.partition(":")
            if colon and line.strip().isdigit():
                return MatchError(shown, reason.strip(), int(line))
            return MatchError(shown, rest.strip())
    return MatchError(shown, message)


def match_kernel(profile, text: str, skeletons, suppressions=None, header: tuple[int, int] | None = None
                 ) -> KernelMatch:
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
    suppressed = []
    if suppressions:
        kept = []
        for a in applicable:
            hit = suppressions.find(a.skeleton, a.sites, header or (profile.line, profile.line))
            if hit is not None:
                suppressed.append(Suppressed(a.skeleton, hit.line, hit.reason, a.sites))
                continue
            left = suppressions.uncovered(a.skeleton, a.sites)
            by_comment: dict = {}
            for site in a.sites:
                if site not in left:
                    s = suppressions.find(a.skeleton, (site,))
                    by_comment.setdefault(s, []).append(site)
            suppressed.extend(Suppressed(a.skeleton, s.line, s.reason, tuple(sites)) for s, sites in by_comment.items())
            kept.append(a if left == a.sites else replace(a, sites=left))
        applicable = kept
    return KernelMatch(profile.name, profile.line, profile.language, tuple(applicable), tuple(not_applicable),
                       tuple(suppressed))
