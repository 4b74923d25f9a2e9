"""Frozen dataclasses that cross the catalog boundary (re-exported by ``skel.catalog.store``).

The miner produces ``SourceRecord`` and ``Finding``; validation produces
``ValidationRun``; the catalog answers with ``Evidence`` and ``Stats``. Each
has ``to_json()``; JSON is only a rendering of them.

Key/value fields (``Finding.params``, ``ValidationRun.extra``) are tuples of
``(key, value)`` pairs with JSON values; a dict given there is turned into
pairs and lists into tuples at construction, so records stay hashable and
compare equal after a round trip through the catalog.
"""
from __future__ import annotations

import hashlib
import re
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from skel.catalog.library import CODE_RE

# Validation runs may also judge preview candidates mined from history (SKP + 5 hex digits).
RUN_CODE_RE = re.compile(r"^(SK\d{3}|SKP[0-9A-F]{5})$")

FINDING_KINDS = ("instance", "opportunity")


class RecordError(ValueError):
    """A record handed to the catalog is malformed (a programming error in the caller)."""


@dataclass(frozen=True)
class SourceRecord:
    """One mined file. ``error`` is set when it failed to read or parse (then it has no kernels)."""

    path: str
    content_hash: str
    repo: str = ""
    mtime: float | None = None
    size: int | None = None
    mined_at: str = ""  # ISO 8601 UTC; the catalog fills it in when empty
    error: str | None = None

    def to_json(self) -> dict:
        return {
            "path": self.path, "content_hash": self.content_hash, "repo": self.repo, "mtime": self.mtime,
            "size": self.size, "mined_at": self.mined_at, "error": self.error,
        }


@dataclass(frozen=True)
class Finding:
    """A skeleton seen in a kernel: an ``instance`` (already applied) or an ``opportunity`` (could apply)."""

    skeleton: str
    kind: str
    path: str
    line: int
    end_line: int
    kernel: str
    params: tuple[tuple[str, object], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "params", _pairs(self.params))

    def to_json(self) -> dict:
        return {
            "skeleton": self.skeleton, "kind": self.kind, "path": self.path, "line": self.line,
            "end_line": self.end_line, "kernel": self.kernel, "params": _plain(dict(self.params)),
        }


@dataclass(frozen=True)
class ValidationRun:
    """One gate verdict for a rewrite (one or several skeletons) of one kernel at one shape and dtype.

    ``kernel`` names the target (a kernel name or a ``kernels/`` target such as "kda_decode").

    ``median``/``ci_low``/``ci_high`` are None when nothing was measured (CPU, numerics failed):
    a number is never guessed. ``id`` is assigned by the catalog.
    """

    skeletons: tuple[str, ...]
    kernel: str
    shape: str
    dtype: str
    metric: str
    verdict: str
    median: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    unit: str = ""
    gpu: str = ""
    torch_version: str = ""
    triton_version: str = ""
    source_hash: str = ""
    reason: str = ""
    created_at: str = ""  # ISO 8601 UTC; the catalog fills it in when empty
    extra: tuple[tuple[str, object], ...] = ()
    id: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "extra", _pairs(self.extra))
        object.__setattr__(self, "skeletons", tuple(self.skeletons))

    def to_json(self) -> dict:
        return {
            "id": self.id, "skeletons": list(self.skeletons), "kernel": self.kernel, "shape": self.shape,
            "dtype": self.dtype, "metric": self.metric, "verdict": self.verdict, "median": self.median,
            "ci_low": self.ci_low, "ci_high": self.ci_high, "unit": self.unit, "gpu": self.gpu,
            "torch_version": self.torch_version, "triton_version": self.triton_version,
            "source_hash": self.source_hash, "reason": self.reason, "created_at": self.created_at,
            "extra": _plain(dict(self.extra)),
        }


@dataclass(frozen=True)
class Evidence:
    """What backs one skeleton: where it was mined, how often it could apply, what was measured."""

    code: str
    instances: tuple[Finding, ...]
    opportunities: int
    runs: tuple[ValidationRun, ...]

    @classmethod
    def empty(cls, code: str) -> "Evidence":
        """The evidence of a skeleton nothing was recorded for (e.g. no catalog file yet)."""
        return cls(code.upper(), (), 0, ())

    @property
    def verdicts(self) -> dict[str, int]:
        return dict(sorted(Counter(r.verdict for r in self.runs).items()))

    def to_json(self) -> dict:
        """Summary counts plus ``items``: each instance (type "instance") and each run (type "verdict")."""
        items = [{"type": "instance", **f.to_json()} for f in self.instances]
        items += [{"type": "verdict", **r.to_json()} for r in self.runs]
        return {
            "code": self.code,
            "instance_count": len(self.instances),
            "opportunities": self.opportunities,
            "verdicts": self.verdicts,
            "items": items,
        }


@dataclass(frozen=True)
class LibrarySync:
    """What ``sync_library`` did; ``absent`` are catalogued codes no longer in the library (kept, never reused)."""

    added: tuple[str, ...]
    changed: tuple[str, ...]
    unchanged: tuple[str, ...]
    absent: tuple[str, ...]

    def to_json(self) -> dict:
        return {k: list(getattr(self, k)) for k in ("added", "changed", "unchanged", "absent")}


@dataclass(frozen=True)
class Stats:
    path: str
    schema_version: int
    skeletons: int
    sources: int
    failed_sources: int
    kernels: int
    instances: int
    opportunities: int
    validation_runs: int

    def to_json(self) -> dict:
        return dict(self.__dict__)


def skeleton_hash(sk) -> str:
    """Content hash of a library entry: metadata, docs and examples, not where the folder lies."""
    entry = sk.to_json()
    entry.pop("folder", None)
    entry["docs"] = dict(sk.docs)
    entry["before"] = sk.before
    entry["after"] = sk.after
    return hashlib.sha256(json.dumps(entry, sort_keys=True).encode()).hexdigest()


def check_finding(f: Finding) -> None:
    where = f"{f.path}:{f.line}"
    if not isinstance(f.skeleton, str) or not CODE_RE.match(f.skeleton):
        raise RecordError(f"{where}: finding skeleton {f.skeleton!r} is not a code like SK001")
    if f.kind not in FINDING_KINDS:
        raise RecordError(f"{where}: finding {f.skeleton} kind {f.kind!r} is not one of {', '.join(FINDING_KINDS)}")
    if not f.path:
        raise RecordError(f"finding {f.skeleton}: empty path")
    if not (isinstance(f.line, int) and isinstance(f.end_line, int) and 1 <= f.line <= f.end_line):
        raise RecordError(f"{where}: finding {f.skeleton} needs 1 <= line <= end_line, got {f.line}..{f.end_line}")
    _check_pairs(f.params, f"{where}: finding {f.skeleton} params")


def check_run(r: ValidationRun) -> None:
    what = f"validation run on {r.kernel!r} [{r.shape}]"
    if not r.skeletons or not all(isinstance(c, str) and RUN_CODE_RE.match(c) for c in r.skeletons):
        raise RecordError(f"{what}: skeletons must be a non-empty tuple of codes like SK001, got {r.skeletons!r}")
    for name in ("kernel", "shape", "dtype", "metric", "verdict"):
        if not isinstance(getattr(r, name), str) or not getattr(r, name):
            raise RecordError(f"{what}: field {name!r} must be a non-empty string")
    for name in ("median", "ci_low", "ci_high"):
        v = getattr(r, name)
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)):
            raise RecordError(f"{what}: field {name!r} must be a finite number or None, got {v!r}")
    if (r.ci_low is None) != (r.ci_high is None):
        raise RecordError(f"{what}: ci_low and ci_high must be given together")
    if r.ci_low is not None and r.ci_low > r.ci_high:
        raise RecordError(f"{what}: ci_low {r.ci_low} > ci_high {r.ci_high}")
    if r.ci_low is not None and r.median is None:
        raise RecordError(f"{what}: a confidence interval without a median")
    _check_pairs(r.extra, f"{what} extra")


def _check_pairs(pairs, what: str) -> None:
    if not isinstance(pairs, tuple) or not all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in pairs):
        raise RecordError(f"{what}: must be a tuple of (str, value) pairs, got {pairs!r}")
    keys = [k for k, _ in pairs]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup:
        raise RecordError(f"{what}: key {dup[0]!r} appears twice")


def _pairs(value) -> tuple:
    """Key/value pairs as a tuple of (key, frozen value); a mapping is accepted and converted."""
    if isinstance(value, Mapping):
        value = tuple(value.items())
    if isinstance(value, (list, tuple)) and all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return tuple((k, freeze(v)) for k, v in value)
    return value  # malformed: left as is for check_finding/check_run to report


def freeze(value):
    """JSON value -> the same with lists as tuples (records stay hashable)."""
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return {k: freeze(v) for k, v in value.items()}
    return value


def _plain(value):
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
