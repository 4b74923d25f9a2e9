"""KernelProfile: what the miner knows about one kernel, the same for Triton and CUDA.

Every frontend (``triton_frontend``, ``cuda_frontend``) produces these frozen
dataclasses; detectors, match, the rewriter and the agent prompt read them.
They are plain data (JSON round-trips through ``to_json``/``from_json``) so a
profile can be cached by the content hash of its file. The dataflow graph is
stored as an edge list and rebuilt as a networkx graph on demand.

Lines are 1-based line numbers in the kernel's file.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


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

    def graph(self):
        """The dataflow graph as a networkx DiGraph (built on demand)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_edges_from(self.dataflow)
        return g

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


_ROW_FIELDS = frozenset({"params", "program_axes", "loops", "memops", "reductions", "dots", "math", "launches",
                         "shared"})


def _tuplify(row: dict) -> dict:
    """JSON turns tuples into lists; turn them back (nested) so frozen dataclasses stay hashable."""

    # Scalars are most values: test the type inline instead of calling per value (warm
    # re-mining reads every cached profile back).
    return {k: (_conv(v) if v.__class__ is list else v) for k, v in row.items()}


def _conv(v: list) -> tuple:
    return tuple(_conv(x) if x.__class__ is list else x for x in v)
