"""CUDA C++ frontend: ``KernelProfile`` for every ``__global__`` function in a source file.

Static only: the text is parsed with tree-sitter-cuda, never compiled or run. Real headers
are first made parseable by ``cuda_macros.sanitize`` (macro specifiers mapped or stripped,
``#if`` chains flattened; offsets and lines unchanged). A kernel the whole-file parse loses
in an ERROR region is re-parsed alone (the rest of the file blanked, so lines still match);
a file with ``__global__`` definitions of which none can be profiled raises ``ValueError``
naming the path and line, which the miner reports and skips.

The body analysis lives in ``cuda_body`` (dataflow, axes, loops, memory, math, dots),
launch sites in ``cuda_launch``; this module finds kernels and their parameters.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

from skel.miner.cuda_body import analyze_body, dtypes_in
from skel.miner.cuda_launch import launch_profile, launch_sites
from skel.miner.cuda_macros import Sanitized, sanitize
from skel.miner.cuda_positions import Covered, Positions, byte_offsets
from skel.miner.gc_pause import gc_paused
from skel.catalog.records import KernelProfile, Param

__all__ = ["CudaFile", "read_source", "profile_source", "profile_file", "kernel_definition_lines"]

# "__global__" as a word. The word boundary before it is checked by hand (``_global_offsets``):
# a leading \b keeps the regex engine from jumping between occurrences of the literal.
_GLOBAL = re.compile(r"__global__\b")
_TEMPLATE_PARAM_TYPES = ("parameter_declaration", "optional_parameter_declaration",
                         "type_parameter_declaration", "optional_type_parameter_declaration",
                         "variadic_type_parameter_declaration", "variadic_parameter_declaration",
                         "template_template_parameter_declaration")


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter
    import tree_sitter_cuda

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))


@dataclass(frozen=True)
class _Kernel:
    node: object  # function_definition
    template: object | None  # enclosing template_declaration
    fragment: bool  # recovered by re-parsing the kernel alone
    truncated: int = 0  # closing braces missing at the end of the file (added for parsing)
    kind: str = "kernel"  # kernel | device-function (a __device__ helper, profiled for its callers)
    owner: str = ""  # the struct or class a helper is a member function of (its name becomes owner::name)


def profile_file(path: str) -> list[KernelProfile]:
    """Read ``path`` (UTF-8) and profile it; ValueError on unreadable or non-text input."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text (byte {e.start})") from e
    return profile_source(text, path)


def profile_source(text: str, path: str) -> list[KernelProfile]:
    """One ``KernelProfile`` per ``__global__`` function defined in ``text``, and one (kind
    ``device-function``) per ``__device__`` helper doing shuffles, reductions, square roots or exps.

    Raises ValueError("path:line: why") for binary input, or when the file defines
    ``__global__`` functions and none of them can be parsed.
    """
    with gc_paused():
        source = read_source(text, path)
        return source.profiles(source.kernels)


@dataclass(frozen=True)
class CudaFile:
    """One parsed file: its kernels in source order and what profiling each of them needs.

    ``profiles(kernels)`` profiles any of them; each profile depends on its kernel and the file
    only, so slices of ``kernels`` profiled apart and joined in order give the whole file's.
    """

    path: str
    kernels: tuple[_Kernel, ...] = ()
    code_bytes: bytes = b""
    last_line: int = 0
    launches: dict = field(default_factory=dict)  # kernel name -> launch sites, in file order
    device_fns: dict = field(default_factory=dict)  # __device__ function name -> line
    notes: tuple[str, ...] = ()

    def profiles(self, kernels) -> list[KernelProfile]:
        return [_profile(k, self.path, self.code_bytes, self.last_line, self.launches, self.device_fns,
                         list(self.notes)) for k in kernels]


def read_source(text: str, path: str) -> CudaFile:
    """Parse ``text`` and find its kernels (no profile yet); raises as ``profile_source`` does."""
    nul = text.find("\x00")
    if nul >= 0:
        raise ValueError(f"{path}:{text.count(chr(10), 0, nul) + 1}: binary file (NUL byte)")
    if "__global__" not in text and "_GLOBAL" not in text and "__device__" not in text:
        return CudaFile(path)
    san = _sanitized(text)
    wanted = _global_offsets(san.code)
    src = san.text.encode("utf-8")
    if not wanted:  # a header of helpers only: they are profiled for the kernels of other files
        if "__device__" not in san.code:
            return CudaFile(path)
        root = _parser().parse(src).root_node
        helpers = tuple(_Kernel(n, t, False, kind="device-function", owner=o) for n, t, o in _device_helpers(root, src))
        if not helpers:
            return CudaFile(path)
        return CudaFile(path, helpers, san.code.encode("utf-8"), san.text.count("\n") + 1, {},
                        _device_functions(root), ())
    root = _parser().parse(src).root_node
    kernels = [_Kernel(n, t, False) for n, t in _find_kernels(root)]
    device_fns = _device_functions(root)
    launches = launch_sites(root, src)
    failed: list[int] = []
    covered = Covered((k.node.start_byte, k.node.end_byte) for k in kernels)
    where = Positions(san.text, src, _parser())
    for off, boff in zip(wanted, byte_offsets(san.text, wanted)):
        if covered.holds(boff):
            continue
        k, status = _recover(san, off, path, where)
        if k is not None:
            kernels.append(k)
            covered.add(k.node.start_byte, k.node.end_byte)
        elif status == "failed":
            failed.append(san.text.count("\n", 0, off) + 1)
    if not kernels and failed:
        raise ValueError(f"{path}:{failed[0]}: cannot parse the __global__ function here "
                         f"({len(failed)} kernel(s) in the file, none parseable)")
    file_notes = []
    if san.stripped:
        file_notes.append("macros stripped or mapped: " + ", ".join(san.stripped))
    if failed:
        file_notes.append("kernels at lines " + ", ".join(map(str, failed)) + " not parsed")
    kernels += [_Kernel(n, t, False, kind="device-function", owner=o) for n, t, o in _device_helpers(root, src)]
    kernels.sort(key=lambda k: k.node.start_byte)
    code_bytes = san.code.encode("utf-8")
    last_line = san.text.count("\n") + 1
    by_name: dict[str, list] = {}  # launches by kernel name, in file order: one pass, not one per kernel
    for site in launches:
        by_name.setdefault(site.name, []).append(site)
    return CudaFile(path, tuple(kernels), code_bytes, last_line, by_name, device_fns, tuple(file_notes))


def kernel_definition_lines(text: str) -> list[int]:
    """Lines of ``__global__`` *definitions* in ``text`` (code only; prototypes, comments,
    strings and #defines excluded), found without a parser: the coverage denominator."""
    if "__global__" not in text and "_GLOBAL" not in text:
        return []
    san = _sanitized(text)
    lines, line, counted = [], 1, 0
    for off in _global_offsets(san.code):
        if _first_body_brace(san.code, off) is not None:
            line += san.text.count("\n", counted, off)
            counted = off
            lines.append(line)
    return lines


@lru_cache(maxsize=2)
def _sanitized(text: str) -> Sanitized:
    """``sanitize``, remembered for the last texts: deciding whether a file defines kernels
    (``kernel_definition_lines``) and then profiling it sanitizes the same text once."""
    return sanitize(text)


def _global_offsets(code: str) -> list[int]:
    """Offsets of the word ``__global__`` in ``code``."""
    return [m.start() for m in _GLOBAL.finditer(code)
            if m.start() == 0 or not _is_word_char(code[m.start() - 1])]


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"  # what \b counts as a word character


def _find_kernels(root):
    """(function_definition, template_declaration|None) for each __global__ definition."""
    out = []
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            if any(c.type == "__global__" for c in n.children):
                parent = n.parent
                out.append((n, parent if parent is not None and parent.type == "template_declaration" else None))
            continue  # no kernels inside function bodies
        stack.extend(reversed(n.children))
    return out


def _device_functions(root) -> dict[str, int]:
    out: dict[str, int] = {}
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            if any(c.type == "__device__" for c in n.children):
                name = _function_name(n)
                if name:
                    out.setdefault(name.split("::")[-1], n.start_point[0] + 1)
            continue
        stack.extend(n.children)
    return out


# What makes a __device__ helper worth a profile: the work skeletons look for (warp shuffles and
# reductions, square roots, exponentials). Other helpers (vector loads, index math) are not profiled.
_HELPER_WORK = re.compile(rb"shfl|reduce|sqrt|exp")


_RECORDS = ("struct_specifier", "class_specifier")


def _device_helpers(root, src: bytes) -> list:
    """(function_definition, template|None, owner) for ``__device__`` (not ``__global__``) functions
    with a body doing such work: their findings count for the kernels that call them (in this file:
    miner/interproc.py; from other files or as members: miner/crossfile.py). ``owner`` names the
    struct or class whose body defines the function ("" for a free function). A helper that calls
    such a helper (a butterfly over a shuffle wrapper) does that work too, to three levels."""
    found = []  # (function_definition, owner, body bytes) of every __device__ (not __global__) function
    stack = [(root, "")]
    while stack:
        n, owner = stack.pop()
        if n.type == "function_definition":
            kinds = {c.type for c in n.children}
            body = n.child_by_field_name("body")
            if "__device__" in kinds and "__global__" not in kinds and body is not None:
                found.append((n, owner, src[body.start_byte:body.end_byte]))
            continue
        if n.type in _RECORDS:
            name = n.child_by_field_name("name")
            if name is not None:
                if name.type == "template_type":  # a partial specialization: struct S<T, 1> { ... }
                    name = name.child_by_field_name("name") or name
                owner = text_of(name)
        stack.extend((c, owner) for c in n.children)
    keep = [_HELPER_WORK.search(body) is not None for _, _, body in found]
    for _ in range(3):  # a helper calling a kept one does its work too (x = op(x, lane_xor(x, N / 2)))
        names = {(_function_name(n) or "").split("::")[-1].encode() for (n, _, _), k in zip(found, keep) if k}
        calls = re.compile(rb"\b(?:" + b"|".join(map(re.escape, sorted(names - {b""}))) + rb")\s*(?:<[^;()]*>)?\s*\(") \
            if names - {b""} else None
        grown = [k or (calls is not None and calls.search(body) is not None) for k, (_, _, body) in zip(keep, found)]
        if grown == keep:
            break
        keep = grown
    out = []
    for (n, owner, _), k in zip(found, keep):
        if k:
            parent = n.parent
            out.append((n, parent if parent is not None and parent.type == "template_declaration" else None, owner))
    return out


def _recover(san: Sanitized, off: int, path: str, where: Positions):
    """Re-parse the definition around the __global__ at ``off`` alone.

    Returns (kernel, "ok") or (None, "declaration") for a prototype, (None, "failed").
    Only the definition's own bytes are parsed (tree-sitter's included ranges over the whole
    file, so positions and lines stay the file's): recovering thousands of kernels of one
    file costs the size of those kernels, not thousands of times the file.
    """
    code = san.code
    start = _definition_start(code, off)
    brace = _first_body_brace(code, off)
    if brace is None:  # a prototype, if it parses as one
        semi = code.find(";", off)
        ok = semi >= 0 and not where.parse(start, semi + 1).has_error
        return None, "declaration" if ok else "failed"
    end, open_braces = _matching_brace(code, brace)
    if end is None:  # truncated (a split bundle): close the body after the end of the text,
        end = len(code) - 1  # which leaves every earlier offset and line as it is
        blanked = (re.sub(r"[^\n]", " ", san.text[:start]) + san.text[start:end + 1]
                   + re.sub(r"[^\n]", " ", san.text[end + 1:]) + "\n" + "}" * open_braces)
        root = _parser().parse(blanked.encode("utf-8")).root_node
    else:
        root = where.parse(start, end + 1)
    found = _find_kernels(root)
    if not found:
        return None, "failed"
    node, template = found[0]
    return _Kernel(node, template, True, open_braces), "ok"


def _definition_start(code: str, off: int) -> int:
    """Start of the declaration holding offset ``off``: just after the previous ; { or }."""
    depth = 0
    i = off - 1
    while i >= 0:
        c = code[i]
        if c in ")>]":
            depth += 1
        elif c in "(<[":
            depth -= 1
        elif c in ";{}" and depth <= 0:
            return i + 1
        i -= 1
    return 0


def _first_body_brace(code: str, off: int) -> int | None:
    depth = 0
    for i in range(off, min(len(code), off + 20000)):
        c = code[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif depth == 0 and c == ";":
            return None
        elif depth == 0 and c == "{":
            return i
    return None


def _matching_brace(code: str, open_at: int) -> tuple[int | None, int]:
    """(offset of the matching close brace, 0), or (None, braces still open at the end)."""
    depth = 0
    for m in re.finditer(r"[{}]", code[open_at:]):
        if m.group() == "{":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return open_at + m.start(), 0
    return None, depth


def text_of(node) -> str:
    return node.text.decode("utf-8", "replace")


def _function_name(fn) -> str | None:
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    if decl is None:
        return None
    name = decl.child_by_field_name("declarator")
    if name is None:
        return None
    if name.type == "template_function":
        name = name.child_by_field_name("name")
    return text_of(name)


def declared_name(decl) -> str | None:
    """The identifier a (possibly pointer/array/reference) declarator declares."""
    while decl is not None:
        if decl.type in ("identifier", "field_identifier"):
            return text_of(decl)
        inner = decl.child_by_field_name("declarator")
        if inner is None:
            inner = next((c for c in decl.named_children if c.type in (
                "identifier", "pointer_declarator", "reference_declarator", "array_declarator",
                "init_declarator", "parenthesized_declarator")), None)
        decl = inner
    return None


def _params(fn, template) -> tuple[list[Param], list[Param]]:
    """(template parameters, function parameters) in source order."""
    tparams: list[Param] = []
    if template is not None:
        plist = template.child_by_field_name("parameters")
        for p in plist.named_children if plist is not None else ():
            if p.type not in _TEMPLATE_PARAM_TYPES:
                continue
            is_type = "type_parameter" in p.type or p.type.startswith("template_template")
            name = declared_name(p.child_by_field_name("declarator")) if not is_type else None
            if is_type:
                ids = [c for c in p.named_children if c.type == "type_identifier"]
                name = text_of(ids[0]) if ids else None
            if name is None:
                continue
            ann = "typename" if is_type else text_of(p.child_by_field_name("type"))
            default = p.child_by_field_name("default_value") or p.child_by_field_name("default_type")
            tparams.append(Param(name, ann, not is_type, text_of(default) if default else None))
    fparams: list[Param] = []
    decl = fn.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    for p in plist.named_children if plist is not None else ():
        if p.type not in ("parameter_declaration", "optional_parameter_declaration"):
            continue
        d = p.child_by_field_name("declarator")
        name = declared_name(d)
        if name is None:
            continue
        full = " ".join(text_of(p).split())
        cut = full.rfind(name)
        ann = (full[:cut] + full[cut + len(name):]).strip() if cut >= 0 else full
        default = p.child_by_field_name("default_value")
        fparams.append(Param(name, ann, False, text_of(default) if default else None))
    return tparams, fparams


def _profile(k: _Kernel, path: str, code_bytes: bytes, last_line: int, launches, device_fns,
             file_notes) -> KernelProfile:
    fn = k.node
    name = _function_name(fn) or "?"
    if k.owner and "::" not in name:
        name = f"{k.owner}::{name}"
    short = name.split("::")[-1]
    tparams, fparams = _params(fn, k.template)
    head = k.template if k.template is not None else fn
    body = analyze_body(fn, tparams + fparams, device_fns)
    notes = list(file_notes) + list(body.notes)
    if k.fragment:
        notes.append("recovered by parsing the kernel alone (parse errors elsewhere in the file)")
    if k.truncated:
        notes.append(f"file ends inside the kernel ({k.truncated} closing brace(s) missing): profile is partial")
    sites = tuple(launch_profile(l, tparams, fparams) for l in launches.get(short, ()))
    start, end = head.start_byte, fn.end_byte
    kernel_code = code_bytes[start:end].decode("utf-8", "replace")
    return KernelProfile(
        name=name, path=path, language="cuda",
        line=fn.start_point[0] + 1, end_line=min(fn.end_point[0] + 1, last_line),
        params=tuple(tparams + fparams), program_axes=body.axes, loops=body.loops,
        memops=body.memops, reductions=body.reductions, dots=body.dots, math=body.math,
        dtypes=dtypes_in(kernel_code), launches=sites, dataflow=body.dataflow,
        shared=body.shared, notes=tuple(notes), kind=k.kind,
    )
