"""The record types that cross package boundaries, in one module: every stage passes them and the
catalog stores them. Frozen dataclasses; each has ``to_json()`` (JSON is only a rendering of them).

- ``Condition``: one applicability predicate of a skeleton (the library loads them from
  ``skeleton.toml``; detectors and mined candidates carry them).
- ``KernelProfile`` and its parts: what the miner knows about one kernel, the same for Triton and
  CUDA (every frontend produces them; detectors, match, the rewriter and the agent prompt read them;
  the catalog's ``kernels`` table stores them). Plain data, so a profile can be cached by the content
  hash of its file; the dataflow graph is stored as an edge list and rebuilt as a networkx graph on
  demand. Lines are 1-based line numbers in the kernel's file.
- ``Edit``, ``KernelEdit``, ``MinedEdit``: what history mining found one commit changed in one kernel
  (the catalog's ``history_edits`` table).
- ``SourceRecord`` and ``Finding`` (the miner produces them), ``ValidationRun`` (validation),
  ``Evidence`` and ``Stats`` (the catalog's answers).

Key/value fields (``Finding.params``, ``ValidationRun.extra``) are tuples of
``(key, value)`` pairs with JSON values; a dict given there is turned into
pairs and lists into tuples at construction, so records stay hashable and
compare equal after a round trip through the catalog.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CODE_RE = re.compile(r"^SK\d{3}$")  # a skeleton's stable code

# A source file's language (``SourceRecord.language``, ``KernelProfile.language``) by its extension.
PYTHON_EXTS = frozenset({".py"})
CUDA_EXTS = frozenset({".cu", ".cuh", ".cuhpp", ".h", ".hpp", ".hh", ".hxx", ".cc", ".cpp", ".cxx", ".inl"})


def language_of(path: str) -> str | None:
    """``triton`` for Python, ``cuda`` for CUDA/C++ sources, None for anything else."""
    ext = os.path.splitext(path)[1].lower()
    if ext in PYTHON_EXTS:
        return "triton"
    if ext in CUDA_EXTS:
        return "cuda"
    return None

@dataclass(frozen=True)
class Condition:
    """One applicability predicate. ``id`` names the check the miner implements."""

    id: str
    holds: str  # what is true when the condition holds ("divides by tl.sqrt of a reduction")
    fails: str  # the reason shown when it does not ("no division by a square-root norm")



@dataclass(frozen=True)
class Param:
    name: str
    annotation: str | None  # source text, e.g. "tl.constexpr", "tl.int64", "const float*"
    constexpr: bool
    default: str | None = None


@dataclass(frozen=True)
class ProgramAxis:
    """A program-id axis (``tl.program_id(0)`` / ``blockIdx.x``) and the names derived from it.

    ``derived`` lists the variables computed from the axis (``i_v``, ``i_nh``, ``i_n``...),
    each with the part of the id it selects when that is recognisable (e.g. "v-tile").
    """

    axis: int
    var: str
    line: int
    derived: tuple[str, ...] = ()
    roles: tuple[tuple[str, str], ...] = ()  # (variable, role) e.g. ("i_v", "v-tile"), ("i_hv", "head")


@dataclass(frozen=True)
class Loop:
    line: int
    end_line: int
    var: str
    iter_text: str  # e.g. "tl.range(0, T, num_stages=num_stages)" or "for (int i = 0; i < n; ++i)"
    kind: str  # range | tl.range | static_range | for | while
    is_time_loop: bool  # iterates over the sequence/token dimension (T, seq_len, ...)
    depth: int = 0
    # Added by the Triton frontend (defaults keep other producers valid):
    guards: tuple[str, ...] = ()  # enclosing if-conditions, outermost first ("USE_GATE_IN_KERNEL", "not HAS_A")


@dataclass(frozen=True)
class MemOp:
    kind: str  # load | store | atomic
    line: int
    pointer: str  # source text of the pointer/address expression
    target: str | None  # assigned variable for loads (b_q = tl.load(...)), None otherwise
    masked: bool
    eviction_policy: str | None  # evict_first | evict_last | None
    cache_modifier: str | None  # ".cg", ".ca", "__ldg", ...
    block_ptr: bool  # tl.make_block_ptr / TMA descriptor
    loop_line: int | None  # innermost enclosing loop
    loop_invariant: bool  # the address does not depend on the innermost loop's variables
    # (vacuously True outside loops: check loop_line)
    guards: tuple[str, ...] = ()  # enclosing if-conditions, outermost first
    node: str = ""  # dataflow node of the op ("load@152"); its address is node + ":addr"
    # Added by the CUDA frontend: global | shared (CUDA smem arrays and pointers into them)
    space: str = "global"


@dataclass(frozen=True)
class Reduction:
    op: str  # sum | max | min | argmax | warp-shuffle | ...
    line: int
    text: str
    axis: str | None
    loop_line: int | None
    guards: tuple[str, ...] = ()
    dtype: str = "?"  # of the reduced operand, as far as static analysis can tell


@dataclass(frozen=True)
class Dot:
    line: int
    text: str
    input_precision: str | None  # None: the default (tf32 for fp32 operands in Triton)
    allow_tf32: bool | None
    operand_dtypes: tuple[str, ...]  # as far as static analysis can tell ("fp32", "bf16", "?")
    loop_line: int | None
    guards: tuple[str, ...] = ()


@dataclass(frozen=True)
class MathOp:
    """Transcendental ops, square roots and divisions."""

    op: str  # exp | exp2 | log | log2 | sqrt | rsqrt | sigmoid | softplus | div | ...
    line: int
    text: str
    loop_line: int | None
    detail: tuple[tuple[str, str], ...] = ()  # e.g. (("denominator", "tl.sqrt(tl.sum(b_q*b_q)+1e-6)"),)
    # Triton detail keys: div -> numerator, denominator, denominator_calls ("tl.sqrt,tl.sum"),
    # denominator_dtype; other ops -> argument, via (where a bare helper such as exp comes from), dtype.
    guards: tuple[str, ...] = ()


@dataclass(frozen=True)
class LaunchSite:
    """Where the kernel is launched: ``kernel[grid](...)`` or ``kernel<<<grid, block>>>(...)``."""

    line: int
    grid: str  # source text of the grid
    grid_dims: tuple[str, ...]
    args: tuple[tuple[str, str], ...]  # (parameter name, argument source text)
    constexpr_values: tuple[tuple[str, Any], ...]  # resolved values, e.g. (("BV", 32), ("BK", "next_pow2(K)"))
    num_warps: Any = None
    num_stages: Any = None
    # Added by the CUDA frontend (kernel<<<grid, block, smem, stream>>>): source texts
    block: str | None = None
    shared_mem: str | None = None
    stream: str | None = None
    # Tile constexprs the grid is built from: passed at the launch by keyword as a name the grid is computed
    # from (``grid = (cdiv(V, BV) * N * HV,)`` with ``BV=BV``) or read by a grid lambda (``META["BV"]``, passed
    # or set by the kernel's heuristics or autotune), so programs differing only in that tile are siblings
    # that read each other's shared data (Triton frontend).
    grid_tiles: tuple[str, ...] = ()
    # Constexprs passed (by keyword or position) as a host name the grid divides a size by
    # (``SPLIT_SIZE`` in ``grid = (cdiv(n, SPLIT_SIZE),)``), whatever their names (Triton frontend).
    grid_divisors: tuple[str, ...] = ()
    # How the launch reaches the kernel (Triton frontend): "" for ``kernel[grid](...)`` in the host code;
    # "wrapper NAME" for a call of a same-file function that launches its kernel argument; "field OBJ.F"
    # for ``OBJ.F[grid](...)`` with the field bound to the kernel. Rewrites edit direct launches only.
    via: str = ""


@dataclass(frozen=True)
class SharedArray:
    """A CUDA ``__shared__`` array declared in the kernel (added by the CUDA frontend)."""

    name: str
    dtype: str  # element type as written, e.g. "float", "uint8_t"
    size: str  # element-count expression as written ("BLOCK * 4"); "" for extern (dynamic)
    line: int
    dynamic: bool = False  # extern __shared__ (size set by the launch)


@dataclass(frozen=True)
class TuneConfigs:
    autotune: tuple[tuple[tuple[str, Any], ...], ...] = ()  # one entry per triton.Config
    autotune_keys: tuple[str, ...] = ()
    heuristics: tuple[str, ...] = ()  # parameter names set by @triton.heuristics
    do_not_specialize: tuple[str, ...] = ()


@dataclass(frozen=True)
class KernelProfile:
    name: str
    path: str
    language: str  # triton | cuda
    line: int
    end_line: int
    params: tuple[Param, ...]
    program_axes: tuple[ProgramAxis, ...]
    loops: tuple[Loop, ...]
    memops: tuple[MemOp, ...]
    reductions: tuple[Reduction, ...]
    dots: tuple[Dot, ...]
    math: tuple[MathOp, ...]
    dtypes: tuple[str, ...]  # dtypes named in the body (tl.float32, bf16, __nv_bfloat16, ...)
    launches: tuple[LaunchSite, ...]
    tune: TuneConfigs = field(default_factory=TuneConfigs)
    # dataflow: edges "a -> b" meaning value b is computed from a; nodes are variable names
    # (SSA-ish: "b_q@157" for the assignment at line 157) or "pid:0" for program-id axes.
    # Triton frontend conventions (parameters, memory-op nodes "load@152" / "load@152:addr")
    # and the queries over it: miner/dataflow.py.
    dataflow: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()  # frontend remarks (e.g. "macro X stripped")
    # Added by the Triton frontend:
    kind: str = "kernel"  # kernel | device-function (jit helper with no program id and no launch here)
    # in-kernel names computed from parameters only, e.g. (("NV", "tl.cdiv(V, BV)"),)
    symbols: tuple[tuple[str, str], ...] = ()
    # Added by the CUDA frontend: __shared__ arrays (resource constraints: shared memory)
    shared: tuple[SharedArray, ...] = ()

    @property
    def constexprs(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.constexpr)

    def to_json(self) -> dict:
        # Same content as dataclasses.asdict, without its deep copy of every edge tuple
        # (asdict dominated mining time: ~7 ms per kernel).
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name in _ROW_FIELDS:
                v = tuple(dict(vars(r)) for r in v)
            elif f.name == "tune":
                v = dict(vars(v))
            out[f.name] = v
        return out

    @classmethod
    def from_json(cls, data: dict) -> "KernelProfile":
        def tup(rows, kind):
            return tuple(kind(**_tuplify(r)) for r in rows)

        d = dict(data)
        d["params"] = tup(d["params"], Param)
        d["program_axes"] = tup(d["program_axes"], ProgramAxis)
        d["loops"] = tup(d["loops"], Loop)
        d["memops"] = tup(d["memops"], MemOp)
        d["reductions"] = tup(d["reductions"], Reduction)
        d["dots"] = tup(d["dots"], Dot)
        d["math"] = tup(d["math"], MathOp)
        d["launches"] = tup(d["launches"], LaunchSite)
        d["tune"] = TuneConfigs(**_tuplify(d.get("tune", {})))
        d["dtypes"] = tuple(d["dtypes"])
        d["dataflow"] = tuple(tuple(e) for e in d.get("dataflow", ()))
        d["notes"] = tuple(d.get("notes", ()))
        d["symbols"] = tuple(tuple(e) for e in d.get("symbols", ()))
        d["shared"] = tup(d.get("shared", ()), SharedArray)
        return cls(**d)


def reported(profiles):
    """The profiles a file's opportunities are reported for: its kernels, or its ``@triton.jit`` helpers
    when it has no kernel (a library of device functions). One definition for ``skel match``, the agent
    prompt and a rule's gated rewrite, so what is reported is what the rewrite runs on."""
    profiles = list(profiles)
    return [p for p in profiles if p.kind == "kernel"] or profiles


_ROW_FIELDS = frozenset({"params", "program_axes", "loops", "memops", "reductions", "dots", "math", "launches",
                         "shared"})


def _tuplify(row: dict) -> dict:
    """JSON turns tuples into lists; turn them back (nested) so frozen dataclasses stay hashable."""

    # Scalars are most values: test the type inline instead of calling per value (warm
    # re-mining reads every cached profile back).
    return {k: (_conv(v) if v.__class__ is list else v) for k, v in row.items()}


def _conv(v: list) -> tuple:
    return tuple(_conv(x) if x.__class__ is list else x for x in v)


@dataclass(frozen=True)
class Edit:
    """One edit: ``replace`` (before -> after), ``insert`` (after only) or ``delete`` (before only).

    ``before``/``after`` are source text (``ast.unparse``) of an expression, or of a
    statement when ``stmt``; the old side is written with the new side's local names.
    """

    kind: str
    before: str
    after: str
    line: int  # in the new file (the old file for a delete)
    stmt: bool
    nesting: str = ""  # enclosing loops/ifs, e.g. "for" (conditions such as "inside a loop")

    def to_json(self) -> dict:
        return {"kind": self.kind, "before": self.before, "after": self.after, "line": self.line,
                "stmt": self.stmt, "nesting": self.nesting}

    @classmethod
    def from_json(cls, d: dict) -> "Edit":
        return cls(d["kind"], d["before"], d["after"], int(d["line"]), bool(d["stmt"]), d.get("nesting", ""))


@dataclass(frozen=True)
class KernelEdit:
    """Everything one commit changed in one function of one file."""

    path: str
    kernel: str
    line: int  # the function's def line in the new file
    jit: bool  # decorated with a *jit* decorator (a Triton kernel or device helper)
    local_names: tuple[str, ...]  # names bound in the function (they become name holes)
    edits: tuple[Edit, ...]
    # sha256 of the two file versions (text) diffed: a kernel the candidate was distilled from,
    # so gate evidence on it is not held-out (see skel.pipeline.preview).
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class MinedEdit:
    """A KernelEdit with where it came from."""

    repo: str
    commit: str
    message: str
    date: str
    kernel_edit: KernelEdit


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
class StoredFile:
    """What the catalog holds for one mined file, as a warm re-mine reports it without parsing:
    ``kernels`` counts its profiles of kind ``kernel`` (jit device helpers not counted)."""

    source: SourceRecord
    kernels: int
    findings: tuple["Finding", ...]


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
    if not isinstance(value, (list, tuple)) and isinstance(value, Mapping):  # tuples first: the ABC check is slow
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
