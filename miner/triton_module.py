"""The module-level half of the Triton frontend: what the whole file says about its kernels.

The file is read in blocks (``triton_blocks``), twice at most:

1. ``Outline``: every block once, in order: ``from X import y`` names, the module's top-level
   values (``module_scope``), and every function decorated as a jit kernel, with its parameters.
2. ``sweep``: the blocks that hold a kernel or may launch one, in order: the launch sites found
   there, and each kernel's profile as soon as every block that may launch it has been seen.
   A kernel's tree is held until then; when too many wait (all launches at the end of a huge
   file), the oldest are dropped and their blocks parsed again at the end.

Every step is linear in the file: no per-kernel or per-statement rescan of the module.
"""
from __future__ import annotations

import ast
import bisect
import copy
from dataclasses import dataclass, replace
from typing import Callable

from skel.catalog.records import KernelProfile, LaunchSite, Param
from skel.miner.pyexpr import Source, dotted
from skel.miner.triton_blocks import ModuleBlocks, Resplit
from skel.miner.triton_launch import ModuleIndex, field_aliases, launch_calls, launch_lines, launch_site
from skel.miner.triton_wrappers import Wrapper, call_lines, may_hold_wrappers, wrapper_calls, wrapper_of
from skel.miner.triton_scan import LaunchScopes, module_scope
from skel.miner.triton_scope import Scope

JIT_NAMES = ("triton.jit", "tl.jit", "triton.language.jit")
MAX_WAITING_LINES = 50_000  # source lines of kernel trees held while their launches are still ahead


@dataclass(frozen=True)
class KernelDef:
    """A function with a jit decorator, as pass 1 saw it (no tree: the block may be dropped)."""

    block: int
    line: int  # of the ``def``
    name: str
    params: tuple[Param, ...]
    decorators: tuple[str, ...]  # dotted names of the decorators
    # A kernel made by ``name = triton.jit(...)(fn)`` / ``triton.jit(fn)``: the ``triton.jit(...)``
    # call that stands for its decorator (None for a decorated ``def``); ``line`` is then fn's def.
    jit_call: ast.expr | None = None
    # ``alias = triton.autotune(configs=...)(name)`` at module level: the autotune call, read as a
    # decorator of this kernel (its configs are what the kernel is tuned over wherever it is launched)
    tuned_by: ast.expr | None = None


def params_of(fn, src: Source) -> tuple[Param, ...]:
    a = fn.args
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    rows = list(zip(positional, defaults)) + list(zip(a.kwonlyargs, a.kw_defaults))
    out = []
    for p, default in rows:
        ann = src.text(p.annotation) if p.annotation is not None else None
        out.append(Param(p.arg, ann, bool(ann) and ann.replace(" ", "").endswith("constexpr"),
                         None if default is None else src.text(default)))
    return tuple(out)


def decorator_names(fn) -> tuple[str, ...]:
    return tuple(dotted(d.func if isinstance(d, ast.Call) else d) or "" for d in fn.decorator_list)


def is_jit(decorators: tuple[str, ...], imports: dict[str, str]) -> bool:
    """``@triton.jit`` (also ``tl.jit``, called or not), or a bare ``@jit`` imported from triton."""
    return any(n in JIT_NAMES or (n == "jit" and imports.get("jit", "triton").startswith("triton"))
               for n in decorators)


class Outline:
    """Pass 1 over every block: imports, the module scope, the jit kernels (sorted by line)."""

    def __init__(self, blocks: ModuleBlocks, src: Source):
        while True:
            try:
                self._read(blocks, src)
                return
            except Resplit:  # the module is one block now: read it again
                continue

    def _read(self, blocks: ModuleBlocks, src: Source) -> None:
        self.base = Scope()
        top: list[tuple[str, str]] = []
        nested: list[list[tuple[str, str]]] = []
        candidates: list[KernelDef] = []
        module_fns: dict[str, tuple[int, ast.AST]] = {}
        aliases: list[tuple[str, ast.Call, str]] = []  # (kernel name, triton.jit(...) call, function name)
        tuned: dict[str, ast.Call] = {}  # kernel name -> the triton.autotune(...) call wrapping it
        self.wrappers: dict[str, Wrapper] = {}  # functions that launch the kernel they are passed
        look_for_wrappers = may_hold_wrappers(blocks.text)
        for i, tree in blocks.parse_all():
            index = ModuleIndex(tree, blocks.text)
            module_scope(tree, src, self.base)
            top += [(n, m) for t, n, m in index.import_rows if t]
            nested.append([(n, m) for t, n, m in index.import_rows if not t])
            for fn in index.functions:
                if look_for_wrappers and (w := wrapper_of(fn)):
                    self.wrappers[w.name] = w
                names = decorator_names(fn)
                if any(n in JIT_NAMES or n == "jit" for n in names):
                    candidates.append(KernelDef(i, fn.lineno, fn.name, params_of(fn, src), names))
            module_fns.update({s.name: (i, s) for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))})
            aliases += [a for s, fn in index.simple_statements if fn is None and (a := jit_alias(s))]
            tuned.update(t for s, fn in index.simple_statements if fn is None and (t := autotune_alias(s)))
        for name, call, target in aliases:
            if target in module_fns:
                block, fn = module_fns[target]
                jit = dotted(call.func) or ""
                candidates.append(KernelDef(block, fn.lineno, name, params_of(fn, src), (jit,), call))
        # One module's pass meets its top-level imports first, then nested bodies depth first from
        # the last statement back: the same order over the blocks gives the same dict.
        self.imports: dict[str, str] = {}
        for n, m in top:
            self.imports[n] = m
        for rows in reversed(nested):
            for n, m in rows:
                self.imports[n] = m
        candidates = [replace(k, tuned_by=tuned[k.name]) if k.name in tuned else k for k in candidates]
        self.kernels = sorted((k for k in candidates if is_jit(k.decorators, self.imports)), key=lambda k: k.line)


def jit_alias(stmt: ast.stmt) -> tuple[str, ast.Call, str] | None:
    """``k = triton.jit(do_not_specialize=[...])(fn)`` or ``k = triton.jit(fn)``: (k, the call that
    stands for ``@triton.jit(...)``, fn). None for any other statement."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    v = stmt.value
    if not (isinstance(v, ast.Call) and len(v.args) == 1 and isinstance(v.args[0], ast.Name) and not v.keywords):
        return None
    jit = v.func if isinstance(v.func, ast.Call) else v  # triton.jit(...)(fn) | triton.jit(fn)
    name = dotted(jit.func) or ""
    if not (name in JIT_NAMES or name == "jit"):
        return None
    if jit is v:
        jit = ast.Call(func=v.func, args=[], keywords=[])
    return stmt.targets[0].id, jit, v.args[0].id


def as_kernel(k: KernelDef, fn: ast.AST) -> ast.AST:
    """The function tree a kernel is profiled from: the ``def`` itself, or for a jit alias a copy
    named as the alias with its ``triton.jit(...)`` call as the decorator (the original is shared);
    a kernel wrapped by a module-level ``triton.autotune(...)(kernel)`` gets that call as an outer
    decorator."""
    if k.jit_call is None and k.tuned_by is None:
        return fn
    twin = copy.copy(fn)
    twin.name = k.name
    jit = [k.jit_call] if k.jit_call is not None else list(fn.decorator_list)
    twin.decorator_list = ([k.tuned_by] if k.tuned_by is not None else []) + jit
    return twin


def autotune_alias(stmt: ast.stmt) -> tuple[str, ast.Call] | None:
    """``alias = triton.autotune(configs=..., key=...)(kernel)``: (kernel, the autotune call)."""
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
        return None
    v = stmt.value
    if not (isinstance(v, ast.Call) and len(v.args) == 1 and isinstance(v.args[0], ast.Name) and not v.keywords
            and isinstance(v.func, ast.Call)):
        return None
    name = dotted(v.func.func) or ""
    return (v.args[0].id, v.func) if name.rsplit(".", 1)[-1].endswith("autotune") else None


ProfileKernel = Callable[[ast.AST, tuple[LaunchSite, ...]], KernelProfile]


def sweep(blocks: ModuleBlocks, src: Source, outline: Outline, kernels: list[KernelDef], all_names: set[str],
          profile: ProfileKernel) -> list[KernelProfile]:
    """Pass 2: the profiles of ``kernels`` (launch sites included), in no particular order."""
    names = {k.name for k in kernels}
    by_name: dict[str, list[KernelDef]] = {}
    for k in kernels:
        by_name.setdefault(k.name, []).append(k)
    # Lines where the text shows ``name[``, for the kernels wanted (``all_names`` decides what a
    # launch is: a name shadowing another kernel's is still that kernel's launch).
    aliases = field_aliases(blocks.text, all_names)  # impls.act_quant[grid](...) with Impls(act_quant=kernel)
    subscripted = launch_lines(blocks.text, all_names | set(aliases))  # one pass for kernels and fields
    per_name = {n: rows for n, rows in subscripted.items() if n in names}
    for field, kernel in aliases.items():
        if kernel in names and field in subscripted:
            per_name[kernel] = sorted(set(per_name.get(kernel, [])) | set(subscripted[field]))
    for n, rows in call_lines(blocks.text, outline.wrappers, all_names).items():  # launches through a wrapper
        if n in names:
            per_name[n] = sorted(set(per_name.get(n, [])) | set(rows))
    lines = sorted({ln for rows in per_name.values() for ln in rows})
    firsts = [sp.first_line for sp in blocks.spans]

    def block_of(line: int) -> int:
        return bisect.bisect_right(firsts, line) - 1

    last_launch = {n: max(block_of(ln) for ln in rows) for n, rows in per_name.items()}
    launch_blocks = {block_of(ln) for ln in lines}
    defs_in: dict[int, list[KernelDef]] = {}
    for k in kernels:
        defs_in.setdefault(k.block, []).append(k)
    # keyed by (def line, name): jit aliases of one function share its def line
    sites: dict[tuple[int, str], list[tuple[tuple[int, int], LaunchSite]]] = {(k.line, k.name): [] for k in kernels}
    waiting: dict[tuple[int, str], tuple[KernelDef, ast.AST | None]] = {}  # -> (kernel, its tree or None)
    held = 0
    out: list[KernelProfile] = []
    scopes = LaunchScopes(outline.base, src)  # one reading per launching function, shared by its launches

    def finish(k: KernelDef, fn) -> None:
        out.append(profile(as_kernel(k, fn), tuple(s for _, s in sorted(sites.pop((k.line, k.name)), key=lambda t: t[0]))))

    for i in sorted(launch_blocks | set(defs_in)):
        tree = blocks.tree(i)
        index = ModuleIndex(tree, blocks.text)
        if i in launch_blocks:
            calls = [(n, c, fn, "") for n, c, fn in launch_calls(index.simple_statements, lines, all_names, aliases)]
            calls += [(n, c, fn, "wrapper " + w) for n, c, fn, w in
                      wrapper_calls(index.simple_statements, lines, outline.wrappers, all_names)]
            for name, call, fn, via in calls:
                for k in by_name.get(name, ()):
                    sites[(k.line, k.name)].append(((call.lineno, call.col_offset),
                                          launch_site(call, fn, k.params, outline.base, src, scopes, via)))
        if i in defs_in:
            fns = {fn.lineno: fn for fn in index.functions}
            for k in defs_in[i]:
                waiting[(k.line, k.name)] = (k, fns[k.line])
                held += fns[k.line].end_lineno - k.line + 1
        for line, (k, fn) in list(waiting.items()):
            # every block that may launch it has been read (a dropped tree waits for the end)
            if fn is not None and last_launch.get(k.name, -1) <= i:
                del waiting[line]
                held -= fn.end_lineno - k.line + 1
                finish(k, fn)
        for line, (k, fn) in waiting.items():  # too much held: drop the oldest trees
            if held <= MAX_WAITING_LINES:
                break
            if fn is not None:
                waiting[line] = (k, None)
                held -= fn.end_lineno - k.line + 1
    for block in sorted({k.block for k, fn in waiting.values() if fn is None}):
        fns = {fn.lineno: fn for fn in ModuleIndex(blocks.tree(block), blocks.text).functions}
        for key, (k, fn) in list(waiting.items()):
            if k.block == block and fn is None:
                waiting[key] = (k, fns[k.line])
    for k, fn in waiting.values():
        finish(k, fn)
    return out
