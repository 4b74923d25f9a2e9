"""What a candidate does inside its own worker that counts against it.

A Python audit hook (it cannot be removed once added) records attempts to write, delete or rename
files outside the worker's scratch folder and signals sent to processes that are not the worker's
own; a snapshot of the functions the worker and its timing rely on (torch's comparisons, copies,
events and graphs; the gate's own modules) shows what the candidate replaced. These findings are
the candidate's own process reporting on itself, so they can only ever reject: the judge's
verdict never rests on their absence (Landlock, the judge's own comparisons and clocks do that).
"""
from __future__ import annotations

import os
import sys
from typing import Any

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PATH_EVENTS = {"os.remove": "delete", "os.rmdir": "delete", "shutil.rmtree": "delete", "os.rename": "rename",
                "os.replace": "rename", "os.truncate": "truncate", "os.link": "link", "os.symlink": "link",
                "os.chmod": "chmod", "os.chown": "chown", "os.mkdir": "create"}
_SIGNAL_EVENTS = {"os.kill", "os.killpg"}
_MAX = 20

# What the worker's reports and the timing rest on (module, dotted attribute).
_WATCHED_TORCH = (
    "equal", "allclose", "isfinite", "isnan", "empty", "empty_like", "empty_strided", "frombuffer",
    "Tensor.copy_", "Tensor.clone", "Tensor.to", "Tensor.cpu", "Tensor.__eq__", "Tensor.new_empty",
    "Tensor.untyped_storage", "cuda.synchronize", "cuda.Event", "cuda.Event.record", "cuda.Event.synchronize",
    "cuda.Event.elapsed_time", "cuda.CUDAGraph", "cuda.CUDAGraph.replay", "cuda.graph", "cuda.Stream",
)
WATCHED_MODULES = ("skel.validate.channel", "skel.validate.bench", "skel.validate.numerics", "skel.validate.worker",
                   "skel.validate.conduct", "skel.validate.sandbox", "skel.validate.load", "skel.validate.judge",
                   "skel.validate.gate", "skel.validate.timing", "skel.validate.roles", "skel.validate.session",
                   "skel.validate.integrity", "skel.validate.result", "skel.validate.spec")


class Watch:
    def __init__(self, scratch: str, writable: tuple[str, ...] = ()):
        import importlib

        for name in WATCHED_MODULES:  # loaded before the candidate, so that replacing them shows
            importlib.import_module(name)
        self.allowed = tuple(os.path.realpath(p).rstrip("/") + "/" for p in (scratch, "/dev", "/proc/self", *writable))
        self.attempts: list[str] = []
        self.baseline = snapshot()
        self.me = os.getpid()
        sys.addaudithook(self._hook)

    def findings(self) -> list[str]:
        swapped = [f"replaced {name} (the gate's or torch's code) in its process" for name in replaced(self.baseline)]
        return (self.attempts + swapped)[:_MAX]

    def _outside(self, path: Any) -> str | None:
        if isinstance(path, int):
            return None
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return None
        real = os.path.realpath(path)
        if (real + "/").startswith(self.allowed) or real == os.devnull:
            return None
        return real

    def _note(self, text: str) -> None:
        if len(self.attempts) < _MAX and text not in self.attempts:
            self.attempts.append(text)

    def _hook(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & _WRITE_FLAGS)
            where = self._outside(path) if writing else None
            if where:
                self._note(f"tried to write {where} (outside its scratch folder)")
        elif event in _PATH_EVENTS:
            for path in args[:2]:
                where = self._outside(path)
                if where:
                    self._note(f"tried to {_PATH_EVENTS[event]} {where} (outside its scratch folder)")
                    break
        elif event in _SIGNAL_EVENTS and args and isinstance(args[0], int):
            target = args[0]
            if target not in (0, self.me, -os.getpgid(0)) and not _child_of(target, self.me):
                self._note(f"sent signal {args[1] if len(args) > 1 else '?'} to process {target}, not its own")


def _child_of(pid: int, parent: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1]) == parent
    except (OSError, IndexError, ValueError):
        return False


def snapshot() -> dict[str, tuple[int, int]]:
    """Identity (and code identity, for functions) of every watched function and class, by dotted name."""
    out: dict[str, tuple[int, int]] = {}
    if "torch" in sys.modules:
        for dotted in _WATCHED_TORCH:
            obj = _resolve(f"torch.{dotted}")
            if obj is not None:
                out[f"torch.{dotted}"] = _ident(obj)
    for name in WATCHED_MODULES:
        module = sys.modules.get(name)
        if module is None:
            continue
        for attr, obj in vars(module).items():
            if callable(obj) and getattr(obj, "__module__", None) == name:
                out[f"{name}.{attr}"] = _ident(obj)
                if isinstance(obj, type):
                    for meth, fn in vars(obj).items():
                        if callable(fn):
                            out[f"{name}.{attr}.{meth}"] = _ident(fn)
    return out


def replaced(baseline: dict[str, tuple[int, int]]) -> list[str]:
    """The dotted names in ``baseline`` that now name something else (or nothing)."""
    return [name for name, ident in baseline.items() if _ident(_resolve(name)) != ident]


def _resolve(dotted: str) -> Any:
    """The object a dotted name (module prefix, then attributes) names now, or None."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is not None:
            obj = module
            for part in parts[cut:]:
                obj = vars(obj).get(part) if isinstance(obj, type) else getattr(obj, part, None)
                if obj is None:
                    return None
            return obj
    return None


def _ident(obj: Any) -> tuple[int, int]:
    if obj is None:
        return (0, 0)
    code = getattr(obj, "__code__", None)
    return id(obj), id(code) if code is not None else 0
