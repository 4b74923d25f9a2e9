"""SK008: ``do_not_specialize`` for runtime shape arguments of a ``@triton.jit`` kernel.

DESCRIPTION: Triton specializes integer arguments on their value being 1 and on divisibility
by 16, so a kernel called with a new sequence length ``T`` or batch ``N`` may compile again
(a JIT stall in decode). The rewrite lists, in ``@triton.jit(do_not_specialize=[...])``, the
non-constexpr parameters that are shapes: those bounding a loop (``range(0, T)``,
``tl.range(0, T)``) and those annotated as integers (``N: tl.int64``), except strides (their
divisibility lets Triton vectorise). Names already listed are kept; nothing else changes.

Safe: specialization affects compilation, never values.
"""
from __future__ import annotations

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions, register

CODE = "SK008"
SAFETY = "safe"
_INT = {"int", "int32", "int64", "uint32", "uint64"}


def shape_params(kernel: cst.FunctionDef) -> list[str]:
    """Runtime shape parameters, in signature order."""
    bounds: set[str] = set()
    for loop in F.fors(kernel):
        if isinstance(loop.iter, cst.Call) and C.last_part(C.call_name(loop.iter)) in ("range", "static_range"):
            for arg in loop.iter.args:
                if arg.keyword is None:
                    bounds |= C.names_in(arg.value)
    out = []
    for p in C.params(kernel):
        name, ann = p.name.value, C.last_part(C.annotation_text(p))
        if ann == "constexpr" or "stride" in name.lower():
            continue
        if name in bounds or ann in _INT:
            out.append(name)
    return out


def _listed(dec: cst.Decorator) -> tuple[list[str], cst.Arg | None]:
    if not isinstance(dec.decorator, cst.Call):
        return [], None
    arg = C.kwarg(dec.decorator, "do_not_specialize")
    if arg is None or not isinstance(arg.value, (cst.List, cst.Tuple)):
        return [], arg
    names = []
    for el in arg.value.elements:
        if isinstance(el.value, cst.SimpleString):
            names.append(el.value.evaluated_value)
        elif isinstance(el.value, cst.Integer):
            names.append(int(el.value.value))
    return names, arg


@register(CODE)
def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    ks = C.kernels(src.module, options)
    edits: dict = {}
    changes: list[Change] = []
    done: list[str] = []
    for kernel in ks:
        dec = C.jit_decorator(kernel)
        wanted = shape_params(kernel)
        if not wanted:
            continue
        listed, arg = _listed(dec)
        positions = [p.name.value for p in C.params(kernel)]
        have = {positions[n] if isinstance(n, int) and n < len(positions) else n for n in listed}
        if arg is not None and not isinstance(arg.value, (cst.List, cst.Tuple)):
            done.append(f"{kernel.name.value}: do_not_specialize is computed ({C.code_of(arg.value)}), left as is")
            continue
        missing = [n for n in wanted if n not in have]
        if not missing:
            done.append(f"{kernel.name.value} already lists {', '.join(wanted)}")
            continue
        edits[dec] = _edit(missing)
        changes.append(Change(src.line(dec), f"{kernel.name.value}: do_not_specialize += {missing}"))
    if not edits:
        if done:
            return C.skip(CODE, SAFETY, source, "already applied: " + "; ".join(done))
        return C.skip(CODE, SAFETY, source, "not applicable: no @triton.jit kernel with a runtime shape argument "
                       "(a loop bound or an integer-annotated parameter)")
    new = C.apply_edits(src.module, edits).code
    return [C.applied_result(CODE, source, new, changes, f"do_not_specialize for {len(edits)} kernel(s)", SAFETY)]


def _edit(missing: list[str]):
    def edit(upd: cst.Decorator) -> cst.Decorator:
        new_items = [cst.Element(cst.SimpleString(f'"{n}"')) for n in missing]
        if isinstance(upd.decorator, cst.Call):
            arg = C.kwarg(upd.decorator, "do_not_specialize")
            if arg is not None:
                lst = arg.value
                new_arg = arg.with_changes(value=lst.with_changes(elements=[*lst.elements, *new_items]))
                return upd.with_changes(decorator=upd.decorator.with_changes(
                    args=[new_arg if a is arg else a for a in upd.decorator.args]))
            call = upd.decorator
        else:
            call = cst.Call(func=upd.decorator, args=[])
        kw = cst.Arg(cst.List(new_items), keyword=cst.Name("do_not_specialize"),
                     equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
        return upd.with_changes(decorator=call.with_changes(args=[*call.args, kw]))

    return edit
