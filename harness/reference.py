"""A second oracle for an inferred harness: a reference implementation the kernel's own project keeps.

Kernel repositories often keep a plain PyTorch version of each kernel beside it (``naive.py``,
``*_ref``, ``naive_*``, ``reference``). One in the target's file or its folder that takes the
launcher's arguments by the same names is run on float64 copies of the judged inputs: the candidate
must be about as close to it as the original is (``validate.judge``). Found statically (``ast``);
the reference runs only in the oracle worker.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

_MARKS = {"ref", "reference", "naive", "torch", "pytorch"}  # words that name a reference implementation
_GENERIC = _MARKS | {"fwd", "forward", "kernel", "fused", "triton", "impl", "op", "func", "fn"}
_MAX_BYTES = 1_000_000


@dataclass(frozen=True)
class Reference:
    path: Path
    name: str
    line: int

    @property
    def label(self) -> str:
        return f"{self.name} ({self.path.name}:{self.line})"


def _words(name: str) -> set[str]:
    return {w for w in re.split(r"[_\W]+", name.lower()) if w}


def _is_reference(fn: ast.FunctionDef, stem: str) -> bool:
    if any("jit" in ast.unparse(d) for d in fn.decorator_list):
        return False
    return bool(_words(fn.name) & (_MARKS - {"torch", "pytorch"})) or bool(_words(stem) & {"naive", "ref", "reference"})


def _takes(fn: ast.FunctionDef, arguments: tuple[str, ...], tensors: tuple[str, ...]) -> bool:
    """``fn(**{a: ...})`` binds for the harness's arguments, and ``fn`` names every tensor argument."""
    args = fn.args
    named = [a.arg for a in args.args + args.kwonlyargs]
    defaults = len(args.defaults)
    required = [a.arg for a in args.args[:len(args.args) - defaults]] + [
        a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if args.posonlyargs or args.vararg:
        return False
    if not set(tensors) <= set(named) or not set(required) <= set(arguments):
        return False
    return args.kwarg is not None or set(arguments) <= set(named)


def find_reference(path: Path, entry: str, kernel: str, arguments: tuple[str, ...],
                   tensors: tuple[str, ...]) -> Reference | None:
    """The reference in ``path`` or a sibling module that takes these arguments, the one whose name shares
    most words with the launcher's and the kernel's (ties: the target file first, then by name)."""
    want = (_words(entry) | _words(kernel)) - _GENERIC
    found: list[tuple[int, int, str, Reference]] = []
    files = [path] + sorted(p for p in path.parent.glob("*.py") if p != path and p.name != "__init__.py")
    for rank, file in enumerate(files):
        try:
            if file.stat().st_size > _MAX_BYTES:
                continue
            tree = ast.parse(file.read_bytes())
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name != entry and _is_reference(node, file.stem) \
                    and _takes(node, arguments, tensors):
                shared = len((_words(node.name) - _GENERIC) & want)
                if shared:
                    found.append((-shared, min(rank, 1), node.name, Reference(file, node.name, node.lineno)))
    return min(found, key=lambda f: f[:3])[3] if found else None
