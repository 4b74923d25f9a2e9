"""`skel apply --executor ray`: each gate judgement is a Ray task holding one GPU (or one CPU with --device cpu).

The task is the judge: it calls ``skel.validate.gate.validate`` exactly as the local apply does, so the
original and the candidate still run in two contained workers forked from the task's own fork server and
the judge (the task's process) runs no kernel code. A run-off is one task too (both sides timed on its
GPU); a task whose process or node dies is re-run by Ray (``max_retries``) from the start of its
judgement, and since a judgement holds no state outside itself the verdict is the one it would have given.

The roofline's rates are measured once per GPU model before the first judgement (one task per
``accelerator_type`` the cluster reports) and handed to every judgement on that model, so the "% of
roofline" of one report shares one denominator per GPU model. Files (target, spec, candidates, the report
folder) are passed by path: on a cluster of several nodes they must be at the same path everywhere (a
shared file system); ``skel mine`` needs no such thing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator, Sequence

from skel.executor import RayExecutor, Resources, TaskFailed
from skel.validate.gate import GateInputError

ACCELERATOR = "accelerator_type:"


@dataclass(frozen=True)
class GateJob:
    """One ``validate()`` call, as data: what ``pipeline.apply._gate`` would pass."""

    original: str
    candidate: str
    spec: str | None
    entry: str | None
    shapes: object  # a shape-set name or shape labels
    device: str
    time_limit: float
    require: str = "correct"
    timed: bool = True  # False: numerics only (bench=False)
    machines: tuple = ()  # (accelerator type, bench.Machine) pairs; "" for a cluster that names none
    cwd: str = ""


@dataclass(frozen=True)
class GateRefused:
    """The gate could not judge (GateInputError in the task): the same message the local call raises."""

    message: str


def gate_task(job: GateJob):
    """A Ray task: the gate's verdict (GateResult) on one candidate, or GateRefused."""
    from skel.validate.gate import validate

    if job.cwd and os.path.isdir(job.cwd):
        os.chdir(job.cwd)  # the gate watches the working directory: the driver's, as in a local run
    kwargs = {"machine": _machine_here(dict(job.machines))} if job.timed else {"bench": False}
    try:
        return validate(job.original, job.candidate, spec=job.spec, entry=job.entry, shapes=job.shapes,
                        device=job.device, time_limit=job.time_limit, require=job.require, **kwargs)
    except GateInputError as exc:
        return GateRefused(str(exc))


def roofline_task(_: object):
    """A Ray task on one GPU: the roofline's rates (copy bandwidth, matmul rate) of its GPU model."""
    from skel.validate.bench import measure_machine

    return measure_machine()


class RemoteGate:
    """The gate calls of one ``skel apply``, sent to Ray."""

    def __init__(self, executor: RayExecutor):
        self.executor = executor
        self.machines: tuple | None = None

    def default_device(self) -> str:
        return "cuda" if self.executor.resources().get("GPU", 0) >= 1 else "cpu"

    def check(self, device: str) -> None:
        """A judgement on ``device`` must be schedulable: a GPU task on a cluster without GPUs would wait forever."""
        if device == "cuda" and self.executor.resources().get("GPU", 0) < 1:
            from skel.errors import UsageError

            raise UsageError("--executor ray --device cuda: the Ray cluster has no GPU (judge on its CPUs with "
                             "--device cpu, or add a GPU node)")

    def job(self, original, candidate, spec, entry, shapes, device: str, time_limit: float,
            require: str = "correct", timed: bool = True) -> GateJob:
        machines = self._machines() if device == "cuda" and timed else ()
        return GateJob(str(original), str(candidate), None if spec is None else str(spec), entry, shapes, device,
                       time_limit, require, timed, machines, os.getcwd())

    def validate(self, job: GateJob):
        """One judgement, waited for: what ``validate()`` returns, or GateInputError as it raises."""
        result = self.executor.call(gate_task, job, _resources(job.device))
        if isinstance(result, (GateRefused, TaskFailed)):
            raise GateInputError(_refusal(result))
        return result

    def validate_many(self, jobs: Sequence[GateJob], on_tally=None) -> Iterator[tuple[int, object]]:
        """(index, GateResult or GateInputError) as the judgements finish, all at once on the cluster."""
        if not jobs:
            return
        for index, result in self.executor.map(gate_task, list(jobs), _resources(jobs[0].device), on_tally):
            if isinstance(result, (GateRefused, TaskFailed)):
                result = GateInputError(_refusal(result))
            yield index, result

    def _machines(self) -> tuple:
        """Per GPU model of the cluster, its roofline rates (measured once, by one task on that model)."""
        if self.machines is None:
            kinds = sorted(k for k in self.executor.resources() if k.startswith(ACCELERATOR))
            res = ([Resources(cpus=1, gpus=1, custom=((k, 0.001),), own_process=True) for k in kinds]
                   or [Resources(cpus=1, gpus=1, own_process=True)])
            found = []
            for kind, r in zip(kinds or [""], res):
                m = self.executor.call(roofline_task, None, r)
                if not isinstance(m, TaskFailed):
                    found.append((kind[len(ACCELERATOR):], m))
            self.machines = tuple(found)
        return self.machines


def _resources(device: str) -> Resources:
    return Resources(cpus=1, gpus=1) if device == "cuda" else Resources(cpus=1)


def _refusal(result) -> str:
    if isinstance(result, GateRefused):
        return result.message
    return f"the Ray task judging it failed after its retries ({result.error})"


def _machine_here(machines: dict):
    """The rates measured on this node's GPU model (None: the judgement measures its own)."""
    if not machines:
        return None
    if len(machines) == 1 and "" in machines:
        return machines[""]
    import ray

    node = ray.get_runtime_context().get_node_id()
    for n in ray.nodes():
        if n.get("NodeID") == node:
            for key in n.get("Resources", {}):
                if key.startswith(ACCELERATOR) and key[len(ACCELERATOR):] in machines:
                    return machines[key[len(ACCELERATOR):]]
    return None
