"""From recorded calls to a spec's content: outputs, in-place inputs, batch dims, shape sets.

Everything a captured spec assumes is decided here, once, each decision with the reason the spec's
comments show: which tensors carry the batch (dim 0 equal to the call's batch size in every recorded
call; with a single recorded batch size that is an assumption, and batch 1 alone tells nothing), which
calls can be scaled (none whose integer tensors or plain ints might be the batch without proof), which
calls are small enough for the CPU interpreter ("ci", sliced along the batch when that is possible).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from skel.harness.recording import Capture, PlainArg, RecordedCall, TensorArg
from skel.validate.spec import Shape

CI_MAX_ELEMENTS = 1 << 16  # tensor elements of one call the interpreter is asked to run (ci)
CI_MAX_SHAPES = 6
DECODE_BATCHES = (1, 8, 32, 64, 128, 256)  # batch sizes a scaled call is timed at
SCALE_MAX_BYTES = 1 << 30  # a scaled call moving more than this is left out


@dataclass(frozen=True)
class BatchPlan:
    """How one call scales: its batch size, the tensors (dim 0) and plain ints that are it, and why it
    does not scale (empty when it does)."""

    batch: int | None
    batched: tuple[str, ...]
    kept: tuple[str, ...]
    why_not: str = ""
    assumed: bool = False  # one batch size recorded: "dim 0 equals it" is taken as "is the batch"


@dataclass(frozen=True)
class PlannedCall:
    index: int
    call: RecordedCall
    batch: BatchPlan
    outputs: tuple[tuple[str, tuple[int, ...], str], ...]  # fresh returned tensors: name, shape, dtype


@dataclass(frozen=True)
class SpecPlan:
    launcher: str
    spec_file: str
    dtype: str
    outputs: tuple[str, ...]
    inplace: tuple[str, ...]
    calls: tuple[PlannedCall, ...]
    ci: tuple[Shape, ...]
    decode: tuple[Shape, ...]
    notes: tuple[str, ...]


class PlanError(ValueError):
    """A launcher's recorded calls cannot make a spec (the reason says why)."""


def plan_specs(capture: Capture, return_names: dict[str, tuple[str, ...]]) -> tuple[list[SpecPlan], list[str]]:
    """One plan per launcher with kept calls (spec.py when there is one, spec_<launcher>.py each when there
    are several), and a line for each launcher that could not make one."""
    by_launcher: dict[str, list[RecordedCall]] = {}
    for call in capture.kept:
        by_launcher.setdefault(call.launcher, []).append(call)
    plans, problems = [], []
    for launcher, calls in by_launcher.items():
        name = "spec.py" if len(by_launcher) == 1 else f"spec_{launcher}.py"
        try:
            plans.append(_plan(launcher, name, calls, return_names.get(launcher, ())))
        except PlanError as exc:
            problems.append(f"{launcher}: {exc}")
    return plans, problems


def _plan(launcher: str, spec_file: str, calls: list[RecordedCall], static_names: tuple[str, ...]) -> SpecPlan:
    notes: list[str] = []
    first = calls[0]
    same = [c for c in calls if len(c.returns) == len(first.returns)]
    if len(same) < len(calls):
        notes.append(f"left out {', '.join(c.label for c in calls if c not in same)}: they returned "
                     f"a different number of values than {first.label}")
    calls = same
    if first.sequence is None and first.returns[0].kind == "none":
        notes.append("it returns None: judged on the inputs its calls changed in place")
    outputs = _output_names(calls, static_names, notes)
    inplace = tuple(dict.fromkeys(n for c in calls for n in c.modified))
    dtype = _float_dtype(calls)
    batches = _batch_plans(calls)
    planned = tuple(PlannedCall(i, c, batches[c.label], _fresh_outputs(c, outputs)) for i, c in enumerate(calls))
    if not outputs or all(o.startswith("_") for o in outputs):
        if not inplace:
            raise PlanError("its calls returned no fresh tensor and changed none of their inputs: nothing to compare")
    ci, ci_notes = _ci_shapes(planned)
    return SpecPlan(launcher, spec_file, dtype, outputs, inplace, planned, ci, _decode_shapes(planned),
                    tuple(notes + ci_notes))


_KINDS = {"none": "None", "value": "a plain value", "other": "not a tensor"}


def _output_names(calls: list[RecordedCall], static_names: tuple[str, ...], notes: list[str]) -> tuple[str, ...]:
    """A name per returned value: the launcher's own (``return o, state``) where it is a plain name, else
    out<i>; "_"-prefixed (passed over) unless every call returned a fresh tensor there."""
    arg_names = {a.name for c in calls for a in c.args}
    names: list[str] = []
    for i in range(len(calls[0].returns)):
        items = [c.returns[i] for c in calls]
        base = static_names[i] if i < len(static_names) and static_names[i] else f"out{i}"
        if any(item.kind == "tensor" and item.input for item in items):
            inp = next(item.input for item in items if item.input)
            name, why = f"_{inp}", f"it is the input '{inp}' handed back"
        elif all(item.kind == "tensor" for item in items):
            name, why = (f"{base}_out" if base in arg_names else base), ""
        else:
            kinds = sorted({_KINDS[item.kind] for item in items if item.kind != "tensor"})
            name, why = f"_{base}", f"it is {' or '.join(kinds)}" + (" in some calls" if any(
                item.kind == "tensor" for item in items) else "")
        while name in names:
            name += "_"
        names.append(name)
        if why:
            notes.append(f"return value {i} ({name}) is not compared: {why}")
    return tuple(names)


def _fresh_outputs(call: RecordedCall, outputs: tuple[str, ...]) -> tuple[tuple[str, tuple[int, ...], str], ...]:
    return tuple((name, item.shape, item.dtype) for name, item in zip(outputs, call.returns)
                 if item.kind == "tensor" and not item.input)


def _float_dtype(calls: list[RecordedCall]) -> str:
    counts = Counter(t.dtype for c in calls for t in c.tensors if t.is_float)
    if not counts:
        raise PlanError("its calls took no floating-point tensor (the gate compares float outputs)")
    return counts.most_common(1)[0][0]


def _batch_of(call: RecordedCall) -> int | None:
    """dim 0 of the call's first float tensor (not broadcast along it)."""
    for t in call.tensors:
        if t.is_float and t.shape and (t.stride[0] != 0 or t.shape[0] == 1):
            return t.shape[0]
    return None


def _batch_plans(calls: list[RecordedCall]) -> dict[str, BatchPlan]:
    sizes = {c.label: _batch_of(c) for c in calls}
    distinct = {b for b in sizes.values() if b is not None}
    proven = len(distinct) >= 2

    def matches(c: RecordedCall) -> tuple[set[str], set[str]]:
        b = sizes[c.label]
        tensors = {t.name for t in c.tensors if t.shape and t.shape[0] == b}
        ints = {p.name for p in c.plain if type(p.value) is int and p.value == b}
        return tensors, ints

    seen = {c.label: matches(c) for c in calls}
    tracked: set[str] = set()  # names that are the batch in every call that has them
    if proven:
        names = {a.name for c in calls for a in c.args}
        for name in names:
            having = [c for c in calls if any(a.name == name for a in c.args) and sizes[c.label] is not None]
            if having and all(name in seen[c.label][0] | seen[c.label][1] for c in having):
                tracked.add(name)
    out = {}
    for c in calls:
        b = sizes[c.label]
        tensors, ints = seen[c.label]
        tensor_names = tuple(t.name for t in c.tensors)
        batched = tuple(n for n in tensor_names if n in tensors) + tuple(sorted(ints & tracked))
        kept = tuple(n for n in tensor_names if n not in tensors)
        out[c.label] = BatchPlan(b, batched, kept, _why_not(c, b, proven, tensors, ints, tracked), assumed=not proven)
    return out


def _why_not(c: RecordedCall, b: int | None, proven: bool, tensors: set[str], ints: set[str],
             tracked: set[str]) -> str:
    if b is None:
        return "it has no float tensor with a dim 0"
    if not proven and b == 1:
        return "only batch 1 was recorded: which tensors carry the batch is unknown"
    by_name = {t.name: t for t in c.tensors}
    structured = sorted(n for n in tensors if not by_name[n].is_float)
    if structured:
        return (f"its integer/bool tensor(s) {', '.join(structured)} have dim 0 = {b}: indices carry structure a "
                "scaled copy would not have")
    broadcast = sorted(n for n in tensors if by_name[n].stride[0] == 0 and b > 1)
    if broadcast:
        return f"{', '.join(broadcast)} broadcast along dim 0"
    if proven:
        loose = sorted((tensors | ints) - tracked)
        if loose:
            return f"{', '.join(loose)} equal the batch ({b}) here but not in every recorded call"
    elif ints:
        return f"plain argument(s) {', '.join(sorted(ints))} = {b}, the batch: they may be the batch count, or not"
    return ""


def _elements(call: RecordedCall) -> int:
    return sum(t.numel for t in call.tensors)


def _shape(p: PlannedCall, n: int | None = None) -> Shape:
    b = p.batch.batch if n is None else n
    return Shape.of(call=p.index) if b is None else Shape.of(call=p.index, N=b)


def _ci_shapes(planned: tuple[PlannedCall, ...]) -> tuple[tuple[Shape, ...], list[str]]:
    """Recorded calls small enough for the interpreter, sliced along the batch when too large; one per
    signature first (then the rest), at most CI_MAX_SHAPES; never empty."""
    order = sorted(planned, key=lambda p: (p.call.signature in {q.call.signature for q in planned[:p.index]}, p.index))
    shapes, notes = [], []
    for p in order:
        size = _elements(p.call)
        if size <= CI_MAX_ELEMENTS:
            shapes.append(_shape(p))
        elif not p.batch.why_not and p.batch.batch:
            n = max(1, p.batch.batch * CI_MAX_ELEMENTS // size)
            shapes.append(_shape(p, n))
            notes.append(f"ci: call{p.index} sliced to its first {n} of {p.batch.batch} batch rows")
        if len(shapes) == CI_MAX_SHAPES:
            break
    if not shapes:
        smallest = min(planned, key=lambda p: _elements(p.call))
        shapes.append(_shape(smallest))
        notes.append(f"ci: no recorded call is small for the interpreter; call{smallest.index} "
                     f"({_elements(smallest.call)} elements) is the smallest")
    return tuple(shapes), notes


def _decode_shapes(planned: tuple[PlannedCall, ...]) -> tuple[Shape, ...]:
    """Every recorded call, then the first scalable call of each group (calls equal but for their batch)
    at the DECODE_BATCHES sizes that group did not record, up to SCALE_MAX_BYTES each."""
    shapes = [_shape(p) for p in planned]
    groups: dict[str, list[PlannedCall]] = {}
    for p in planned:
        groups.setdefault(_group_key(p), []).append(p)
    for members in groups.values():
        scalable = [p for p in members if not p.batch.why_not]
        if not scalable:
            continue
        p = scalable[0]
        recorded = {q.batch.batch for q in members}
        per_row = _moved_bytes(p) / p.batch.batch
        shapes += [_shape(p, n) for n in DECODE_BATCHES if n not in recorded and per_row * n <= SCALE_MAX_BYTES]
    return tuple(shapes)


def _group_key(p: PlannedCall) -> str:
    parts = []
    for a in p.call.args:
        if isinstance(a, TensorArg):
            shape = a.shape[1:] if a.name in p.batch.batched else a.shape
            parts.append(f"{a.name}:{a.dtype}:{shape}")
        elif isinstance(a, PlainArg) and a.name not in p.batch.batched:
            parts.append(f"{a.name}={a.value!r}")
    return "|".join(parts)


_ITEMSIZE = {"float64": 8, "complex64": 8, "int64": 8, "uint64": 8, "float32": 4, "int32": 4, "uint32": 4,
             "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2}  # others: 1 byte (int8, uint8, bool, fp8)


def _moved_bytes(p: PlannedCall) -> int:
    """Bytes the call reads and writes at least (as ``Replay.bytes`` counts them), at its recorded batch.
    Counted without torch: the capture's own process never imports it."""
    def size(shape: tuple[int, ...], dtype: str) -> int:
        n = 1
        for s in shape:
            n *= s
        return n * _ITEMSIZE.get(dtype, 1)

    by_name = {t.name: t for t in p.call.tensors}
    return (sum(size(t.shape, t.dtype) for t in p.call.tensors)
            + sum(size(by_name[n].shape, by_name[n].dtype) for n in p.call.modified)
            + sum(size(shape, dt) for _, shape, dt in p.outputs))
