"""What the judge can ask each of its workers, as typed calls (the requests are in ``worker``).

``OracleClient``: the spec's data, the roofline per shape, one case (inputs, float64 reference,
the original's outputs), the spec's custom check of a candidate output, the device.
``CandidateClient``: load the candidate, call it on a case's inputs.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from skel.validate import channel
from skel.validate.bench import Machine
from skel.validate.session import Worker
from skel.validate.spec import Shape, SpecInfo


class OracleFailed(Exception):
    """The oracle cannot do what was asked: the spec or the original is broken (not the candidate)."""


@dataclass
class Case:
    """One shape and seed: the inputs, the reference's outputs and the original's, all judge copies."""

    tensors: dict[str, Any]  # the launcher's tensor arguments
    values: dict[str, Any]  # its other arguments, as JSON
    ref: dict[str, Any]
    base: dict[str, Any] = field(default_factory=dict)
    original_failure: str | None = None
    pert: dict[str, Any] = field(default_factory=dict)  # without a reference: the original one ulp away
    note: str = ""
    x64: dict[str, Any] = field(default_factory=dict)  # the project's reference on float64 inputs (a second oracle)
    cross_note: str = ""  # why that reference gave nothing for this case
    pert_of: str = "base"  # "pert" ran on the upcast inputs one float32 ulp away ("ref"), or on the inputs' own

    @property
    def inputs(self) -> dict[str, Any]:
        return {**{k: channel.decode_value(v) for k, v in self.values.items()}, **self.tensors}


@dataclass
class CandidateCall:
    outputs: dict[str, Any]  # returned tensors by name, then the in-place inputs after the call
    args: dict[str, Any]  # every tensor argument as the call left it
    aliased: list[str]


class Deadline:
    """The oracle's whole budget (a hang outside candidate code is still caught)."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.001, self.end - time.monotonic())


def _split(tensors: dict[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, value in tensors.items():
        group, _, name = key.partition(".")
        out.setdefault(group, {})[name] = value
    return out


class OracleClient:
    def __init__(self, worker: Worker, deadline: Deadline):
        self.worker, self.deadline = worker, deadline
        self.load_notes: tuple[str, ...] = ()

    def ask(self, message: dict, doing: str) -> dict:
        reply = self.worker.request(message, self.deadline.left(), doing)
        if "internal" in reply:
            raise RuntimeError(f"internal error in the gate's oracle worker while {doing}:\n{reply['internal']}")
        if "error" in reply:
            raise OracleFailed(str(reply["error"]))
        return reply

    def hello(self, load_kernel: bool = True) -> SpecInfo:
        reply = self.ask({"op": "hello", "load_kernel": load_kernel}, "loading the spec")
        self.load_notes = tuple(reply.get("notes", ()))  # what loading the original had to work around
        return SpecInfo.from_json(reply["spec"])

    def describe(self, shapes: list[Shape], dtype: str) -> tuple[dict[str, tuple[int, int]], tuple[str, ...]]:
        reply = self.ask({"op": "describe", "shapes": [s.label for s in shapes], "dtype": dtype},
                         "reading the spec's roofline")
        return {k: (int(b), int(f)) for k, (b, f) in reply["roofline"].items()}, tuple(reply["arguments"])

    def case(self, shape: Shape, dtype: str, seed: int) -> Case:
        doing = f"making inputs, the reference and the original's outputs at {shape.label} seed {seed}"
        reply = self.ask({"op": "case", "shape": shape.label, "dtype": dtype, "seed": seed}, doing)
        groups = _split(self.worker.fetch(reply, self.deadline.left(), doing))
        return Case(groups.get("in", {}), reply.get("values", {}), groups.get("ref", {}), groups.get("base", {}),
                    reply.get("original_failure"), groups.get("pert", {}), str(reply.get("upcast_note", "")),
                    groups.get("x64", {}), str(reply.get("cross_note", "")), str(reply.get("pert_of", "base")))

    def check(self, name: str, got: Any) -> str | None:
        descriptor, new, fds = self.worker.upload({"got": got})
        reply = self.worker.request({"op": "check", "name": name, "tensors": descriptor, "new_blocks": new},
                                    self.deadline.left(), f"running the spec's check of '{name}'", fds)
        if "error" in reply or "internal" in reply:
            raise OracleFailed(str(reply.get("error") or _last(reply["internal"])))
        return reply.get("problem")

    def machine(self, known: Machine | None) -> Machine:
        reply = self.ask({"op": "machine", "known": known.to_json() if known else None},
                         "measuring copy bandwidth and matmul rate")
        return Machine.from_json(reply["machine"])


class CandidateClient:
    def __init__(self, worker: Worker, time_limit: float):
        self.worker, self.time_limit = worker, time_limit
        self.conduct: list[str] = []

    def _note(self, reply: dict) -> dict:
        for line in reply.get("conduct", ())[:20]:
            if isinstance(line, str) and line not in self.conduct:
                self.conduct.append(line[:300])
        return reply

    def load(self, entry: str, arguments: tuple[str, ...], name: str) -> str | None:
        """None when loaded, else the rejection."""
        reply = self._note(self.worker.request({"op": "load", "entry": entry, "arguments": list(arguments)},
                                               self.time_limit, f"importing the candidate {name}"))
        if "internal" in reply:
            return f"the candidate {name} broke the gate's worker while importing: " + _last(reply["internal"])
        return reply.get("rejection")

    def call(self, case: Case, outputs: tuple[str, ...], inplace: tuple[str, ...], doing: str) -> CandidateCall | str:
        """The call's results, or the failure (one line)."""
        descriptor, new, fds = self.worker.upload(case.tensors)
        poison = [channel.meta_of(n, case.base[n]).to_json() for n in outputs if n in case.base]
        message = {"op": "call", "tensors": descriptor, "values": case.values, "outputs": list(outputs),
                   "inplace": list(inplace), "poison": poison, "new_blocks": new}
        reply = self._note(self.worker.request(message, self.time_limit, doing, fds))
        if "failed" in reply:
            return str(reply["failed"])[:1000]
        if "internal" in reply:
            return "broke the gate's worker: " + _last(reply["internal"])
        groups = _split(self.worker.fetch(reply, self.time_limit, doing))
        aliased = [str(a)[:300] for a in reply.get("aliased", ())[:10]]
        return CandidateCall(groups.get("out", {}), groups.get("arg", {}), aliased)


def _last(text: str) -> str:
    lines = [ln for ln in str(text).strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "?"
