"""What a target promises: shapes, inputs, reference, tolerances, roofline (frozen dataclasses).

A family folder ``kernels/<family>/`` exports ``SPEC: TargetSpec`` from its ``spec.py``; a user
kernel outside ``kernels/`` points the gate at its own spec file (a harness).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # torch is imported lazily so `skel --help` stays fast
    import torch

_DIM = re.compile(r"([A-Za-z_]+)(\d+)")
_NAMED = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(\d+)")


@dataclass(frozen=True)
class Shape:
    """One problem size: named dims in declaration order, e.g. N64-T1-H32-HV32-K128-V128."""

    dims: tuple[tuple[str, int], ...]

    @classmethod
    def of(cls, **dims: int) -> Shape:
        return cls(tuple((name, int(value)) for name, value in dims.items()))

    @classmethod
    def parse(cls, label: str) -> Shape:
        """Inverse of ``label``: "N64-T1-K128" -> Shape.of(N=64, T=1, K=128); "K2=64" for a name with a digit."""
        parts = label.split("-")
        dims = []
        for part in parts:
            m = _NAMED.fullmatch(part) or _DIM.fullmatch(part)
            if not m:
                raise ValueError(f"shape label {label!r}: part {part!r} is not NAME<int> (or NAME=<int>)")
            dims.append((m.group(1), int(m.group(2))))
        return cls(tuple(dims))

    @property
    def label(self) -> str:
        """"N64-T1-K128"; a name holding a digit is written "K2=64" (K264 would read back as K=264)."""
        return "-".join(f"{name}={value}" if any(c.isdigit() for c in name) else f"{name}{value}"
                        for name, value in self.dims)

    def __getitem__(self, name: str) -> int:
        for key, value in self.dims:
            if key == name:
                return value
        raise KeyError(f"shape {self.label} has no dim {name!r}")

    def get(self, name: str, default: int | None = None) -> int | None:
        try:
            return self[name]
        except KeyError:
            return default

    def as_dict(self) -> dict[str, int]:
        return dict(self.dims)

    def __str__(self) -> str:
        return self.label


@dataclass(frozen=True)
class Tolerance:
    """Accepted error of one output against an oracle.

    rel_rms: ||got - expected||_2 / ||expected||_2 over the whole tensor.
    max_abs: largest accepted |got - expected| of any single element (output units).
    """

    rel_rms: float
    max_abs: float


# Output check for outputs that are not compared elementwise (e.g. top-k indices, where ties
# make several answers right): (got, reference outputs, inputs) -> failure message or None.
OutputCheck = Callable[["torch.Tensor", Mapping[str, "torch.Tensor"], Mapping[str, Any]], "str | None"]


@dataclass(frozen=True)
class TargetSpec:
    """The contract a kernel family is validated against.

    make_inputs(shape, dtype, seed, device) -> {name: tensor or python scalar}: fresh inputs with
        realistic value ranges; the keys are the launcher's keyword arguments.
    reference(**inputs) -> {name: float64 tensor}: every name in ``outputs`` and ``inplace``
        (for an in-place input, its value after the call). Must not modify its inputs. None: no
        reference; the original kernel is the oracle, its accepted error calibrated from its own
        sensitivity (``calibrate``), and ``tolerances`` are not used.
    outputs: names of the launcher's return values, in order (one name: a bare tensor); a name
        starting with "_" is passed over (not compared; may be None or a plain value, e.g. a tile
        size a launcher returns, or an input it hands back).
    inplace: inputs the kernel legitimately updates; compared after the call like outputs.
    shape_sets: at least "ci" (tiny, for the interpreter) and "decode" (realistic sizes).
    tolerances: by the *output's* dtype name ("bfloat16", "float32", ...).
    dtypes: input dtypes the family supports; the first is the default.
    checks: outputs judged by a custom check instead of elementwise error.
    cross_reference(**float64 inputs) -> outputs (a dict by name, a tuple in ``outputs`` order or one
        tensor): with no ``reference``, a second oracle beside the original, e.g. the plain PyTorch
        version the kernel's project keeps; the candidate must be about as close to it as the original.
    dims: how the launcher's arguments give a shape dim, for `skel apply`'s dispatch between variants
        accepted at different shapes; when empty, apply infers them from make_inputs on the ci shapes.
    bytes / flops: minimum memory traffic and arithmetic per call, for the roofline.
    copy_ceiling: where a probe measured it, the fraction of the flat copy roofline the target's data layout
        allows through any grid its reductions permit (e.g. 0.90 for a K-major recurrent state at T = 1): the
        gate then reports "% of the layout's copy ceiling" beside "% of roofline". 0: none measured.
    """

    family: str
    entry: str
    make_inputs: Callable[..., dict[str, Any]]
    reference: Callable[..., dict[str, "torch.Tensor"]] | None
    outputs: tuple[str, ...]
    inplace: tuple[str, ...]
    shape_sets: Mapping[str, tuple[Shape, ...]]
    tolerances: Mapping[str, Tolerance]
    bytes: Callable[[Shape, str], int]
    flops: Callable[[Shape, str], int]
    dtypes: tuple[str, ...] = ("bfloat16",)
    checks: Mapping[str, OutputCheck] = field(default_factory=dict)
    description: str = ""
    dims: tuple[tuple[str, str], ...] = ()  # (dim, expression over the entry's arguments), e.g. ("T", "q.shape[1]")
    batch: str = "N"  # the batch-like dim: `skel apply` picks one winner per shape bucket of the other dims
    cross_reference: Callable[..., Any] | None = None
    copy_ceiling: float = 0.0

    def __post_init__(self) -> None:
        missing = {"ci", "decode"} - set(self.shape_sets)
        if missing:
            raise ValueError(f"TargetSpec {self.family}: shape_sets lacks {sorted(missing)}")
        if not self.compared_outputs and not self.inplace:
            raise ValueError(f"TargetSpec {self.family}: no outputs declared")

    @property
    def compared_outputs(self) -> tuple[str, ...]:
        return tuple(n for n in self.outputs if not passed_over(n))

    def tolerance(self, dtype_name: str) -> Tolerance:
        return _tolerance(self.family, self.tolerances, dtype_name)

    def shapes(self, name: str) -> tuple[Shape, ...]:
        return _shape_set(self.family, self.shape_sets, name)

    def info(self) -> "SpecInfo":
        return SpecInfo(self.family, self.entry, self.outputs, self.inplace, dict(self.shape_sets),
                        dict(self.tolerances), self.dtypes, tuple(self.checks), self.description, self.dims,
                        "reference" if self.reference is not None else "original", self.batch,
                        _label(self.cross_reference) if self.reference is None else "", self.copy_ceiling)


def _label(fn: Any) -> str:
    if fn is None:
        return ""
    return str(getattr(fn, "label", "") or getattr(fn, "__name__", "") or "a reference")


def passed_over(output: str) -> bool:
    """An output the gate does not compare (its name starts with "_")."""
    return output.startswith("_")


def _tolerance(family: str, tolerances: Mapping[str, Tolerance], dtype_name: str) -> Tolerance:
    try:
        return tolerances[dtype_name]
    except KeyError:
        raise KeyError(
            f"TargetSpec {family}: no tolerance for outputs of dtype {dtype_name} (has {sorted(tolerances)})"
        ) from None


def _shape_set(family: str, shape_sets: Mapping[str, tuple[Shape, ...]], name: str) -> tuple[Shape, ...]:
    try:
        return shape_sets[name]
    except KeyError:
        raise KeyError(f"TargetSpec {family}: no shape set {name!r} (has {sorted(shape_sets)})") from None


@dataclass(frozen=True)
class SpecInfo:
    """A spec's data without its code: what the judge knows of a target. The spec itself (input
    factory, reference, custom checks, roofline formulas) runs only in the oracle worker; this
    crosses to the judge as JSON."""

    family: str
    entry: str
    outputs: tuple[str, ...]
    inplace: tuple[str, ...]
    shape_sets: Mapping[str, tuple[Shape, ...]]
    tolerances: Mapping[str, Tolerance]
    dtypes: tuple[str, ...]
    checks: tuple[str, ...]  # outputs judged by the spec's own check (in the oracle worker)
    description: str = ""
    dims: tuple[tuple[str, str], ...] = ()
    oracle: str = "reference"  # "reference": the spec's float64 reference; "original": calibrated self-oracle
    batch: str = "N"
    cross_reference: str = ""  # with oracle "original": the second oracle's name ("" when none)
    copy_ceiling: float = 0.0  # TargetSpec.copy_ceiling

    @property
    def compared_outputs(self) -> tuple[str, ...]:
        return tuple(n for n in self.outputs if not passed_over(n))

    def tolerance(self, dtype_name: str) -> Tolerance:
        return _tolerance(self.family, self.tolerances, dtype_name)

    def shapes(self, name: str) -> tuple[Shape, ...]:
        return _shape_set(self.family, self.shape_sets, name)

    def to_json(self) -> dict:
        return {
            "family": self.family, "entry": self.entry, "outputs": list(self.outputs), "inplace": list(self.inplace),
            "shape_sets": {k: [s.label for s in v] for k, v in self.shape_sets.items()},
            "tolerances": {k: [t.rel_rms, t.max_abs] for k, t in self.tolerances.items()},
            "dtypes": list(self.dtypes), "checks": list(self.checks), "description": self.description,
            "dims": [list(d) for d in self.dims], "oracle": self.oracle, "batch": self.batch,
            "cross_reference": self.cross_reference, "copy_ceiling": self.copy_ceiling,
        }

    @classmethod
    def from_json(cls, value: dict) -> "SpecInfo":
        return cls(
            family=str(value["family"]), entry=str(value["entry"]), outputs=tuple(value["outputs"]),
            inplace=tuple(value["inplace"]),
            shape_sets={k: tuple(Shape.parse(s) for s in v) for k, v in value["shape_sets"].items()},
            tolerances={k: Tolerance(float(r), float(a)) for k, (r, a) in value["tolerances"].items()},
            dtypes=tuple(value["dtypes"]), checks=tuple(value["checks"]), description=str(value["description"]),
            dims=tuple((str(a), str(b)) for a, b in value["dims"]), oracle=str(value.get("oracle", "reference")),
            batch=str(value.get("batch", "N")), cross_reference=str(value.get("cross_reference", "")),
            copy_ceiling=float(value.get("copy_ceiling", 0.0)),
        )


def dtype_name(dtype: Any) -> str:
    """torch.bfloat16 -> "bfloat16"; strings pass through."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> "torch.dtype":
    import torch

    value = getattr(torch, dtype_name(name), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return value


def decode_sweeps(**fixed: int) -> dict[str, tuple[Shape, ...]]:
    """The shape sets of a recurrent decode target over batch N in 1 ... 256: "decode" (T in 1, 2, 4, 8),
    "t1", "t8" and "bench" (T in 1 and 8: issue 5's figures); ``fixed`` are the other dims (H, HV, K, V)."""
    def grid(ts: tuple[int, ...]) -> tuple[Shape, ...]:
        return tuple(Shape.of(N=n, T=t, **fixed) for t in ts for n in (1, 8, 32, 64, 128, 256))

    return {"decode": grid((1, 2, 4, 8)), "t1": grid((1,)), "t8": grid((8,)), "bench": grid((1, 8))}


def generator(shape: Shape, seed: int, device: Any) -> "torch.Generator":
    """A generator seeded from (shape, seed): each shape and seed gets its own inputs."""
    import zlib

    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed((zlib.crc32(shape.label.encode()) * 1_000_003 + int(seed)) % (2**63))
    return gen


def itemsize(name: str) -> int:
    """Bytes per element of a dtype name ("bfloat16" -> 2)."""
    sizes = {"bfloat16": 2, "float16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1, "int16": 2, "int32": 4,
             "int64": 8, "bool": 1}
    try:
        return sizes[dtype_name(name)]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}") from None


def infer_dims(spec) -> tuple[tuple[tuple[str, str], ...], str]:
    """Each shape dim as ``arg.shape[axis]`` of the entry's tensor arguments, read off the ci shapes'
    inputs built on the CPU (the harness's own code; they are tiny): an (argument, axis) whose size
    equals the dim at every ci shape and equals no other dim at all of them. Returns the dims found and
    a note naming the ones left out (ambiguous or not shown by any argument), or why nothing was built."""
    import torch

    shapes = spec.shape_sets["ci"]
    try:
        inputs = [spec.make_inputs(shape, spec.dtypes[0], 0, "cpu") for shape in shapes]
    except Exception as exc:  # noqa: BLE001 - the harness's own failure, reported in the note
        return (), f"shape dims for a dispatch not inferred ({type(exc).__name__}: {exc}); give TargetSpec.dims"
    names = [d for d, _ in shapes[0].dims]

    def size(x, arg, a):
        t = x.get(arg)
        return t.shape[a] if isinstance(t, torch.Tensor) and t.dim() > a else None

    pairs = [(arg, a) for arg, t in inputs[0].items() if isinstance(t, torch.Tensor) for a in range(t.dim())]
    matches = {p: {d for d in names if all(size(x, *p) == s[d] for x, s in zip(inputs, shapes))} for p in pairs}
    out, left = [], []
    for dim in names:
        pair = next((p for p in pairs if matches[p] == {dim}), None)
        if pair is None:
            left.append(dim)
        else:
            out.append((dim, f"{pair[0]}.shape[{pair[1]}]"))
    note = (f"no argument axis tells {', '.join(left)} apart in the ci shapes (a dispatch cannot use them; "
            "TargetSpec.dims can name them)") if left else ""
    return tuple(out), note
