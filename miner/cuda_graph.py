"""Expression reading and dataflow questions for the CUDA frontend (see ``cuda_body``).

``reads`` lists the values an expression reads (``blockIdx.y`` as ``pid:1``); the rest
turns the finished edge list into loop and program-axis facts: which loop runs over the
sequence (its bound is, or is computed from, seq_len / kv_len / T ...), and which names
derive from each block-index axis, with their roles.
"""
from __future__ import annotations

import re
from collections import deque
from operator import itemgetter

from skel.miner import cuda_ops as ops
from skel.catalog.records import Loop, ProgramAxis

_TIME_NAME = re.compile(r"(?:^|_)(?:seq_?len|seqlen|kv_len|kvlen|tokens?|time|steps?|kv_chunk\w*|"
                        r"chunk_size|num_kv\w*|kv_tiles?)(?:_|$)|^(?:T|L|S)$", re.I)


_SKIP_READS = frozenset({"template_argument_list", "type_descriptor", "string_literal", "lambda_expression",
                         "primitive_type", "type_identifier", "number_literal", "comment"})
_AXIS_OBJECTS = {b"blockIdx": "pid:", b"threadIdx": "tid:"}
_AXIS_FIELDS = {b"x": "0", b"y": "1", b"z": "2"}


def reads(n):
    """(name, byte) for every value read in expression ``n``: identifiers, field paths of
    ``this``-less structs (``params.q`` reads ``params``), blockIdx/threadIdx as pid/tid."""
    t = n.type
    if t == "identifier":  # the commonest case by far: a plain name
        return [(n.text.decode("utf-8", "replace"), n.start_byte)]
    if t in _SKIP_READS:
        return []
    out = []
    stack = [n]
    pop, push = stack.pop, stack.append
    while stack:
        c = pop()
        t = c.type
        if t == "identifier":
            out.append((c.text.decode("utf-8", "replace"), c.start_byte))
        elif t == "field_expression":
            obj = c.child_by_field_name("argument")
            if obj is None:
                continue
            prefix = _AXIS_OBJECTS.get(obj.text) if obj.type == "identifier" else None
            if prefix is not None:
                fld = c.child_by_field_name("field")
                axis = _AXIS_FIELDS.get(fld.text) if fld is not None else None
                if axis is not None:
                    out.append((prefix + axis, c.start_byte))
                    continue
            push(obj)
        elif t == "call_expression":
            fn = c.child_by_field_name("function")
            if fn is not None and fn.type == "field_expression":
                push(fn.child_by_field_name("argument"))
            args = c.child_by_field_name("arguments")
            if args is not None:
                push(args)
        elif t not in _SKIP_READS:
            stack.extend(c.children)  # a token has none
    if len(out) > 1:
        out.sort(key=_byte)
    return out


_byte = itemgetter(1)


def base_name(n) -> str | None:
    while n is not None:
        if n.type == "identifier":
            return node_text(n)
        if n.type == "field_expression":
            n = n.child_by_field_name("argument")
            continue
        if n.type in ("subscript_expression", "pointer_expression", "parenthesized_expression",
                      "cast_expression"):
            n = n.child_by_field_name("argument") or n.child_by_field_name("value") or (
                n.named_children[-1] if n.named_children else None)
            continue
        return None
    return None


def first_declared(n) -> str | None:
    if n is None:
        return None
    if n.type == "identifier":
        return node_text(n)
    if n.type == "assignment_expression":
        return base_name(n.child_by_field_name("left"))
    d = n.child_by_field_name("declarator")
    if d is not None:
        return first_declared(d)
    for c in n.named_children:
        if c.type in ("identifier", "init_declarator", "pointer_declarator", "array_declarator",
                      "reference_declarator", "assignment_expression"):
            return first_declared(c)
    return None



def _parents(edges) -> dict[str, set[str]]:
    par: dict[str, set[str]] = {}
    for a, b in edges:
        par.setdefault(b, set()).add(a)
    return par


def mark_time_loops(loops: list[Loop], bounds: dict[int, list[str]], edges) -> list[Loop]:
    par = _parents(edges)
    by_var: dict[str, list[str]] = {}
    for node in par:
        by_var.setdefault(node.split("@")[0], []).append(node)
    out = []
    for i, lp in enumerate(loops):
        names = bounds.get(i, [])
        hit = any(_TIME_NAME.search(x) for x in names)
        if not hit:  # the bound is computed from a sequence length: num_iters = cdiv(seq_len, TILE)
            frontier = {d for x in set(names) for d in by_var.get(x, ())}
            seen: set[str] = set()
            for _ in range(3):
                frontier = {p for x in frontier for p in par.get(x, ())} - seen
                seen |= frontier
            hit = any(_TIME_NAME.search(x.split("@")[0]) for x in seen)
        out.append(Loop(lp.line, lp.end_line, lp.var, lp.iter_text, lp.kind, hit, lp.depth, lp.guards))
    return out


def axes(first: dict[int, int], edges) -> list[ProgramAxis]:
    children: dict[str, list[str]] = {}
    for a, b in edges:
        children.setdefault(a, []).append(b)
    out = []
    for axis in sorted(first):
        root = f"pid:{axis}"
        direct = children.get(root, [])
        seen, order, todo = set(), [], deque(direct)
        while todo:
            x = todo.popleft()
            if x in seen:
                continue
            seen.add(x)
            order.append(x)
            todo.extend(children.get(x, []))
        names = list(dict.fromkeys(x.split("@")[0] for x in order
                                   if not x.startswith(("load@", "store@", "atomic@"))))
        var = direct[0].split("@")[0] if direct else "blockIdx." + "xyz"[axis]
        roles = tuple((n, r) for n in names[:40] if (r := ops.axis_role(n)))
        out.append(ProgramAxis(axis, var, first[axis], tuple(names), roles))
    return out



def node_text(n) -> str:
    """A tree-sitter node's source text."""
    return n.text.decode("utf-8", "replace")
