"""The recorder ``skel capture`` installs in the user's own run (every Python process of it).

This file is copied, alone, into the hook folder put first on the run's PYTHONPATH, so it imports
nothing from skel: only the standard library, and torch and safetensors when a launcher is called.
Its ``sitecustomize`` (``install()``) adds an import hook; when the target file is imported (matched by
its path, under whatever module name the user's package gives it), the hook wraps the file's launchers.

A wrapped call runs the real function and returns its result unchanged. Around it the recorder notes
the arguments (tensors: shape, dtype, strides, device; plain values as JSON), the return structure and,
for K calls of each signature (shapes, dtypes, flags), the input tensors themselves as they were before
the call (saved to CPU with safetensors) and which of them the call changed. Only those calls pay for
a copy. The K calls are the first and a sample spread over the run: calls 2, 4, 8, ... of the signature
are kept in turn, each replacing the oldest but the first once K are held, so a run leaves its first
call and its latest K-1 powers of two. (The first K calls alone would be the first token of every
layer in a decoder: empty states only.) Nothing the recorder does may break the run: its own failures
go to a log.

Records go to the staging folder as they happen (one JSON line per recorded call, one file of tensors
per kept call), so a run that crashes or calls ``os._exit`` still leaves what it recorded.
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import json
import os
import sys
import threading
import time

CONFIG_ENV = "SKEL_CAPTURE_CONFIG"
PLAIN = (bool, int, float, str, type(None))


def install() -> None:
    """Read the capture's config and add the import hook (a no-op outside a capture)."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        sys.meta_path.insert(0, _Finder(Recorder(config)))
    except Exception as exc:  # noqa: BLE001 - never break the user's run
        sys.stderr.write(f"skel capture: recorder not installed: {type(exc).__name__}: {exc}\n")


class _Finder(importlib.abc.MetaPathFinder):
    """Finds modules like every other finder does; wraps the loader of the one whose file is the target."""

    def __init__(self, recorder: "Recorder"):
        self.recorder = recorder
        self.busy = False

    def find_spec(self, name, path, target=None):
        if self.busy or self.recorder.installed:
            return None
        self.busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(name, path, target)
                if spec is not None:
                    break
        finally:
            self.busy = False
        origin = getattr(spec, "origin", None)
        if spec is None or spec.loader is None or not origin or not self.recorder.is_target(origin):
            return None
        spec.loader = _Loader(spec.loader, self.recorder)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, recorder: "Recorder"):
        self.inner, self.recorder = inner, recorder

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        self.recorder.wrap(module)

    def __getattr__(self, name):  # get_source, get_filename, ...: the real loader's
        return getattr(self.inner, name)


class Recorder:
    def __init__(self, config: dict):
        self.target = os.path.realpath(config["target"])
        self.launchers = list(config["launchers"])
        self.staging = config["staging"]
        self.per_signature = int(config["per_signature"])
        self.max_bytes = int(config["max_bytes"])
        self.installed = False
        self.counts: dict[str, dict] = {}  # signature -> {"launcher", "calls", "kept": [file, ...]}
        self.seq = 0
        self.local = threading.local()
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def is_target(self, origin: str) -> bool:
        return os.path.realpath(origin) == self.target

    def wrap(self, module) -> None:
        self.installed = True
        wrapped = []
        for name in self.launchers:
            fn = getattr(module, name, None)
            if callable(fn):
                setattr(module, name, self._wrapper(name, fn))
                wrapped.append(name)
        self._write_json(f"{self.pid}.module.json", {"module": module.__name__, "wrapped": wrapped})
        import atexit

        atexit.register(self._write_counts)

    def _wrapper(self, name: str, fn):
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None

        @functools.wraps(fn)
        def launcher(*args, **kwargs):
            if getattr(self.local, "depth", 0):  # a launcher called by another: only the outer call counts
                return fn(*args, **kwargs)
            try:
                call = self._before(name, sig, args, kwargs)
            except Exception as exc:  # noqa: BLE001
                self._log(f"{name}: not recorded ({type(exc).__name__}: {exc})")
                call = None
            self.local.depth = 1
            try:
                result = fn(*args, **kwargs)
            finally:
                self.local.depth = 0
            if call is not None:
                try:
                    self._after(call, result)
                except Exception as exc:  # noqa: BLE001
                    self._log(f"{name}: not recorded ({type(exc).__name__}: {exc})")
            return result

        return launcher

    # -- one call --------------------------------------------------------------------------------
    def _before(self, name: str, sig, args, kwargs) -> dict | None:
        import torch

        arguments, problem = _bind(sig, args, kwargs)
        described = [_describe(n, v, torch) for n, v in arguments]
        problem = problem or next((d["problem"] for d in described if d.get("problem")), None)
        key = json.dumps([name, [_sig_part(d) for d in described]])
        with self.lock:
            entry = self.counts.setdefault(key, {"launcher": name, "calls": 0, "kept": []})
            entry["calls"] += 1
            index, kept = entry["calls"], entry["kept"]
            first = index == 1
            keep = problem is None and index & (index - 1) == 0  # 1, 2, 4, 8, ...
            victim = None
            if keep and len(kept) >= self.per_signature:
                keep, victim = (True, kept[1]) if self.per_signature > 1 else (False, None)
            need = sum(_nbytes(v) for _, v in arguments if isinstance(v, torch.Tensor)) if keep else 0
            skipped = problem
            freed = _size(os.path.join(self.staging, victim)) if victim else 0
            if keep and self._used() - freed + need > self.max_bytes:
                keep, victim = False, None
                skipped = f"over --max-bytes ({self.max_bytes}): its tensors take {need} bytes"
            if not keep and not first:
                return None  # a call of a known signature that is not sampled: counted only
            self.seq += 1
            seq = self.seq
        before = {n: _compact(v).clone() for n, v in arguments if isinstance(v, torch.Tensor)} if keep else None
        return {"launcher": name, "seq": seq, "signature": key, "index": index, "args": described,
                "arguments": arguments, "before": before, "victim": victim,
                "skipped": None if keep else skipped or "not kept"}

    def _after(self, call: dict, result) -> None:
        import torch

        arguments = dict(call.pop("arguments"))
        before = call.pop("before")
        victim = call.pop("victim")
        call["returns"] = _returns(result, arguments, torch)
        call["file"] = None
        call["modified"] = []
        if before is not None:
            call["modified"] = [n for n, old in before.items() if not _same_bits(old, _compact(arguments[n]))]
            file = f"{self.pid}-{call['seq']}.safetensors"
            from safetensors.torch import save_file

            save_file({n: t.detach().cpu().contiguous() for n, t in before.items()},
                      os.path.join(self.staging, file))
            call["file"] = file
            with self.lock:
                kept = self.counts[call["signature"]]["kept"]
                if victim in kept:  # its line stays in the log; the merge reads only calls whose file exists
                    kept.remove(victim)
                    os.remove(os.path.join(self.staging, victim))
                kept.append(file)
        call.update(pid=self.pid, time=time.time())
        with self.lock:
            with open(os.path.join(self.staging, f"{self.pid}.calls.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps(call) + "\n")
            self._write_counts()

    # -- files -----------------------------------------------------------------------------------
    def _used(self) -> int:
        """Bytes of tensors already kept, by every process of the run (their files in the staging folder)."""
        return sum(e.stat().st_size for e in os.scandir(self.staging) if e.name.endswith(".safetensors"))

    def _write_counts(self) -> None:
        self._write_json(f"{self.pid}.counts.json", list(self.counts.items()))

    def _write_json(self, name: str, value) -> None:
        tmp = os.path.join(self.staging, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(value, f)
        os.replace(tmp, os.path.join(self.staging, name))

    def _log(self, line: str) -> None:
        try:
            with open(os.path.join(self.staging, f"{self.pid}.log"), "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError:
            pass


def _bind(sig, args, kwargs) -> tuple[list[tuple[str, object]], str | None]:
    """(name, value) of the arguments as passed (defaults left out), and why the call cannot be
    replayed by keyword, if it cannot."""
    if sig is None:
        return [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items()), "its signature is unknown"
    bound = sig.bind(*args, **kwargs)
    out, problem = [], None
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out += list(value.items())
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            out.append((name, value))
            problem = problem or f"*{name} cannot be passed by keyword"
        else:
            out.append((name, value))
            if kind is inspect.Parameter.POSITIONAL_ONLY:
                problem = problem or f"{name} is positional-only"
    return out, problem


def _describe(name: str, value, torch) -> dict:
    if isinstance(value, torch.Tensor):
        return {"name": name, "kind": "tensor", "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                "stride": list(value.stride()), "contiguous": value.is_contiguous(), "device": str(value.device),
                "storage_offset": value.storage_offset(), "storage": _storage_id(value)}
    if isinstance(value, torch.dtype):
        return {"name": name, "kind": "dtype", "value": str(value).removeprefix("torch.")}
    if _plain(value):
        return {"name": name, "kind": "value", "value": value, "tuple": isinstance(value, tuple)}
    return {"name": name, "kind": "other", "type": type(value).__name__,
            "problem": f"argument {name} is a {type(value).__name__}, which a spec cannot rebuild"}


def _plain(value) -> bool:
    if isinstance(value, PLAIN):
        return not (isinstance(value, float) and value != value)
    return isinstance(value, (tuple, list)) and all(_plain(v) for v in value)


def _sig_part(d: dict):
    if d["kind"] == "tensor":
        return [d["name"], d["shape"], d["dtype"], d["contiguous"]]
    return [d["name"], d.get("value", d.get("type"))]


def _storage_id(t) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001
        return 0


def _compact(t):
    """``t`` with every broadcast (stride 0) dim cut to size 1: the data it holds, once."""
    for dim, (size, stride) in enumerate(zip(t.shape, t.stride())):
        if stride == 0 and size > 1:
            t = t.narrow(dim, 0, 1)
    return t.detach()


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _nbytes(t) -> int:
    c = _compact(t)
    return c.numel() * c.element_size()


def _same_bits(a, b) -> bool:
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = a.contiguous().reshape(-1), b.contiguous().reshape(-1).to(a.device)
    if x.is_floating_point() or x.is_complex():
        return bool(torch.equal(x.view(torch.uint8), y.view(torch.uint8)))
    return bool(torch.equal(x, y))


def _returns(result, arguments: dict, torch) -> dict:
    """The return structure: one item per returned value (tensor shape and dtype, the input it is, None, a
    plain value or another object)."""
    many = isinstance(result, (tuple, list))
    items = list(result) if many else [result]
    inputs = {_storage_id(v): n for n, v in arguments.items() if isinstance(v, torch.Tensor)}
    out = []
    for value in items:
        if isinstance(value, torch.Tensor):
            out.append({"kind": "tensor", "shape": list(value.shape), "dtype": str(value.dtype).removeprefix("torch."),
                        "input": inputs.get(_storage_id(value))})
        elif value is None:
            out.append({"kind": "none"})
        elif _plain(value):
            out.append({"kind": "value", "value": value})
        else:
            out.append({"kind": "other", "type": type(value).__name__})
    return {"sequence": type(result).__name__ if many else None, "items": out}
