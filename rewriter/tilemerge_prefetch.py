"""SK002 part: software-pipeline the token loop's input loads (prefetch the next step's).

Measured on the H200 (experiments/2026-11-29-sk002-merged-structure/merge_tiles_probe.md): loads in the token-loop body
wait behind the state loads issued before the loop (two DRAM round trips at T = 1), and at
T > 1 each step's q/k/g/v/beta latency sits on the serial per-token chain. Issuing step 0's
loads before the loop and step t+1's at the top of step t removes both.

For a ``for i in range(S, E)`` / ``tl.range(S, E, ...)`` loop (step 1) of the kernel body,
a statement ``X = <expression with one tl.load(P, ...)>`` qualifies when every name it reads
is loop-invariant except *stepped pointers* (advanced once per step by ``p += INC`` with a
loop-invariant INC, after the load) and the loop variable, its ``if`` conditions are constexpr
tests, and nothing in the kernel stores to the loaded buffer. Then:
    before the loop:  X_pf = <expression>                           (step S's address)
    top of the body:  X_nx = <expression, p -> (p + INC), i -> (i + 1), mask & (i + 1 < E)>
    in place:         X = X_pf
    end of the body:  X_pf = X_nx
Loads with a loop-invariant address are issued once before the loop (no next-step reload).
Values are bitwise the same; only when the loads are issued changes.
"""
from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.tilemerge_names import NameAllocator, substitute


@dataclass(frozen=True)
class Prefetched:
    target: str
    line: int
    stepped: bool  # False: loop-invariant address, issued once before the loop


def _loop_bounds(loop: cst.For) -> tuple[str, str] | None:
    """(start, stop) source text of a step-1 range loop."""
    it = loop.iter
    if not (isinstance(it, cst.Call) and C.last_part(C.call_name(it)) == "range"):
        return None
    pos = [a.value for a in it.args if a.keyword is None]
    kw = {a.keyword.value for a in it.args if a.keyword is not None}
    if "step" in kw or len(pos) not in (1, 2, 3):
        return None
    if len(pos) == 3 and not (isinstance(pos[2], cst.Integer) and pos[2].value == "1"):
        return None
    if len(pos) == 1:
        return "0", C.code_of(pos[0])
    return C.code_of(pos[0]), C.code_of(pos[1])


def token_loop(func: cst.FunctionDef) -> cst.For | None:
    """The first top-level step-1 range loop of the kernel body whose body loads memory."""
    for stmt in func.body.body:
        if isinstance(stmt, cst.For) and _loop_bounds(stmt) and any(C.is_load(c) for c in C.calls_in(stmt.body)):
            return stmt
    return None


def _constexpr_test(test: str, consts: set[str]) -> bool:
    names = C.names_in(cst.parse_expression(test))
    return bool(names) and names <= consts


def _root_params(expr: cst.BaseExpression, defs: dict, params: set[str], depth: int = 0) -> set[str]:
    """Pointer parameters an address is based on: the operands of its ``+``/``-`` chain,
    followed through assignments (``p_o = o + ...`` -> {"o"}); products are offsets."""
    if depth > 8:
        return set()
    if isinstance(expr, cst.Name):
        if expr.value in params:
            return {expr.value}
        out: set[str] = set()
        for v in defs.get(expr.value, ()):
            out |= _root_params(v, defs, params, depth + 1)
        return out
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Add, cst.Subtract)):
        return _root_params(expr.left, defs, params, depth + 1) | _root_params(expr.right, defs, params, depth + 1)
    if isinstance(expr, cst.Subscript):
        return _root_params(expr.value, defs, params, depth + 1)
    if isinstance(expr, cst.IfExp):
        return _root_params(expr.body, defs, params, depth + 1) | _root_params(expr.orelse, defs, params, depth + 1)
    return set()


def _stepped_pointers(loop: cst.For, loop_assigned: set[str]) -> dict[str, tuple[cst.BaseExpression, tuple, int]]:
    """p -> (INC, chain, index of the statement in walk order) for ``p += INC`` in the loop."""
    out: dict[str, tuple] = {}
    counts: dict[str, int] = {}
    for idx, (small, _line, chain, loops) in enumerate(F.walk(loop.body.body)):
        name = F.single_target(small)
        if name is None or loops:
            continue
        counts[name] = counts.get(name, 0) + 1
        if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign):
            if not C.names_in(small.value) & loop_assigned:
                out[name] = (small.value, chain, idx)
    return {p: v for p, v in out.items() if counts[p] == 1}


def _with_mask(load: cst.Call, guard: str) -> cst.Call:
    """The load with ``guard`` and-ed into its mask (added, with other=0, when absent)."""
    args = list(load.args)
    pos = [i for i, a in enumerate(args) if a.keyword is None]
    kw = {a.keyword.value: i for i, a in enumerate(args) if a.keyword is not None}
    if "mask" in kw:
        i = kw["mask"]
        args[i] = args[i].with_changes(value=cst.parse_expression(f"({C.code_of(args[i].value)}) & {guard}"))
    elif len(pos) >= 2:
        i = pos[1]
        args[i] = args[i].with_changes(value=cst.parse_expression(f"({C.code_of(args[i].value)}) & {guard}"))
    else:
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args[-1] = args[-1].with_changes(comma=comma)
        args.append(cst.Arg(value=cst.parse_expression(guard), keyword=cst.Name("mask"),
                            equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
        if "other" not in kw and len(pos) < 3:
            args[-1] = args[-1].with_changes(comma=comma)
            args.append(cst.Arg(value=cst.Integer("0"), keyword=cst.Name("other"),
                                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))))
    return load.with_changes(args=args)


def _wrap(stmts: list[cst.BaseStatement], chain) -> list[cst.BaseStatement]:
    """``stmts`` under the if-conditions of ``chain`` (outermost first)."""
    for test, polarity in reversed(chain):
        t = test if polarity else f"not ({test})"
        stmts = [cst.If(test=cst.parse_expression(t), body=cst.IndentedBlock(body=stmts))]
    return stmts


def _line(code: str) -> cst.SimpleStatementLine:
    return cst.parse_statement(code + "\n")


def prefetch(func: cst.FunctionDef, names: NameAllocator, pos) -> tuple[cst.FunctionDef, list[Prefetched], str]:
    """The kernel with its token loop's input loads software-pipelined; (func, what, why-not)."""
    loop = token_loop(func)
    if loop is None:
        return func, [], "no step-1 range loop with loads in the kernel body"
    start, stop = _loop_bounds(loop)
    consts = C.constexpr_params(func)
    params = {p.name.value for p in C.params(func) if p.name.value not in consts}
    defs = F.assignments(func)
    loop_assigned = C.assigned_names(loop.body)
    ivar_node = loop.target
    if not isinstance(ivar_node, cst.Name):
        return func, [], "the token loop's target is not a single name"
    ivar = ivar_node.value
    new_loop_target = None
    if ivar == "_":
        ivar = names.fresh("i_step")
        new_loop_target = cst.Name(ivar)
    loop_assigned |= {ivar}
    if C.names_in(cst.parse_expression(stop)) & loop_assigned:
        return func, [], "the loop bound changes inside the loop"
    stepped = _stepped_pointers(loop, loop_assigned)
    stored_roots: set[str] = set()
    for call in C.calls_in(func.body):
        if C.is_store(call) or C.last_part(C.call_name(call)).startswith("atomic"):
            stored_roots |= _root_params(call.args[0].value, defs, params)

    plan = []  # (small, line node, chain, target, stepped?)
    for idx, (small, line, chain, loops) in enumerate(F.walk(loop.body.body)):
        if loops or not isinstance(small, cst.Assign) or F.single_target(small) is None or len(line.body) != 1:
            continue
        loads = [c for c in C.calls_in(small.value) if C.is_load(c)]
        if len(loads) != 1 or not loads[0].args:
            continue
        if not all(_constexpr_test(t, consts) for t, _ in chain):
            continue
        read = C.names_in(small.value)
        moving = read & loop_assigned
        if moving - set(stepped) - {ivar}:
            continue
        if any(stepped[p][2] < idx or F.contradicts(chain, stepped[p][1]) or not set(stepped[p][1]) <= set(chain)
               for p in moving & set(stepped)):
            continue
        if _root_params(loads[0].args[0].value, defs, params) & stored_roots:
            continue
        plan.append((small, line, chain, F.single_target(small), bool(moving)))
    if not plan:
        return func, [], "no load in the token loop has a loop-invariant or stepped address"

    guard = names.fresh("has_next")
    pre: list[cst.BaseStatement] = []
    top: list[cst.BaseStatement] = [_line(f"{guard} = {ivar} + 1 < {stop}")]
    end: list[cst.BaseStatement] = []
    replace: dict[cst.SimpleStatementLine, cst.SimpleStatementLine] = {}
    done: list[Prefetched] = []
    for small, line, chain, target, moves in plan:
        cur = names.fresh(f"{target}_pf")
        first = substitute(small.value, {ivar: cst.parse_expression(f"({start})")}) if ivar in C.names_in(small.value) else small.value
        if moves:  # a loop that runs no step (T = 0) must not read step 0's row: it may lie past the end
            load0 = [c for c in C.calls_in(first) if C.is_load(c)][0]
            first = _replace_node(first, load0, _with_mask(load0, f"({start} < {stop})"))
        pre += _wrap([_line(f"{cur} = {C.code_of(first)}")], chain)
        replace[line] = line.with_changes(body=[small.with_changes(value=cst.Name(cur))])
        if moves:
            nxt = names.fresh(f"{target}_nx")
            subst = {p: cst.parse_expression(f"({p} + {C.code_of(stepped[p][0])})") for p in C.names_in(small.value) & set(stepped)}
            subst[ivar] = cst.parse_expression(f"({ivar} + 1)")
            value = substitute(small.value, subst)
            load = [c for c in C.calls_in(value) if C.is_load(c)][0]
            value = _replace_node(value, load, _with_mask(load, guard))
            top += _wrap([_line(f"{nxt} = {C.code_of(value)}")], chain)
            end += _wrap([_line(f"{cur} = {nxt}")], chain)
        done.append(Prefetched(target, pos(line), moves))

    body = [replace.get(s, s) if isinstance(s, cst.SimpleStatementLine) else _replace_nested(s, replace) for s in loop.body.body]
    has_moving = any(p.stepped for p in done)
    new_body = (top if has_moving else []) + body + (end if has_moving else [])
    new_loop = loop.with_changes(body=loop.body.with_changes(body=new_body))
    if new_loop_target is not None:
        new_loop = new_loop.with_changes(target=new_loop_target)
    note = C.comment_line("skel SK002: the token loop's input loads are issued one step ahead (step 0 with the state)")
    if pre:
        pre[0] = pre[0].with_changes(leading_lines=[note])
    out = []
    for s in func.body.body:
        if s is loop:
            out += pre + [new_loop]
        else:
            out.append(s)
    return func.with_changes(body=func.body.with_changes(body=out)), done, ""


def _replace_node(tree: cst.CSTNode, old: cst.CSTNode, new: cst.CSTNode):
    return C.apply_edits(tree, {old: lambda _u: new}) if tree is not old else new


def _replace_nested(stmt: cst.BaseStatement, replace: dict) -> cst.BaseStatement:
    """``stmt`` with the statement lines in ``replace`` swapped, at any depth of ifs."""
    edits = {old: (lambda n: (lambda _u: n))(new) for old, new in replace.items()}
    return C.apply_edits(stmt, edits)

