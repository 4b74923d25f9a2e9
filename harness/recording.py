"""What a capture recorded, as typed values: the calls the recorder wrote (``recorder.py``), merged
over the processes of one run. ``calls.json`` in a capture folder is the rendering of a ``Capture``."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class TensorArg:
    name: str
    shape: tuple[int, ...]
    dtype: str
    stride: tuple[int, ...]
    contiguous: bool
    device: str
    storage_offset: int
    storage: int  # the address of its storage in the run: arguments with equal values shared memory

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def is_float(self) -> bool:
        return self.dtype.startswith(("float", "bfloat", "complex"))


@dataclass(frozen=True)
class PlainArg:
    """A non-tensor argument: a JSON value (``tuple``: it was passed as a tuple) or a torch dtype."""

    name: str
    value: Any
    kind: str = "value"  # "value" or "dtype"
    tuple: bool = False


@dataclass(frozen=True)
class ReturnItem:
    kind: str  # "tensor", "none", "value", "other"
    shape: tuple[int, ...] = ()
    dtype: str = ""
    input: str | None = None  # the input argument a returned tensor is (same storage)


@dataclass(frozen=True)
class RecordedCall:
    launcher: str
    label: str  # "call3": its shape's name in the spec and its tensor file's stem
    signature: str
    args: tuple[TensorArg | PlainArg, ...]
    returns: tuple[ReturnItem, ...]
    sequence: str | None  # "tuple"/"list" when the launcher returned several values, None for one value
    modified: tuple[str, ...]  # tensor inputs the call changed (kept calls only)
    file: str | None  # the tensors' file in the capture folder; None: not kept (``skipped`` says why)
    skipped: str | None
    pid: int
    time: float
    index: int = 0  # its number among the calls of its signature in its process (1: the first)

    @property
    def tensors(self) -> tuple[TensorArg, ...]:
        return tuple(a for a in self.args if isinstance(a, TensorArg))

    @property
    def plain(self) -> tuple[PlainArg, ...]:
        return tuple(a for a in self.args if isinstance(a, PlainArg))

    def to_json(self) -> dict:
        data = asdict(self)
        data["args"] = [dict(asdict(a), kind="tensor") if isinstance(a, TensorArg) else asdict(a) for a in self.args]
        return data

    @classmethod
    def from_raw(cls, raw: dict, label: str, file: str | None) -> "RecordedCall":
        """From a line the recorder wrote (its plain dicts)."""
        args: list[TensorArg | PlainArg] = []
        for a in raw["args"]:
            if a["kind"] == "tensor":
                args.append(TensorArg(a["name"], tuple(a["shape"]), a["dtype"], tuple(a["stride"]), bool(a["contiguous"]),
                                      a["device"], int(a["storage_offset"]), int(a["storage"])))
            elif a["kind"] in ("value", "dtype"):
                args.append(PlainArg(a["name"], a["value"], a["kind"], bool(a.get("tuple"))))
            else:
                args.append(PlainArg(a["name"], f"<{a.get('type')}>", "other"))
        returns = tuple(ReturnItem(r["kind"], tuple(r.get("shape", ())), r.get("dtype", ""), r.get("input"))
                        for r in raw["returns"]["items"])
        return cls(raw["launcher"], label, raw["signature"], tuple(args), returns, raw["returns"]["sequence"],
                   tuple(raw["modified"]), file, raw["skipped"], int(raw["pid"]), float(raw["time"]),
                   int(raw.get("index", 0)))


@dataclass(frozen=True)
class LauncherTally:
    """Calls of one launcher in the run: all of them, by distinct signature, and how many were kept."""

    launcher: str
    calls: int
    signatures: int
    kept: int


@dataclass(frozen=True)
class Capture:
    target: str
    command: tuple[str, ...]
    cwd: str
    launchers: tuple[str, ...]  # wrapped in the run
    tallies: tuple[LauncherTally, ...]
    calls: tuple[RecordedCall, ...]  # kept calls (with tensors) and the first call of each signature not kept
    notes: tuple[str, ...]
    bytes: int  # tensor files written

    @property
    def kept(self) -> tuple[RecordedCall, ...]:
        return tuple(c for c in self.calls if c.file is not None)

    def to_json(self) -> dict:
        return {"target": self.target, "command": list(self.command), "cwd": self.cwd, "launchers": list(self.launchers),
                "tallies": [asdict(t) for t in self.tallies], "calls": [c.to_json() for c in self.calls],
                "notes": list(self.notes), "bytes": self.bytes}
