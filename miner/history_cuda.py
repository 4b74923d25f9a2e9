"""CUDA kernels seen as Python syntax trees, so history and variant mining diff them like Triton.

``cuda_module(text)`` parses a CUDA/C++ file with tree-sitter (after the macro sanitizer of
``skel.miner.cuda_macros``) and mirrors every ``__global__`` and ``__device__`` function
definition as an ``ast.FunctionDef`` whose statements and expressions are the C ones written
in Python syntax, with line numbers of the file:

==========================================  ================================================
C                                           mirror
==========================================  ================================================
``float x = a / sqrtf(s);``                 ``x: float = a / sqrtf(s)``
``acc += p * v;`` ``i++;``                  ``acc += p * v`` ``i += 1``
``for (int i = 0; i < n; i += 4) {...}``    ``for i in cfor((i := 0), i < n, assign(i, i + 4)): ...``
``c ? a : b``  ``a && b``  ``!a``           ``a if c else b``  ``a and b``  ``not a``
``p->x``  ``p[i]``  ``*p``  ``&x``          ``p.x``  ``p[i]``  ``p[0]``  ``addr(x)``
``(float)x``  ``static_cast<half>(x)``      ``cast_float(x)``  ``static_cast[half](x)``
``std::min(a, b)``  ``#pragma unroll 4``    ``std.min(a, b)``  ``pragma('unroll 4')``
==========================================  ================================================

Anything else becomes an opaque ``cstmt('<text>')`` / ``cexpr('<text>')`` so that a change
to it is still an edit. The mirror is only ever diffed and printed, never run. Decorators
mark the kind (``cuda_global`` / ``cuda_device``): these are not Triton ``jit`` functions.
"""
from __future__ import annotations

import ast
import keyword
import re

from skel.miner.cuda_frontend import _function_name, _parser, declared_name, text_of
from skel.miner.cuda_macros import sanitize
from skel.miner.walk import language_of

_BINOPS = {"+": ast.Add, "-": ast.Sub, "*": ast.Mult, "/": ast.Div, "%": ast.Mod, "<<": ast.LShift,
           ">>": ast.RShift, "&": ast.BitAnd, "|": ast.BitOr, "^": ast.BitXor}
_CMPOPS = {"==": ast.Eq, "!=": ast.NotEq, "<": ast.Lt, "<=": ast.LtE, ">": ast.Gt, ">=": ast.GtE}
_UNARY = {"-": ast.USub, "+": ast.UAdd, "!": ast.Not, "~": ast.Invert}
_SKIP = {"comment", ";", "{", "}"}
_ASSIGNABLE = (ast.Name, ast.Attribute, ast.Subscript)


def is_cuda_path(path: str) -> bool:
    """A CUDA/C++ source by its extension, as plain mining decides (``skel.miner.walk``)."""
    return language_of(path) == "cuda"


def cuda_module(text: str) -> ast.Module | None:
    """The mirror of every __global__/__device__ function in ``text``; None when there is none."""
    if "__global__" not in text and "__device__" not in text:
        return None
    san = sanitize(text)
    root = _parser().parse(san.text.encode("utf-8")).root_node
    body = [fn for fn in (_safe_function(n) for n in _definitions(root)) if fn is not None]
    if not body:
        return None
    return ast.Module(body=body, type_ignores=[])


def _definitions(root):
    out, stack = [], [root]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            if any(c.type in ("__global__", "__device__") for c in n.children):
                out.append(n)
            continue  # nothing to mirror inside a body
        stack.extend(reversed(n.children))
    return out


def _safe_function(ts) -> ast.FunctionDef | None:
    """One definition's mirror; a construct the mirror does not expect drops that function, not the file."""
    try:
        return _function(ts)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError, RecursionError):
        return None


def _at(node: ast.AST, ts) -> ast.AST:
    node.lineno, node.col_offset = ts.start_point[0] + 1, ts.start_point[1]
    node.end_lineno, node.end_col_offset = ts.end_point[0] + 1, ts.end_point[1]
    return ast.fix_missing_locations(node)


def _function(ts) -> ast.FunctionDef | None:
    name = _function_name(ts)
    body = ts.child_by_field_name("body")
    if not name or body is None:
        return None
    kind = "cuda_global" if any(c.type == "__global__" for c in ts.children) else "cuda_device"
    params = []
    decl = ts.child_by_field_name("declarator")
    while decl is not None and decl.type != "function_declarator":
        decl = decl.child_by_field_name("declarator")
    plist = decl.child_by_field_name("parameters") if decl is not None else None
    for p in (plist.named_children if plist is not None else ()):
        pname = declared_name(p.child_by_field_name("declarator")) if p.child_by_field_name("declarator") else None
        if pname:
            params.append(ast.arg(arg=_ident(pname)))
    fn = ast.FunctionDef(name=_ident(name.split("::")[-1]), args=ast.arguments(
        posonlyargs=[], args=params, kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=_block(body) or [ast.Pass()], decorator_list=[ast.Name(kind, ast.Load())], returns=None,
        type_params=[])
    return _at(fn, ts)


def _ident(text: str) -> str:
    """A Python identifier for a C name or type (``const float`` -> ``const_float``; keywords get a ``_``)."""
    out = re.sub(r"\W+", "_", text.strip()) or "_"
    out = out if not out[0].isdigit() else "_" + out
    return out + "_" if keyword.iskeyword(out) or out in ("True", "False", "None") else out


# ------------------------------------------------------------------ statements
def _block(ts) -> list[ast.stmt]:
    """Statements of a compound statement (nested bare blocks are inlined)."""
    out: list[ast.stmt] = []
    for c in ts.children:
        if c.type in _SKIP:
            continue
        if c.type == "compound_statement":
            out.extend(_block(c))
        else:
            out.extend(_stmt(c))
    return out


def _body(ts) -> list[ast.stmt]:
    if ts is None:
        return [ast.Pass()]
    stmts = _block(ts) if ts.type == "compound_statement" else _stmt(ts)
    return stmts or [ast.Pass()]


def _stmt(ts) -> list[ast.stmt]:
    t = ts.type
    if t == "declaration":
        return _declaration(ts)
    if t == "expression_statement":
        e = ts.named_children[0] if ts.named_children else None
        return [] if e is None else [_at(_expr_stmt(e), ts)]
    if t == "if_statement":
        cond = ts.child_by_field_name("condition")
        alt = ts.child_by_field_name("alternative")
        if alt is not None and alt.type == "else_clause":
            alt = alt.named_children[0] if alt.named_children else None
        orelse = [] if alt is None else _body(alt)
        return [_at(ast.If(test=_cond(cond), body=_body(ts.child_by_field_name("consequence")), orelse=orelse), ts)]
    if t == "for_statement":
        init = ts.child_by_field_name("initializer")
        var = "_"
        if init is not None and init.type == "declaration":
            d = init.child_by_field_name("declarator")
            var = declared_name(d) or "_"
        parts = [_init_expr(init), _expr(ts.child_by_field_name("condition")), _expr(ts.child_by_field_name("update"))]
        loop = ast.For(target=ast.Name(_ident(var), ast.Store()), iter=ast.Call(ast.Name("cfor", ast.Load()), parts, []),
                       body=_body(ts.child_by_field_name("body")), orelse=[])
        return [_at(loop, ts)]
    if t == "while_statement":
        return [_at(ast.While(test=_cond(ts.child_by_field_name("condition")), body=_body(ts.child_by_field_name("body")),
                              orelse=[]), ts)]
    if t == "do_statement":
        return [_at(ast.While(test=ast.Call(ast.Name("do_while", ast.Load()), [_cond(ts.child_by_field_name("condition"))], []),
                              body=_body(ts.child_by_field_name("body")), orelse=[]), ts)]
    if t == "return_statement":
        e = ts.named_children[0] if ts.named_children else None
        return [_at(ast.Return(value=None if e is None else _expr(e)), ts)]
    if t == "break_statement":
        return [_at(ast.Break(), ts)]
    if t == "continue_statement":
        return [_at(ast.Continue(), ts)]
    if t == "compound_statement":
        return _block(ts)
    if t in ("preproc_call", "preproc_def"):
        text = " ".join(text_of(ts).split())
        what = text[len("#pragma"):].strip() if text.startswith("#pragma") else text
        name = "pragma" if text.startswith("#pragma") else "preproc"
        return [_at(ast.Expr(ast.Call(ast.Name(name, ast.Load()), [ast.Constant(what)], [])), ts)]
    return [_at(ast.Expr(ast.Call(ast.Name("cstmt", ast.Load()), [ast.Constant(" ".join(text_of(ts).split()))], [])), ts)]


def _declaration(ts) -> list[ast.stmt]:
    typ = ts.child_by_field_name("type")
    qual = [text_of(c) for c in ts.children if c.type in ("type_qualifier", "storage_class_specifier")]
    base = _ident(" ".join(qual + ([text_of(typ)] if typ is not None else [])))
    out = []
    for d in ts.children_by_field_name("declarator"):
        value = d.child_by_field_name("value") if d.type == "init_declarator" else None
        inner = d.child_by_field_name("declarator") if d.type == "init_declarator" else d
        name = declared_name(inner) or "_"
        shape = "".join("_ptr" if x.type == "pointer_declarator" else "_arr" if x.type == "array_declarator" else ""
                        for x in _declarator_chain(inner))
        ann = ast.Name(base + shape, ast.Load())
        out.append(_at(ast.AnnAssign(target=ast.Name(_ident(name), ast.Store()), annotation=ann,
                                     value=None if value is None else _expr(value), simple=1), ts))
    return out


def _declarator_chain(d):
    while d is not None and d.type not in ("identifier", "field_identifier"):
        yield d
        d = d.child_by_field_name("declarator")


def _init_expr(init) -> ast.expr:
    if init is None:
        return ast.Constant(None)
    if init.type == "declaration":
        d = init.child_by_field_name("declarator")
        value = d.child_by_field_name("value") if d is not None and d.type == "init_declarator" else None
        name = declared_name(d) or "_"
        return ast.NamedExpr(ast.Name(_ident(name), ast.Store()), _expr(value) if value is not None else ast.Constant(None))
    return _expr(init)


def _cond(ts) -> ast.expr:
    if ts is None:
        return ast.Constant(True)
    if ts.type in ("condition_clause", "parenthesized_expression"):
        inner = ts.child_by_field_name("value") or (ts.named_children[0] if ts.named_children else None)
        return _cond(inner) if inner is not None and inner is not ts else ast.Constant(True)
    return _expr(ts)


def _expr_stmt(e) -> ast.stmt:
    if e.type == "assignment_expression":
        op = text_of(e.child_by_field_name("operator"))
        left, right = _expr(e.child_by_field_name("left"), store=True), _expr(e.child_by_field_name("right"))
        if not isinstance(left, _ASSIGNABLE):  # an lvalue Python cannot write (e.g. a call): keep it as a call
            return ast.Expr(_call("assign", [left, right if op == "=" else ast.BinOp(
                _expr(e.child_by_field_name("left")), _BINOPS.get(op[:-1], ast.Add)(), right)]))
        if op == "=":
            return ast.Assign(targets=[left], value=right)
        if op[:-1] in _BINOPS:
            return ast.AugAssign(target=left, op=_BINOPS[op[:-1]](), value=right)
    if e.type == "update_expression":
        op = "+" if "++" in text_of(e) else "-"
        return ast.AugAssign(target=_expr(e.child_by_field_name("argument"), store=True), op=_BINOPS[op](),
                             value=ast.Constant(1))
    return ast.Expr(_expr(e))


# ------------------------------------------------------------------ expressions
def _expr(ts, store: bool = False) -> ast.expr:
    if ts is None:
        return ast.Constant(None)
    ctx = ast.Store() if store else ast.Load()
    t = ts.type
    if t in ("identifier", "field_identifier", "namespace_identifier", "type_identifier", "primitive_type"):
        return ast.Name(_ident(text_of(ts)), ctx)
    if t == "number_literal":
        return ast.Constant(_number(text_of(ts)))
    if t in ("string_literal", "char_literal", "raw_string_literal", "concatenated_string"):
        return ast.Constant(text_of(ts))
    if t in ("true", "false"):
        return ast.Constant(t == "true")
    if t in ("null", "nullptr"):
        return ast.Constant(None)
    if t == "parenthesized_expression":
        return _expr(ts.named_children[0], store) if ts.named_children else ast.Constant(None)
    if t == "binary_expression":
        op = text_of(ts.child_by_field_name("operator"))
        a, b = _expr(ts.child_by_field_name("left")), _expr(ts.child_by_field_name("right"))
        if op in _BINOPS:
            return ast.BinOp(a, _BINOPS[op](), b)
        if op in _CMPOPS:
            return ast.Compare(a, [_CMPOPS[op]()], [b])
        if op in ("&&", "||"):
            return ast.BoolOp(ast.And() if op == "&&" else ast.Or(), [a, b])
    if t == "unary_expression":
        op = text_of(ts.child_by_field_name("operator"))
        if op in _UNARY:
            return ast.UnaryOp(_UNARY[op](), _expr(ts.child_by_field_name("argument")))
    if t == "pointer_expression":  # *p is p[0] (assignable); &x is addr(x)
        op = text_of(ts.child_by_field_name("operator"))
        arg = _expr(ts.child_by_field_name("argument"))
        return ast.Subscript(arg, ast.Constant(0), ctx) if op == "*" else _call("addr", [arg])
    if t == "update_expression":
        return _call("inc" if "++" in text_of(ts) else "dec", [_expr(ts.child_by_field_name("argument"))])
    if t == "call_expression":
        args = ts.child_by_field_name("arguments")
        return ast.Call(_expr(ts.child_by_field_name("function")),
                        [_expr(a) for a in (args.named_children if args is not None else ()) if a.type != "comment"], [])
    if t == "template_function":
        targs = ts.child_by_field_name("arguments")
        items = [_expr(a.named_children[0] if a.type == "type_descriptor" and a.named_children else a)
                 for a in (targs.named_children if targs is not None else ())]
        return ast.Subscript(_expr(ts.child_by_field_name("name")),
                             items[0] if len(items) == 1 else ast.Tuple(items, ast.Load()), ctx)
    if t == "field_expression":
        return ast.Attribute(_expr(ts.child_by_field_name("argument")), _ident(text_of(ts.child_by_field_name("field"))), ctx)
    if t == "subscript_expression":
        idx = ts.child_by_field_name("index") or ts.child_by_field_name("indices")
        if idx is not None and idx.type == "subscript_argument_list":
            parts = [_expr(x) for x in idx.named_children]
            index = parts[0] if len(parts) == 1 else ast.Tuple(parts, ast.Load())
        else:
            index = _expr(idx)
        return ast.Subscript(_expr(ts.child_by_field_name("argument")), index, ctx)
    if t == "cast_expression":
        return _call("cast_" + _ident(text_of(ts.child_by_field_name("type"))), [_expr(ts.child_by_field_name("value"))])
    if t == "conditional_expression":
        return ast.IfExp(_expr(ts.child_by_field_name("condition")), _expr(ts.child_by_field_name("consequence")),
                         _expr(ts.child_by_field_name("alternative")))
    if t == "qualified_identifier":
        parts = [p for p in text_of(ts).replace(" ", "").split("::") if p]
        node: ast.expr = ast.Name(_ident(parts[0]), ast.Load())
        for p in parts[1:]:
            node = ast.Attribute(node, _ident(p), ast.Load())
        return node
    if t in ("initializer_list", "comma_expression"):
        items = [_expr(x) for x in ts.named_children]
        return ast.List(items, ast.Load()) if t == "initializer_list" else ast.Tuple(items, ast.Load())
    if t == "sizeof_expression":
        return _call("sizeof", [ast.Constant(" ".join(text_of(ts).split()))])
    if t == "assignment_expression":  # inside an expression (a for loop's update): assign(a, a + b) for a += b
        op = text_of(ts.child_by_field_name("operator"))
        left, right = _expr(ts.child_by_field_name("left")), _expr(ts.child_by_field_name("right"))
        if op[:-1] in _BINOPS:
            right = ast.BinOp(_expr(ts.child_by_field_name("left")), _BINOPS[op[:-1]](), right)
        return _call("assign", [left, right])
    return _call("cexpr", [ast.Constant(" ".join(text_of(ts).split()))])


def _call(name: str, args: list[ast.expr]) -> ast.Call:
    return ast.Call(ast.Name(name, ast.Load()), args, [])


def _number(text: str):
    t = text.replace("'", "")
    stripped = re.sub(r"[uUlLfF]+$", "", t) if not t.lower().startswith("0x") else re.sub(r"[uUlL]+$", "", t)
    for conv in (int, float):
        try:
            return conv(stripped, 0) if conv is int else conv(stripped)
        except ValueError:
            continue
    return text
