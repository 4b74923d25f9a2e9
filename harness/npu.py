"""Kernel files written for NPUs (Huawei Ascend through triton-ascend), told apart statically.

Such files sit in an NPU backend package (Liger's ``ops/backends/_ascend``, fla's ``triton_ascend``) or
import from one (``torch_npu``, ``triton.language.extra.cann``, an ``ascend_ub_manager``): they size
tiles from the NPU's unified buffer, call builtins only triton-ascend has, or need the NPU runtime. No
CUDA device and no CPU interpreter runs them as written, so an identical copy cannot be judged there:
the harness refuses them with the evidence instead of letting the gate reject the original.
"""
from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

# words of a dotted module name (split on "." and "_") that name an NPU platform or its toolkit
NPU_WORDS = frozenset({"npu", "ascend", "cann"})


def _npu_module(dotted: str) -> bool:
    return any(word.lower() in NPU_WORDS for word in re.split(r"[._]", dotted) if word)


def npu_evidence(path: Path, tree: ast.Module) -> str | None:
    """Why the file at ``path`` (parsed as ``tree``) targets an NPU only, or None: its own package, else
    the first import (line number) of an NPU module."""
    folders = itertools.takewhile(lambda f: (f / "__init__.py").is_file(), path.parents)  # its package chain
    package = ".".join(reversed([f.name for f in folders]))
    if package and _npu_module(package):
        return f"it belongs to the NPU backend package {package}"
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        for module in modules:
            if _npu_module(module):
                return f"line {node.lineno} imports the NPU module {module}"
    return None
