"""Where skel's independent pieces of work run when one machine is not enough: Ray tasks.

One machine is the default and needs nothing from here: ``skel mine`` keeps its process pool and
``skel apply`` judges its candidates one after the other. ``--executor ray`` hands the same pieces
(a file to profile, a range of commits to diff, a candidate to judge) to a Ray cluster as tasks of
one module-level function each. Ray schedules them, retries a task whose worker process or node
died (``max_retries``), and the results stream back here as they finish (``ray.wait``); the caller
(the driver) stays the only process that writes the catalog.

A task that still fails after its retries comes back as a ``TaskFailed`` value, never as an
exception, so one bad task cannot stop a run; what to do with it is the caller's business.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from skel.errors import UsageError

RAY_HINT = "pip install 'skel[ray]'"


class ExecutorError(UsageError):
    """Ray is missing or the cluster cannot be reached (a usage error: exit status 2)."""


@dataclass(frozen=True)
class TaskFailed:
    """A task that did not return a value after its retries (its worker or node kept dying, say)."""

    error: str


@dataclass(frozen=True)
class Tally:
    """Where a batch of tasks stands: done (returned a value), running, failed (after retries)."""

    total: int
    done: int
    running: int
    failed: int

    def line(self, unit: str = "tasks") -> str:
        queued = self.total - self.done - self.failed - self.running
        return (f"{self.done}/{self.total} {unit} done, {self.running} running, {queued} queued, "
                f"{self.failed} failed")


@dataclass(frozen=True)
class Resources:
    """What one task needs of a node."""

    cpus: float = 1.0
    gpus: float = 0.0
    custom: tuple[tuple[str, float], ...] = ()
    own_process: bool = False  # the worker process exits after the task (it touched a GPU itself, say)


class RayExecutor:
    """Run a function over many items as Ray tasks; results stream back in completion order.

    ``address``: an existing cluster ("auto", "ray://head:10001", "10.0.0.1:6379"); None joins the
    cluster named by ``$RAY_ADDRESS`` or, without one, starts a local one of ``num_cpus`` CPUs.
    ``max_retries``: how often Ray re-runs a task whose worker died before it returned.
    """

    def __init__(self, address: str | None = None, num_cpus: int | None = None, max_retries: int = 3):
        self.address, self.num_cpus, self.max_retries = address, num_cpus, max_retries
        self._remote: dict[tuple, Any] = {}

    # -- the cluster ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Connect to (or start) the cluster; a clear ``ExecutorError`` when that is impossible."""
        ray = _import_ray()
        _cluster_messages_to_stderr()
        if ray.is_initialized():
            return
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
        if address is None:
            kwargs.update(num_cpus=self.num_cpus, include_dashboard=False)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            try:
                ray.init(address=address, **kwargs)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
                raise ExecutorError(f"cannot reach {where}: {exc}") from None

    def slots(self, res: Resources) -> int:
        """How many tasks needing ``res`` the cluster can run at once (at least 1)."""
        ray = _import_ray()
        total = ray.cluster_resources()
        counts = []
        if res.cpus:
            counts.append(int(total.get("CPU", 1) // res.cpus))
        if res.gpus:
            counts.append(int(total.get("GPU", 0) // res.gpus))
        return max(1, min(counts) if counts else 1)

    def resources(self) -> dict[str, float]:
        """The cluster's total resources ("CPU", "GPU", "accelerator_type:H200", ...)."""
        self.start()
        return dict(_import_ray().cluster_resources())

    # -- tasks ---------------------------------------------------------------------------------------
    def map(self, fn: Callable, items: Sequence, res: Resources = Resources(),
            on_tally: Callable[[Tally], None] | None = None, window: int | None = None) -> Iterator[tuple[int, Any]]:
        """(index into ``items``, ``fn(item)`` or ``TaskFailed``) as each task finishes.

        At most ``window`` tasks (default: twice what the cluster runs at once) are submitted ahead,
        so "running" means running and a Ctrl-C leaves little queued work behind. Every index comes
        back exactly once.
        """
        ray = _import_ray()
        self.start()
        remote = self._remote_of(fn, res)
        slots = self.slots(res)
        window = max(1, window or 2 * slots)
        pending: dict[Any, int] = {}
        next_item, done, failed = 0, 0, 0

        def tally() -> None:
            if on_tally:
                on_tally(Tally(len(items), done, min(len(pending), slots), failed))

        try:
            while next_item < len(items) or pending:
                while next_item < len(items) and len(pending) < window:
                    pending[remote.remote(items[next_item])] = next_item
                    next_item += 1
                tally()
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    index = pending.pop(ref)
                    try:
                        value = ray.get(ref)
                        done += 1
                    except ray.exceptions.RayError as exc:  # retries spent: the worker or node kept dying
                        value = TaskFailed(_failure(exc))
                        failed += 1
                    yield index, value
            tally()
        finally:
            for ref in pending:  # the caller stopped early (Ctrl-C, an error): drop what is queued
                ray.cancel(ref, force=True)

    def call(self, fn: Callable, item: Any, res: Resources = Resources()) -> Any:
        """One task, waited for: ``fn(item)`` or ``TaskFailed``."""
        return next(self.map(fn, [item], res))[1]

    def _remote_of(self, fn: Callable, res: Resources):
        key = (fn.__module__, fn.__qualname__, res)
        if key not in self._remote:
            ray = _import_ray()
            wrapped = ray.remote(max_calls=1)(fn) if res.own_process else ray.remote(fn)
            self._remote[key] = wrapped.options(
                num_cpus=res.cpus, num_gpus=res.gpus, resources=dict(res.custom) or None,
                max_retries=self.max_retries, retry_exceptions=False)
        return self._remote[key]


def executor_from_args(name: str | None, address: str | None) -> RayExecutor | None:
    """The CLI's ``--executor NAME [--address ADDR]``: None for the local default."""
    if name in (None, "local"):
        if address:
            raise UsageError("--address needs --executor ray")
        return None
    if name != "ray":
        raise UsageError(f"--executor {name}: choose local or ray")
    _import_ray()
    return RayExecutor(address=address)


def add_executor_args(parser) -> None:
    g = parser.add_argument_group("scale-out (Ray)")
    g.add_argument("--executor", choices=("local", "ray"), default=None,
                   help="where the work runs: this machine (default) or Ray tasks (needs skel[ray])")
    g.add_argument("--address", metavar="ADDR", default=None,
                   help="with --executor ray: the cluster to join (default: $RAY_ADDRESS, else a local one)")


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"--executor ray needs Ray, which is not installed here: {RAY_HINT}") from None
    return ray


def _cluster_messages_to_stderr() -> None:
    """Ray's driver prints the cluster's messages ("a worker died ...") on stdout, where ``--json`` output
    goes: they are sent to stderr instead (Ray keeps no option for it; left alone if its internals moved)."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:
        return
    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "skel_stderr", False):
        return

    def to_stderr(data, *args, **kwargs):
        return original({**data, "is_err": True}, *args, **kwargs)

    to_stderr.skel_stderr = True
    ray_worker.print_to_stdstream = to_stderr


def _failure(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = next((ln for ln in text if ln.strip()), "")
    return f"{type(exc).__name__}: {first[:300]}"
