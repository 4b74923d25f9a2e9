"""Numerics building blocks: error metrics, one guarded launcher call, allocation poisoning.

The comparisons run in the judge (``judge.ShapeJudge``); ``run_call`` and the poisoning run in a
worker, next to the code they call.
"""
from __future__ import annotations

import ast
import contextlib
import re
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from skel.validate.spec import Tolerance, passed_over


@dataclass(frozen=True)
class Comparison:
    rel_rms: float
    max_abs: float
    passed: bool
    detail: str  # "rel-RMS 1.2e-01 (limit 8e-03), max error 0.5 (limit 0.03) at [0, 1]: got .., expected .."


class CallFailed(Exception):
    """The launcher raised, returned the wrong things, or timed out inside; message is one line."""


@dataclass
class CallResult:
    outputs: dict[str, torch.Tensor]  # returned tensors by name, then the in-place inputs after the call
    aliased: list[str] = field(default_factory=list)


def index_str(flat: int, shape: tuple[int, ...]) -> str:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size if size else 0)
        flat //= size if size else 1
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def _first(mask: torch.Tensor) -> int:
    return int(mask.reshape(-1).nonzero()[0, 0])


def _flat64(got: torch.Tensor, expected: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    g = got.detach().to(torch.float64).reshape(-1)
    return g, expected.detach().to(torch.float64).reshape(-1).to(g.device)


def _rel(g: torch.Tensor, e: torch.Tensor) -> float:
    denom, num = float(e.norm()), float((g - e).norm())
    return num / denom if denom > 0 else (0.0 if num == 0 else float("inf"))


def rel_rms(got: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative RMS error of ``got`` against ``expected`` (same number of elements), in float64."""
    return _rel(*_flat64(got, expected))


def compare(got: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> Comparison:
    """Relative RMS and max error of ``got`` against ``expected`` (both finite, same shape)."""
    g, e = _flat64(got, expected)
    diff = (g - e).abs()
    rel = _rel(g, e)
    worst = float(diff.max()) if diff.numel() else 0.0
    passed = rel <= tol.rel_rms and worst <= tol.max_abs
    if diff.numel() == 0:
        return Comparison(rel, worst, passed, "empty")
    over = diff > tol.max_abs
    flat = _first(over) if bool(over.any()) else int(diff.argmax())
    detail = (
        f"rel-RMS error {rel:.2e} (limit {tol.rel_rms:.0e}), max error {worst:.3g} (limit {tol.max_abs:g});"
        f" {'first element over the limit' if bool(over.any()) else 'largest error'} at"
        f" {index_str(flat, tuple(got.shape))}: got {float(g[flat]):.6g}, expected {float(e[flat]):.6g}"
    )
    return Comparison(rel, worst, passed, detail)


def nonfinite(name: str, got: torch.Tensor) -> str | None:
    if not got.is_floating_point():
        return None
    bad = ~torch.isfinite(got)
    count = int(bad.sum())
    if not count:
        return None
    flat = _first(bad)
    value = float(got.reshape(-1)[flat])
    return (
        f"'{name}' has {count} NaN/inf of {got.numel()} elements (first at"
        f" {index_str(flat, tuple(got.shape))}: {value}): elements left unwritten or computed invalid"
    )


def describe_exception(exc: BaseException, source: Path | None) -> str:
    """One line: the exception and the deepest line of ``source`` it passed through."""
    where = ""
    frames = traceback.extract_tb(exc.__traceback__)
    if source is not None:
        mine = [f for f in frames if Path(f.filename).resolve() == source.resolve()]
        if mine:
            where = f" ({source.name}:{mine[-1].lineno})"
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > 200:
        first = first[:197] + "..."
    hint = unbound_hint(exc, frames)
    if "InterpreterBuilder" in first and "has no attribute" in first:  # e.g. get_bf16: bf16 constants
        hint = " (Triton's CPU interpreter lacks this operation: judge the kernel on a GPU, --device cuda)"
    return f"{type(exc).__name__}: {first}{where}{hint}"


def unbound_hint(exc: BaseException, frames: traceback.StackSummary) -> str:
    """For a local read before any assignment ran (``UnboundLocalError``): where the function assigns it
    and under which condition (the nearest ``if`` or ``elif`` test), none of which held on this run (``NUM_SMS`` set only under
    ``if device == "cuda"`` / ``elif device == "xpu"``, read on the CPU)."""
    quoted = re.search(r"'([A-Za-z_]\w*)'", str(exc))  # "cannot access local variable 'X' where ..."
    if not isinstance(exc, UnboundLocalError) or quoted is None or not frames:
        return ""
    name = quoted.group(1)
    frame = frames[-1]
    try:
        tree = ast.parse(Path(frame.filename).read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return ""
    fn = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
               and n.name == frame.name and n.lineno <= (frame.lineno or 0) <= (n.end_lineno or 0)), None)
    if fn is None:
        return ""
    guarded: list[str] = []

    def walk(node: ast.AST, tests: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and any(
                    isinstance(t, ast.Name) and t.id == name
                    for target in (child.targets if isinstance(child, ast.Assign) else [child.target])
                    for t in ast.walk(target)):
                guarded.append(f"line {child.lineno}" + (f" under {' and '.join(tests)}" if tests else ""))
            if isinstance(child, ast.If):
                test = ast.unparse(child.test)
                for stmt in child.body:
                    walk(ast.Module(body=[stmt], type_ignores=[]), (*tests, f"`{test}`"))
                elif_chain = len(child.orelse) == 1 and isinstance(child.orelse[0], ast.If)
                for stmt in child.orelse:
                    walk(ast.Module(body=[stmt], type_ignores=[]), tests if elif_chain else (*tests, f"not `{test}`"))
            else:
                walk(child, tests)

    walk(fn, ())
    if not guarded:
        return ""
    text = f": {frame.name} assigns {name} only at {'; '.join(guarded[:4])}, and none of them ran here"
    if any(word in g for g in guarded for word in ("device", "cuda", "is_available", "xpu", "npu")):
        text += (" (a device check is false on the CPU interpreter: judge this launcher on a GPU, or give"
                 f" {name} a value for other devices)")
    return text


def clone_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def synchronize(device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def run_call(fn: Callable, args: dict[str, Any], outputs: tuple[str, ...], inplace: tuple[str, ...], device: str,
             source: Path | None) -> CallResult:
    """Call ``fn(**args)`` on this process's own tensors (the call may update them in place) and collect
    the outputs: the returned tensors by name, then the in-place inputs after the call."""
    try:
        ret = fn(**args)
        synchronize(device)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from a launcher is the candidate's failure too
        raise CallFailed(f"raised {describe_exception(exc, source)}") from None
    values = (ret,) if len(outputs) == 1 and isinstance(ret, torch.Tensor) else ret
    if ret is None and all(passed_over(n) for n in outputs):  # an in-place launcher returns nothing
        values = (None,) * len(outputs)
    if not isinstance(values, (tuple, list)) or len(values) != len(outputs) or not all(
        isinstance(v, torch.Tensor) for n, v in zip(outputs, values) if not passed_over(n)
    ):
        raise CallFailed(f"returned {_kind(ret)}; expected {len(outputs)} value(s) ({', '.join(outputs)})")
    pairs = [(n, v) for n, v in zip(outputs, values) if not passed_over(n)]
    outputs, values = tuple(n for n, _ in pairs), tuple(v for _, v in pairs)
    result = CallResult(dict(pairs))
    for name in inplace:
        result.outputs[name] = args[name]
    # Returning an in-place input (an updated state handed back) is legitimate; returning any
    # other input as an output is not.
    storages = {
        name: t.untyped_storage().data_ptr()
        for name, t in args.items()
        if isinstance(t, torch.Tensor) and name not in inplace
    }
    for out_name, out in zip(outputs, values):
        for in_name, ptr in storages.items():
            if out.untyped_storage().data_ptr() == ptr:
                result.aliased.append(f"returned '{out_name}' shares memory with its input '{in_name}'")
    return result


def modified_inputs(before: dict[str, Any], after: dict[str, Any], inplace: tuple[str, ...]) -> list[str]:
    """One line per tensor input (not declared in-place) that differs after the call from before it."""
    lines = []
    allowed = ", ".join(f"'{n}'" for n in inplace) or "none"
    for name, old in before.items():
        if not isinstance(old, torch.Tensor) or name in inplace or name not in after:
            continue
        new = after[name]
        if new.shape == old.shape and torch.equal(new, old):
            continue
        if new.shape != old.shape:
            lines.append(f"modified its input '{name}' (shape {tuple(old.shape)} -> {tuple(new.shape)})")
            continue
        changed = new.reshape(-1) != old.reshape(-1)
        flat = _first(changed) if bool(changed.any()) else 0
        lines.append(
            f"modified its input '{name}' (first change at {index_str(flat, tuple(old.shape))}:"
            f" {float(old.reshape(-1)[flat]):.6g} -> {float(new.reshape(-1)[flat]):.6g});"
            f" inputs it may update in place: {allowed}"
        )
    return lines


def _kind(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"one tensor {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"{type(value).__name__}"


def poison_allocator(like: dict[str, torch.Tensor]) -> None:
    """Hand freshly freed NaN-filled blocks of the outputs' sizes to the next allocations, so an
    output the candidate allocates but leaves partly unwritten shows NaN, not stale results."""
    blocks = []
    for t in like.values():
        block = torch.empty_like(t)
        block.fill_(float("nan") if block.is_floating_point() else -1)
        blocks.append(block)
    del blocks


_ALLOCATORS = ("empty", "empty_like", "empty_strided")


def _poisoned(alloc):
    def wrapper(*args, **kwargs):
        out = alloc(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.numel():
            out.fill_(float("nan") if out.is_floating_point() else -1)
        return out

    return wrapper


@contextlib.contextmanager
def poisoned_allocations():
    """While active, torch.empty / empty_like / empty_strided / Tensor.new_empty return memory
    filled with NaN (-1 for integers): whatever a launcher allocates and leaves unwritten shows,
    whatever the allocator would have handed back (the CPU allocator gives no reuse guarantee)."""
    saved = {name: getattr(torch, name) for name in _ALLOCATORS}
    saved_new_empty = torch.Tensor.new_empty
    try:
        for name, alloc in saved.items():
            setattr(torch, name, _poisoned(alloc))
        torch.Tensor.new_empty = _poisoned(saved_new_empty)
        yield
    finally:
        for name, alloc in saved.items():
            setattr(torch, name, alloc)
        torch.Tensor.new_empty = saved_new_empty
