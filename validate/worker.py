"""The gate's workers: the processes that run kernel code, each contained, each serving the judge.

Two roles, never in one process:
- the **oracle** loads the spec and the original kernel: it makes the inputs, runs the float64
  reference and the original, runs the spec's custom checks on data the judge sends, measures the
  device, and times the original. It never imports the candidate.
- the **candidate** worker loads the candidate file (a copy in its scratch folder) and calls its
  launcher on inputs the judge sends, and times it. It never sees a reference output.

A worker answers each request with one JSON message; tensors it hands over are announced by
``TensorMeta`` and written, on the judge's next "write" request, into a shared block the judge
made. Nothing a worker says can make the judge accept: the judge compares, checks and decides.
What a candidate worker reports about itself (files it tried to write, gate code it replaced,
outputs aliasing inputs) can only count against it.
"""
from __future__ import annotations

import os
import socket
import sys
import traceback
from pathlib import Path
from typing import Any, Callable

from skel.validate import channel
from skel.validate.channel import Block, TensorMeta


def run(config: dict, chan_fd: int) -> None:
    """The worker's body (in the process the supervisor forked): contain, load, serve."""
    _redirect(config["log"])
    from skel.validate import sandbox

    os.environ.clear()
    os.environ.update(config.get("env", {}))
    sys.path[:] = config.get("sys_path", sys.path)

    writable = tuple(config.get("writable", ()))
    isolation = sandbox.contain(config["scratch"], writable, (chan_fd,), landlock=bool(config.get("landlock", True)),
                                triton_cache=config.get("triton_cache"))
    # Chosen before any kernel module is loaded: triton.jit reads it when a kernel is defined.
    if config["device"] == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    else:
        os.environ.pop("TRITON_INTERPRET", None)
    sock = socket.socket(fileno=chan_fd)
    hello = {"ready": True, "pid": os.getpid(), "isolation": isolation.to_dict()}
    if "triton" in sys.modules:  # its jitted standard library would be in the wrong mode
        hello = {"internal": "triton was imported before the worker chose TRITON_INTERPRET"}
    channel.send(sock, hello)
    role = Oracle(config) if config["role"] == "oracle" else Candidate(config)
    role.serve(sock)


def _redirect(log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


_TIMED = ("replay",)


class Role:
    """The request loop and what both roles share: blocks, tensors to hand over, GPU timing."""

    def __init__(self, config: dict):
        self.config = config
        self.device: str = config["device"]
        self.blocks: dict[int, Block] = {}
        self.pending: list[tuple[TensorMeta, Any]] = []
        self.timer = None

    def serve(self, sock: socket.socket) -> None:
        while True:
            try:
                message, fds = channel.receive(sock, accept_fds=True)
            except (channel.ChannelClosed, OSError):
                return
            for spec, fd in zip(message.get("new_blocks", ()), fds):
                old = self.blocks.pop(int(spec["id"]), None)
                if old:
                    old.close()
                self.blocks[int(spec["id"])] = Block(int(spec["size"]), fd)
            op = message.get("op")
            if op == "bye":
                channel.send(sock, {"bye": True})
                return
            handler = getattr(self, f"op_{op}", None)
            try:
                reply = handler(message) if handler else {"internal": f"unknown request {op!r}"}
            except Exception as exc:
                reply = self.failed(exc, op)
            if op not in _TIMED:  # a timing sample's round trip is measured by the judge: keep it bare
                reply.update(self.notes())
            channel.send(sock, reply)

    def notes(self) -> dict:
        return {}

    def failed(self, exc: Exception, op: str) -> dict:
        return {"internal": traceback.format_exc()[-4000:]}

    def interpreted(self, module) -> None:
        """In Triton's interpreter (``interpret``): accesses outside the launch's tensors caught (``bounds``), float
        arguments and loop indices typed as compiled, bf16 math on values, autotuners on one config, aliases of
        its builtins (``exp = tl.exp``, libdevice) bound late."""
        if self.device == "cpu":
            from skel.validate.bounds import bounds_checked
            from skel.validate.interpret import (bf16_on_values, cuda_device_scopes_on_cpu, float_scalars_as_tensors,
                                                 late_bind_aliases, loop_indices_as_tensors, one_config_autotune)

            bounds_checked()
            cuda_device_scopes_on_cpu()
            float_scalars_as_tensors()
            loop_indices_as_tensors()
            bf16_on_values()
            for line in one_config_autotune(module):
                print(f"autotuned on its first config only (no driver to benchmark on): {line}", flush=True)
            for line in late_bind_aliases(module):  # for the worker's log: what the interpreter was helped with
                print(f"late-bound alias {line}", flush=True)

    # -- tensors --------------------------------------------------------------------------------------
    def hand_over(self, named: list[tuple[str, Any]]) -> list[dict]:
        """Keep ``named`` tensors for the judge's next "write"; returns their descriptions."""
        self.pending = [(channel.meta_of(name, t), t) for name, t in named]
        return [meta.to_json() for meta, _ in self.pending]

    def op_write(self, message: dict) -> dict:
        block = self.blocks[int(message["block"])]
        offsets = [int(o) for o in message["offsets"]]
        channel.write_tensors(block, [m for m, _ in self.pending], offsets, [t for _, t in self.pending])
        self.pending = []
        return {"written": True}

    def received(self, message: dict) -> dict[str, Any]:
        """The tensors (own copies on this worker's device) and plain values a request carries."""
        args: dict[str, Any] = {k: channel.decode_value(v) for k, v in message.get("values", {}).items()}
        upload = message.get("tensors")
        if upload:
            block = self.blocks[int(upload["block"])]
            metas = [TensorMeta.from_json(m) for m in upload["metas"]]
            args.update(channel.read_tensors(block, metas, [int(o) for o in upload["offsets"]], self.device))
        return args

    # -- timing (GPU) -------------------------------------------------------------------------------------
    def start_timer(self, fn: Callable, arg_sets: list[dict], message: dict) -> dict:
        from skel.validate.bench import GraphTimer

        self.timer = GraphTimer(fn, arg_sets, tuple(message["inplace"]), int(message["min_graph_calls"]))
        return {"per_graph": self.timer.per_graph}

    def op_replay(self, message: dict) -> dict:
        return {"us": self.timer.replay(int(message["reps"]))}

    def op_timed_results(self, message: dict) -> dict:
        return {"tensors": self.hand_over(self.timer.results())}


class Oracle(Role):
    """Spec and original kernel: inputs, the float64 reference, the original's outputs, timing A."""

    def __init__(self, config: dict):
        super().__init__(config)
        self.spec = None
        self.original = None
        self.kernel: Path | None = None  # the original's file: its failures name their line there
        self.case: dict | None = None
        self.sets: list[dict] = []

    def failed(self, exc: Exception, op: str) -> dict:
        """Here only the spec and the original run besides the gate: their failure is the input's, said in
        one line with the deepest line of the spec or kernel file it passed through."""
        from skel.validate.numerics import describe_exception

        traceback.print_exc()  # the whole story in the worker's log
        where = next((Path(p) for p in (self.config.get("spec"), self.config.get("kernel")) if p
                      and any(Path(f.filename) == Path(p) for f in traceback.extract_tb(exc.__traceback__))), None)
        return {"error": f"the spec or original kernel failed ({op}): {describe_exception(exc, where)}"}

    def op_hello(self, message: dict) -> dict:
        from skel.validate.load import TargetError, load_module, load_notes, load_spec
        from skel.validate.numerics import describe_exception

        try:
            self.spec = load_spec(self.config["spec"])
        except TargetError as exc:
            return {"error": str(exc)}
        info = self.spec.info().to_json()
        if not message.get("load_kernel", True):
            return {"spec": info}
        kernel = Path(self.config["kernel"])
        try:
            module = load_module(kernel, "original")
            self.interpreted(module)
        except Exception as exc:
            return {"error": f"the original kernel {kernel} does not import: {describe_exception(exc, kernel)}"}
        entry = self.config.get("entry") or self.spec.entry
        self.original = getattr(module, entry, None)
        self.kernel = kernel
        if not callable(self.original):
            return {"error": f"the original kernel {kernel} defines no launcher '{entry}'"}
        return {"spec": info, "notes": list(load_notes())}

    def op_infer_dims(self, message: dict) -> dict:
        from skel.validate.spec import infer_dims

        dims, note = infer_dims(self.spec)
        return {"dims": [list(d) for d in dims], "note": note}

    def op_describe(self, message: dict) -> dict:
        """Roofline bytes/FLOPs per shape and the launcher's argument names (from the first shape's inputs)."""
        from skel.validate.spec import Shape

        dtype = message["dtype"]
        shapes = [Shape.parse(label) for label in message["shapes"]]
        names = list(self.spec.make_inputs(shapes[0], dtype, 0, "cpu" if self.device == "cpu" else self.device))
        return {"roofline": {s.label: [int(self.spec.bytes(s, dtype)), int(self.spec.flops(s, dtype))] for s in shapes},
                "arguments": names}

    def op_case(self, message: dict) -> dict:
        """Fresh inputs for (shape, dtype, seed), the reference on a copy, the original on a copy."""
        from skel.validate.numerics import CallFailed, clone_inputs, run_call
        from skel.validate.spec import Shape

        spec = self.spec
        shape = Shape.parse(message["shape"])
        seed = int(message["seed"])
        inputs = spec.make_inputs(shape, message["dtype"], seed, self.device)
        values, tensors = _split(inputs)
        named = [(f"in.{k}", v) for k, v in tensors.items()]
        reply: dict = {"values": values}
        if spec.reference is not None:
            ref = spec.reference(**clone_inputs(inputs))
            named += [(f"ref.{k}", v) for k, v in ref.items() if _is_tensor(v)]
        self.case = {"inputs": inputs, "ref": ref if spec.reference is not None else {}}
        try:
            base = run_call(self.original, clone_inputs(inputs), spec.outputs, spec.inplace, self.device, self.kernel)
            named += [(f"base.{k}", v) for k, v in base.outputs.items()]
            if spec.reference is None:
                named += self._self_oracle(inputs, seed, reply)
                if spec.cross_reference is not None:
                    named += self._cross_reference(inputs, reply)
        except CallFailed as exc:
            reply["original_failure"] = str(exc)
        reply["tensors"] = self.hand_over(named)
        return reply

    def _self_oracle(self, inputs: dict, seed: int, reply: dict) -> list[tuple[str, Any]]:
        """Without a reference: the original on upcast inputs ("ref") and on inputs one ulp away ("pert");
        the judge calibrates the accepted error from them (``calibrate``). The ulp is the compute precision's:
        the upcast inputs moved by one float32 ulp (``pert_of`` "ref"), the inputs' own dtype only where the
        launcher refuses float32 (``pert_of`` "base")."""
        from skel.validate.calibrate import perturbed, upcast
        from skel.validate.numerics import CallFailed, run_call

        spec, named = self.spec, []
        wide, pert = upcast(inputs), None
        if wide is not None:
            moved = perturbed(wide, seed)  # before the upcast run updates its in-place inputs
            try:
                ref = run_call(self.original, wide, spec.outputs, spec.inplace, self.device, self.kernel)
                named += [(f"ref.{k}", v) for k, v in ref.outputs.items()]
                pert = run_call(self.original, moved, spec.outputs, spec.inplace, self.device, self.kernel)
                reply["pert_of"] = "ref"
            except CallFailed as exc:
                reply["upcast_note"] = f"the original refuses float32 inputs ({exc}); its own run is the reference"
        if pert is None:
            pert = run_call(self.original, perturbed(inputs, seed), spec.outputs, spec.inplace, self.device,
                            self.kernel)
            reply["pert_of"] = "base"
        named += [(f"pert.{k}", v) for k, v in pert.outputs.items()]
        return named

    def _cross_reference(self, inputs: dict, reply: dict) -> list[tuple[str, Any]]:
        """The project's own reference on float64 copies of the inputs ("x64"); where it fails, why."""
        from skel.validate.numerics import describe_exception
        from skel.validate.reference import float64, named_outputs

        try:
            result = self.spec.cross_reference(**float64(inputs))
        except Exception as exc:
            reply["cross_note"] = f"the reference fails on float64 inputs ({describe_exception(exc, None)})"
            return []
        got = named_outputs(result, self.spec.outputs)
        if not got:
            reply["cross_note"] = "the reference returns none of the launcher's outputs"
        return [(f"x64.{k}", v) for k, v in got.items()]

    def op_check(self, message: dict) -> dict:
        """The spec's own check of a candidate output (data from the judge) against this case."""
        got = self.received(message)["got"]
        problem = self.spec.checks[message["name"]](got, self.case["ref"], self.case["inputs"])
        return {"problem": None if problem is None else str(problem)}

    def op_machine(self, message: dict) -> dict:
        from skel.validate.bench import Machine, measure_machine

        known = Machine.from_json(message["known"]) if message.get("known") else None
        return {"machine": measure_machine(known).to_json()}

    def op_floor(self, message: dict) -> dict:
        """The shape's floor (skel.validate.floor), timed here, in the process that times the original."""
        from skel.validate.floor import copy_floor_us

        us, grid = copy_floor_us(int(message["bytes"]), int(message["l2_bytes"]), int(message["max_sets"]),
                                 int(message["min_calls"]))
        return {"us": us, "grid": grid}

    def op_bench_inputs(self, message: dict) -> dict:
        """The timing input sets (kept here for A; handed to the judge for B)."""
        from skel.validate.spec import Shape

        shape = Shape.parse(message["shape"])
        self.sets = [self.spec.make_inputs(shape, message["dtype"], int(message["seed_base"]) + i, "cuda")
                     for i in range(int(message["sets"]))]
        named, values = [], []
        for i, inputs in enumerate(self.sets):
            plain, tensors = _split(inputs)
            values.append(plain)
            named += [(f"set{i}.{k}", v) for k, v in tensors.items()]
        return {"tensors": self.hand_over(named), "set_values": values}

    def op_bench_setup(self, message: dict) -> dict:
        return self.start_timer(self.original, self.sets, message)


class Candidate(Role):
    """The candidate's launcher on the judge's inputs; timing B. Reports its own misconduct."""

    def __init__(self, config: dict):
        super().__init__(config)
        self.launcher = None
        self.path = Path(config["candidate"])
        self.watch = None

    def notes(self) -> dict:
        if self.watch is None:
            return {}
        return {"conduct": self.watch.findings()}

    def op_load(self, message: dict) -> dict:
        from skel.validate.conduct import Watch
        from skel.validate.load import load_module, signature_problem
        from skel.validate.numerics import describe_exception

        name = self.config["display_name"]
        self.watch = Watch(self.config["scratch"], tuple(self.config.get("writable", ())))
        try:
            module = load_module(self.path, "candidate", self.config.get("package_of"))
            self.interpreted(module)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from a module body too
            return {"rejection": f"the candidate {name} does not import: {describe_exception(exc, self.path)}"}
        entry = message["entry"]
        launcher = getattr(module, entry, None)
        if launcher is None:
            return {"rejection": f"the candidate {name} defines no launcher '{entry}'"}
        if not callable(launcher):
            return {"rejection": f"the candidate's '{entry}' is a {type(launcher).__name__}, not a function"}
        problem = signature_problem(launcher, tuple(message["arguments"]))
        if problem:
            return {"rejection": f"the candidate's launcher has the wrong signature: {problem}"}
        self.launcher = launcher
        return {"loaded": True}

    def op_call(self, message: dict) -> dict:
        """One call on the judge's inputs, its allocations poisoned; hands over the outputs and every
        tensor argument as the call left it (the judge checks that inputs are unchanged)."""
        from skel.validate.numerics import CallFailed, poison_allocator, poisoned_allocations, run_call
        from skel.validate.spec import passed_over

        args = self.received(message)
        outputs, inplace = tuple(message["outputs"]), tuple(message["inplace"])
        poison_allocator({m["name"]: _empty_like_meta(m, self.device) for m in message.get("poison", ())})
        try:
            with poisoned_allocations():
                result = run_call(self.launcher, args, outputs, inplace, self.device, self.path)
        except CallFailed as exc:
            return {"failed": str(exc)}
        named = [(f"out.{k}", result.outputs[k]) for k in outputs if not passed_over(k)]  # "_x": not handed back
        named += [(f"arg.{k}", v) for k, v in args.items() if _is_tensor(v)]
        return {"tensors": self.hand_over(named), "aliased": result.aliased}

    def op_bench_setup(self, message: dict) -> dict:
        received = self.received(message)
        sets = []
        for i, plain in enumerate(message["set_values"]):
            args = {k: channel.decode_value(v) for k, v in plain.items()}
            prefix = f"set{i}."
            args.update({k[len(prefix):]: v for k, v in received.items() if k.startswith(prefix)})
            sets.append(args)
        return self.start_timer(self.launcher, sets, message)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def _split(inputs: dict[str, Any]) -> tuple[dict, dict]:
    """(plain values as JSON, tensors) of a launcher's keyword arguments."""
    plain, tensors = {}, {}
    for name, value in inputs.items():
        if _is_tensor(value):
            tensors[name] = value
        else:
            try:
                plain[name] = channel.encode_value(value)
            except TypeError as exc:
                raise TypeError(f"input '{name}' is {exc}") from None
    return plain, tensors


def _empty_like_meta(meta: dict, device: str):
    import torch

    m = TensorMeta.from_json(meta)
    return torch.empty_strided(m.shape, m.stride, dtype=getattr(torch, m.dtype), device=device)
