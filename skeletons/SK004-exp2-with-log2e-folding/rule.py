"""SK004-exp2-with-log2e-folding: ``exp(x * s)`` -> ``exp2(x * (s * log2(e)))``.

Conditions (detector):
Instance: an exp2 whose argument carries a log2(e) factor, folded in the kernel (``b_s =
tl.dot(q, k) * scale * RCP_LN2`` then ``exp2(b_s - m)``) or upstream (the argument is loaded
from a tensor that host code in the same file pre-scales by log2(e), e.g. a gate cumsum called
with ``scale=RCP_LN2``). An exp2 with no log2(e) anywhere is a genuine base-2 exponential and
not an instance. Opportunity: a natural exp whose argument is computed in the kernel by a
multiply, so the log2(e) factor folds into that multiply at no extra instruction.

Rewrite:
SK004: exp(x) -> exp2(x * log2(e)), the constant folded into an existing constant multiplier.
In the log domain (every exp's argument a sum or difference of logits scaled by one constant, through
``tl.where`` masks and running maxima, used nowhere else): ``scale * log2(e)`` once, the logits scaled
by it, each exp an exp2 of its unchanged argument (online softmax: no multiply per exp at all).

DESCRIPTION: every natural exponential in a ``@triton.jit`` function -- ``tl.exp``,
``tl.math.exp``, or a helper ``exp`` (imported, e.g. ``from fla.ops.utils.op import exp``,
or defined in the file as a jit function returning ``tl.exp`` of its argument) -- becomes
``tl.math.exp2(x * 1.4426950408889634)``. When ``x`` is ``a * c`` with ``c`` a literal, the
product ``c * log2(e)`` is folded into one literal; with ``c`` a never-reassigned kernel
parameter (a scale), the multiplier becomes ``(c * 1.44...)`` so there is still one multiply
per element. Helper exps that upcast their argument get an explicit ``.to(tl.float32)`` before
the multiply unless the argument is already known to be fp32.

Unsafe: exp2 of a rounded product differs from exp in the last bits.
"""
from __future__ import annotations

from functools import lru_cache
import re

import libcst as cst

from skel.miner.detectors.base import LOAD_CALL, Check, Ctx, Hit, no, yes
from skel.miner.detectors.helpers import enclosing_function as _enclosing_function, split_args as _split_args, terms as _terms
from skel.miner.detectors.text import find_calls
from skel.rewriter import cst as C
from skel.rewriter import cst_flow as F
from skel.rewriter.base import Change, Rewrite, RewriteOptions
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)
SAFETY = "unsafe"


# ---------------------------------------------------------------- conditions


LOG2E = re.compile(
    r"\b(?:RCP_LN2|LOG2_?E|INV_LN2|LN2_INV|RLN2|M_LOG2E\w*|log2e|log2_e|LOG2E_F|kLog2e)\b"
    r"|1\.44269\d*|log2\(\s*(?:math\.)?e\s*\)|1(?:\.0*)?\s*/\s*(?:math\.)?log\(\s*2(?:\.0*)?\s*\)"
)
_DEFINITION = re.compile(r"^([A-Za-z_]\w*)\s*(?::\s*[\w\.\[\]]+)?\s*=\s*(.+?)\s*(?:#.*)?$", re.M)


@lru_cache(maxsize=16)
def log2e_pattern(source: str) -> re.Pattern:
    """``LOG2E`` plus the names the file defines at module level as log2(e) (``_LOG2E = 1.4426950408889634``,
    ``_RCP = 1 / math.log(2)``): a use of such a name is a log2(e) factor whatever it is called."""
    aliases = sorted({m.group(1) for m in _DEFINITION.finditer(source)
                      if LOG2E.fullmatch(m.group(2)) and not LOG2E.fullmatch(m.group(1))})
    if not aliases:
        return LOG2E
    return re.compile(LOG2E.pattern + r"|\b(?:" + "|".join(map(re.escape, aliases)) + r")\b")


EXP2 = ("tl.exp2", "tl.math.exp2", "libdevice.exp2", "tldevice.exp2", "exp2", "exp2f", "__exp2f", "ptx_exp2", "math::ptx_exp2")
EXP = ("tl.exp", "tl.math.exp", "libdevice.exp", "tldevice.exp", "tldevice.fast_expf", "exp", "expf", "__expf", "safe_exp")


def _calls(ctx: Ctx, op: str, names) -> list[tuple[int, str, str]]:
    """(line, call name, argument) for every math op ``op`` in the kernel."""
    out = []
    for line in sorted({m.line for m in ctx.p.math if m.op == op}):
        for name, arg in find_calls(ctx.statement(line), names):
            out.append((line, name, arg))
    return out


def _host_prescale(ctx: Ctx) -> str | None:
    """A line outside every kernel body that scales by log2(e) (a host-side pre-scale): in a function that
    launches this kernel when the file shows its launches, else anywhere outside the kernels."""
    cache = ctx.cache.setdefault(CODE, {})
    if "host" not in cache:
        key = f"{CODE}:host:{ctx.p.language}"  # the lines outside every jit function: once per file
        if key not in ctx.file.cache:
            ctx.file.cache[key] = [(i, t) for i, t in _log2e_lines(ctx.source) if not _in_kernel(ctx, i)]
        rows = [(i, t) for i, t in ctx.file.cache[key] if not (ctx.p.line <= i <= ctx.p.end_line)]
        launchers = _reaching(ctx, {_enclosing_function(ctx, s.line) for s in ctx.p.launches} - {None})
        if launchers:  # the kernel's launchers and their callers decide; another kernel's pre-scale is not this one's
            rows = [(i, t) for i, t in rows if _enclosing_function(ctx, i) in launchers]
        row = rows[0] if rows else None
        cache["host"] = f"line {row[0]}: {row[1]}" if row else None
    return cache["host"]


def _reaching(ctx: Ctx, defs: set[int]) -> set[int]:
    """``defs`` (def lines) and the functions of the file that call them, transitively: a pre-scale in the
    function that calls the launcher (``g = cumsum(g, scale=RCP_LN2)``, then ``launch(g)``) feeds the kernel."""
    key = f"{CODE}:reaching:{sorted(defs)}"
    if key in ctx.file.cache:
        return ctx.file.cache[key]
    lines = ctx.source.splitlines()
    out, frontier = set(defs), set(defs)
    for _ in range(4):
        names = {m.group(1) for d in frontier if 0 < d <= len(lines)
                 and (m := re.match(r"\s*(?:async\s+)?def\s+(\w+)", lines[d - 1]))}
        if not names:
            break
        call = re.compile(r"(?<![\w.])(?:" + "|".join(map(re.escape, sorted(names))) + r")\s*\(")
        frontier = {d for i, t in enumerate(lines, 1) if call.search(t) and not re.match(r"\s*def\s", t)
                    and (d := _enclosing_function(ctx, i)) is not None and d not in out}
        out |= frontier
    ctx.file.cache[key] = out
    return out


@lru_cache(maxsize=16)
def _log2e_lines(source: str) -> tuple[tuple[int, str], ...]:
    """Code lines of a file that use a log2(e) constant outside strings and comments (not the
    import or the definition of the constant)."""
    log2e = log2e_pattern(source)
    if not log2e.search(source):
        return ()
    lines = source.splitlines()
    # only the lines that mention the constant are tokenised (the whole file took ~50 ms a file)
    hits = sorted({source.count("\n", 0, m.start()) + 1 for m in log2e.finditer(source)})
    code = _code_only(source, hits)
    out = []
    for i, text in code.items():
        if not log2e.search(text):
            continue
        t = lines[i - 1].strip()
        # a module-level ``RCP_LN2 = 1.44...`` defines the constant; an indented ``scale=RCP_LN2,``
        # inside a call passes it (that is a use)
        definition = not lines[i - 1][:1].isspace() and re.match(r"^[A-Za-z_]\w*\s*(?::\s*[\w\.]+)?\s*=\s*(.+?)$", t)
        if t.startswith(("import ", "from ")) or (definition and LOG2E.fullmatch(definition.group(1).strip())):
            continue  # defining or importing the constant is not using it
        out.append((i, t))
    return tuple(sorted(out))


_TRIPLE = re.compile(r'(?s)([rRbBuUfF]{0,2})("""|\'\'\')(.*?)\2')


def _code_only(source: str, wanted: list[int]) -> dict[int, str]:
    """For each line of ``wanted``, the text of its code tokens (strings and comments dropped).

    Triple-quoted strings (docstrings) are found once over the file; each wanted line outside them is
    tokenised on its own, a line that does not tokenise alone (a bracket left open) read as code with
    its ``#`` comment cut."""
    import io
    import tokenize

    inside: list[tuple[int, int]] = []  # (first, last) lines of each triple-quoted string
    if '"""' in source or "\'\'\'" in source:
        for m in _TRIPLE.finditer(source):
            first = source.count("\n", 0, m.start()) + 1
            inside.append((first, first + m.group(0).count("\n")))
    lines = source.splitlines()
    out: dict[int, str] = {}
    for i in wanted:
        if not 0 < i <= len(lines):
            continue
        text = lines[i - 1]
        for first, last in inside:
            if first < i < last:
                text = ""  # wholly inside a docstring
            elif first == i == last or (first == i < last) or (first < i == last):
                text = _TRIPLE.sub(" ", text) if first == i == last else ""
        if not text.strip():
            continue
        try:
            toks = [t.string for t in tokenize.generate_tokens(io.StringIO(text.strip() + "\n").readline)
                    if t.type not in (tokenize.STRING, tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE,
                                      tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)]
        except (tokenize.TokenError, IndentationError, SyntaxError):
            toks = [text.split("#", 1)[0]]
        out[i] = " ".join(toks).strip()
    return out


def _in_kernel(ctx: Ctx, line: int) -> bool:
    """Whether ``line`` lies in a function decorated with ``@triton.jit`` (Python files only)."""

    start = _enclosing_function(ctx, line) if ctx.p.language == "triton" else None
    if start is None:
        return False
    ln = start - 1
    while ln >= 1 and ctx.text(ln) and (ctx.text(ln).startswith("@") or ctx._lines[ln - 1][:1] in " \t)"):
        if ctx.text(ln).startswith("@") and "jit" in ctx.text(ln):
            return True
        ln -= 1
    return False


def _folding(ctx: Ctx, line: int, arg: str) -> str | None:
    log2e = log2e_pattern(ctx.source)
    if log2e.search(arg):
        return f"line {line}: {arg}"
    chain = ctx.closure(arg, line, depth=5, through_loads=False)
    for a in chain:
        if log2e.search(a.rhs):
            return f"line {a.line}: {' '.join(a.targets)} = {a.rhs}"
    if any(LOAD_CALL.search(a.rhs) for a in chain) or _param_in(ctx, arg, chain):
        host = _host_prescale(ctx)
        if host:
            return f"upstream, {host}"
    return None


def _param_in(ctx: Ctx, arg: str, chain) -> bool:
    names = set(re.findall(r"[A-Za-z_]\w*", arg + " " + " ".join(a.rhs for a in chain)))
    return any(p.name in names and not p.constexpr for p in ctx.p.params)


NEUTRAL = re.compile(r"^-?\s*(\d[\d\.e\-]*|float\(\s*['\"]-?inf['\"]\s*\)|-?\s*float\(.+\)|0\.?|None)$")


def _is_scale(ctx: Ctx, factor: str, line: int) -> bool:
    """A loop-invariant scalar: a literal, a parameter, a constexpr, or a name computed only from those."""
    f = factor.strip().lstrip("-").strip("() ")
    if re.fullmatch(r"\d[\d\.e\-]*", f) or log2e_pattern(ctx.source).search(f):
        return True
    params = {p.name for p in ctx.p.params}
    if re.fullmatch(r"[A-Za-z_]\w*", f):
        if f in params:
            return True
        d = ctx.last_def(f, line - 1)
        return bool(d) and d.op == "=" and not LOAD_CALL.search(d.rhs) and all(
            n in params or n in ("tl", "float32", "to") or _is_scale(ctx, n, d.line) for n in re.findall(r"[A-Za-z_]\w*", d.rhs)
        )
    return False


def _scaled(ctx: Ctx, expr: str, line: int, depth: int = 12) -> bool:
    """Every additive term of ``expr`` is produced by a multiply by a loop-invariant scale."""
    if depth <= 0:
        return False
    expr = re.sub(r"\.to\([^()]*\)$", "", expr.strip())
    if expr.startswith("(") and expr.endswith(")") and _terms(expr[1:-1], "+-") != [expr[1:-1]] and expr.count("(") == 1:
        expr = expr[1:-1]
    terms = _terms(expr, "+-")
    if len(terms) > 1:
        return all(_scaled(ctx, t, line, depth - 1) for t in terms)
    t = terms[0].lstrip("-").strip() if terms else ""
    if not t or NEUTRAL.match(t):
        return True
    factors = _terms(t, "*")
    if len(factors) > 1:
        return any(_is_scale(ctx, f, line) for f in factors)
    m = re.match(r"^(tl\.max|tl\.maximum|tl\.where|max|tl\.min|tl\.minimum)\s*\((.*)\)$", t)
    if m:

        args = _split_args(m.group(2))
        args = args[1:] if m.group(1) == "tl.where" else args
        args = [a for a in args if "=" not in a.split("(")[0]]  # axis=1 keywords
        args = args[:1] if m.group(1) == "tl.max" else args
        return all(_scaled(ctx, a, line, depth - 1) for a in args)
    m = re.match(r"^\(?([A-Za-z_]\w*)\)?(\[[^\]]*\])?$", t)
    if m:
        name = m.group(1)
        d = ctx.last_def(name, line - 1)
        if d is None:
            return False
        if d.op == "*=":
            return _is_scale(ctx, d.rhs, d.line)
        if d.op in ("+=", "-="):
            prev = ctx.defs_of(name, d.line)
            return bool(prev) and _scaled(ctx, d.rhs, d.line, depth - 1) and _scaled(ctx, name, d.line, depth - 1)
        return _scaled(ctx, d.rhs, d.line, depth - 1)
    return False


def _natural_exps(ctx: Ctx) -> list[tuple[int, str, str]]:
    return [
        (ln, n, a) for ln, n, a in _calls(ctx, "exp", EXP)
        if not any(dict(m.detail).get("dtype") in ("bf16", "fp16") for m in ctx.p.math if m.line == ln and m.op == "exp")
    ]


def _opportunities(ctx: Ctx) -> list[tuple[int, str, str]]:
    cache = ctx.cache.setdefault(CODE, {})
    if "opp" not in cache:
        cache["opp"] = [(ln, n, a) for ln, n, a in _natural_exps(ctx) if _scaled(ctx, a, ln)]
    return cache["opp"]


def _log_stores(ctx: Ctx) -> list[str]:
    out = []
    for m in ctx.p.memops:
        if m.kind != "store":
            continue
        stmt = ctx.statement(m.line)
        texts = [stmt] + [a.rhs for a in ctx.closure(stmt, m.line, depth=3, through_loads=False)]
        if any(re.search(r"(?<![\w\.])(?:tl\.)?(?:math\.)?log\s*\(|\blog\s*\(", t) for t in texts):
            out.append(f"line {m.line}: {stmt}")
    return out


def uses_natural_exp(ctx: Ctx) -> Check:
    calls = _natural_exps(ctx)
    if not calls:
        return no("no fp32 natural exponential (tl.exp / expf) in the kernel")
    return yes("; ".join(f"line {ln}: {n}({a})" for ln, n, a in calls[:3]))


def exp_argument_has_foldable_scale(ctx: Ctx) -> Check:
    rows = _opportunities(ctx)
    if not rows:
        calls = _natural_exps(ctx)
        if not calls:
            return no("no exp argument is built only from terms scaled by one loop-invariant multiply")
        ln, n, a = calls[0]
        texts = [a] + [d.rhs for d in ctx.closure(a, ln, depth=3, through_loads=False)]
        if not any(_terms(t, "*") != [t] for t in texts for t in _terms(t, "+-")):
            return no(f"line {ln}: {n}({a}): nothing in the argument is multiplied by a scale, so there is no "
                      "multiply to fold log2(e) into (exp2 would add one)")
        return no(f"line {ln}: {n}({a}): a term of the argument is not scaled by a loop-invariant multiply (a bias "
                  "or an unscaled value would need rescaling too)")
    return yes("; ".join(f"line {ln}: {n}({a}): every term carries a loop-invariant scale" for ln, n, a in rows[:3]))


def exp_base_not_observable(ctx: Ctx) -> Check:
    rows = _log_stores(ctx)
    if rows:
        return no(f"a natural-log quantity is stored for another kernel: {rows[0]}")
    return yes("no log-domain value (lse = m + log(l)) is stored; the exp base stays inside the kernel")


CONDITIONS = {
    "uses-natural-exp": uses_natural_exp,
    "exp-argument-has-foldable-scale": exp_argument_has_foldable_scale,
    "exp-base-not-observable": exp_base_not_observable,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(ln, ln, exp=f"{n}({a})") for ln, n, a in _opportunities(ctx)]


MAX_CALL = re.compile(r"\btl\.(?:math\.)?(?:max|maximum)\s*\(")


def _subtracted(expr: str) -> list[str]:
    """The operands that follow a top-level binary minus in ``expr`` (``qk - m_ij[:, None]`` -> [m_ij[:, None]])."""
    out, depth, cur, minus, prev, word = [], 0, "", False, "", ""
    for c in expr + "+":
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        exponent = prev in "eE" and re.fullmatch(r"\d[\d.]*[eE]", word) is not None  # 1e-6, not scale - m
        if depth == 0 and c in "+-" and prev and prev not in "(*/+-,=" and not exponent:
            if minus and cur.strip():
                out.append(cur.strip())
            cur, minus = "", c == "-"
        else:
            cur += c
        word = word + c if (c.isalnum() or c in "_.") else ("" if not c.isspace() else word)
        if not c.isspace():
            prev = c
    return out


def _base2_softmax(ctx: Ctx, line: int, arg: str) -> str | None:
    """An exp2 of logits minus their (running) maximum, the logits multiplied by a scale that arrives as a
    parameter or a loaded value: a softmax computed in base 2, the skeleton's end state, whose log2(e)
    was folded into that scale wherever it was made (sageattention folds it into q_scale in its
    quantization module). A max-subtracted exp2 of unscaled values (a power of two) is not one."""
    chain = ctx.closure(arg, line, depth=6, through_loads=False)
    rows = [("=", arg, line)] + [(a.op, a.rhs, a.line) for a in chain]
    params = {p.name for p in ctx.p.params if not p.constexpr}

    def is_max(term: str, at: int) -> bool:
        if MAX_CALL.search(term):
            return True
        m = re.match(r"^\(?\s*([A-Za-z_]\w*)", term)
        d = ctx.last_def(m.group(1), at) if m else None
        return bool(d) and bool(MAX_CALL.search(d.rhs))

    subtracted = [(t, ln) for op, rhs, ln in rows
                  for t in ([rhs] if op == "-=" else _subtracted(rhs) if op == "=" else [])]
    top = next((t for t, ln in subtracted if is_max(t, ln)), None)
    if top is None:
        return None
    for op, rhs, ln in rows:
        for term in _terms(rhs, "+-") if op in ("=", "*=") else ():
            factors = _terms(term.lstrip("-").strip(), "*") if op == "=" else [rhs]
            if op == "=" and len(factors) < 2:
                continue
            for f in factors:
                name = f.strip("() ")
                if not re.fullmatch(r"[A-Za-z_]\w*", name):
                    continue
                d = ctx.last_def(name, ln - 1)
                if (name in params and d is None) or (d is not None and LOAD_CALL.search(d.rhs)):
                    return (f"line {ln}: the logits are scaled by {name}, which arrives from outside the kernel, "
                            f"and {top} is subtracted: a base-2 softmax")
    return None


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    for line, name, arg in _calls(ctx, "exp2", EXP2):
        fold = _folding(ctx, line, arg) or _base2_softmax(ctx, line, arg)
        if fold and all(h.line != line for h in out):
            out.append(Hit.at(line, line, exp2=f"{name}({arg})", log2e=fold))
    return out


# ---------------------------------------------------------------- rewrite

LOG2E_VALUE = 1.4426950408889634
LOG2E_LITERAL = repr(LOG2E_VALUE)


def _helper_exps(module: cst.Module, tl: str) -> tuple[set[str], set[cst.FunctionDef]]:
    """Bare names that are exponentials: imported ``exp`` (any alias) and jit helpers in the
    file whose body is ``return tl.exp(<param>[.to(...)])``."""
    names: set[str] = set()
    defs: set[cst.FunctionDef] = set()
    for small, *_ in F.walk(module.body):
        if isinstance(small, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
            for alias in small.names:
                if C.code_of(alias.name) == "exp":
                    names.add(alias.asname.name.value if alias.asname else "exp")
    for func in C.kernels(module):
        body = func.body.body
        stmt = body[0] if len(body) == 1 else None
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Return) and small.value is not None and _is_tl_exp(small.value, tl):
            names.add(func.name.value)
            defs.add(func)
    return names, defs


def _is_tl_exp(node: cst.CSTNode, tl: str) -> bool:
    name = C.call_name(node)
    return name in {f"{tl}.exp", f"{tl}.math.exp", "triton.language.exp", "triton.language.math.exp"}


def _constant(node: cst.BaseExpression, consts: set[str]) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) or (isinstance(node, cst.Name) and node.value in consts)


def _mul(left: cst.BaseExpression, right: cst.BaseExpression) -> cst.BinaryOperation:
    return cst.BinaryOperation(left, cst.Multiply(), right)


def _fold_scale(arg: cst.BaseExpression, consts: set[str]) -> tuple[cst.BaseExpression, str]:
    """``arg * log2(e)`` with the constant folded where ``arg`` already multiplies by one."""
    if isinstance(arg, cst.BinaryOperation) and isinstance(arg.operator, cst.Multiply) and not arg.lpar:
        for side, other in (("right", "left"), ("left", "right")):
            c = getattr(arg, side)
            if _constant(c, consts):
                if isinstance(c, (cst.Integer, cst.Float)) and not c.lpar:
                    folded: cst.BaseExpression = cst.Float(repr(float(c.value) * LOG2E_VALUE))
                    how = f"log2(e) folded into the literal {c.value}"
                else:
                    folded = _mul(c, cst.Float(LOG2E_LITERAL)).with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                    how = f"log2(e) folded into the constant multiplier {C.code_of(c)}"
                return arg.with_changes(**{side: folded}), how
    inner = arg
    if isinstance(arg, (cst.BinaryOperation, cst.BooleanOperation, cst.IfExp, cst.Comparison)) and not arg.lpar:
        inner = arg.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return _mul(inner, cst.Float(LOG2E_LITERAL)), "times log2(e)"


def _upcast(arg: cst.BaseExpression, tl: str) -> cst.BaseExpression:
    if not isinstance(arg, (cst.Name, cst.Call, cst.Subscript, cst.Attribute)) and not arg.lpar:
        arg = arg.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return cst.Call(cst.Attribute(arg, cst.Name("to")), args=[cst.Arg(C.expr(f"{tl}.float32"))])


_NEUTRAL_CALLS = {"float"}  # float("-inf"): the running max's start, -inf in any base


def _neutral(node: cst.BaseExpression) -> bool:
    """A literal a base change leaves alone in practice: 0, +-inf, a masking constant."""
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _neutral(node.expression)
    return isinstance(node, (cst.Integer, cst.Float)) or (
        isinstance(node, cst.Call) and C.call_name(node) in _NEUTRAL_CALLS)


def _linear_leaves(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The terms of a sum / difference (``b_s - b_m_new`` -> [b_s, b_m_new])."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract)):
        return _linear_leaves(node.left) + _linear_leaves(node.right)
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        return _linear_leaves(node.expression)
    return [node]


class _Domain:
    """Log-domain folding of one kernel: the values every natural exp's argument is built from are all
    a logit times one constant scale (``b_s = qk * scale``), carried through ``tl.where`` masks and
    running maxima (``b_m_new = tl.maximum(b_m, tl.max(b_s, 0))``, ``b_m = b_m_new``) and used nowhere
    else. Then ``scale * log2(e)`` is computed once, the logits are scaled by it, and each such exp is
    an ``exp2`` of the same argument: exactly the same values in base 2, one multiply fewer per exp."""

    def __init__(self, kernel: cst.FunctionDef, exps: list[cst.Call], consts: set[str]) -> None:
        self.kernel, self.consts = kernel, consts
        self.defs: dict[str, list] = {}
        for small, *_ in F.walk(kernel.body.body):
            name = F.single_target(small)
            if name is not None and isinstance(small, (cst.Assign, cst.AugAssign)):
                self.defs.setdefault(name, []).append(small.value if isinstance(small, cst.Assign) else None)
        false: set[str] = set()
        for _ in range(8):  # names assumed in the domain while a loop-carried cycle was open may fall out
            self.scale: str | None = None
            self.sources: list[cst.Name] = []  # the scale's Name in each ``logits * scale``
            self.allowed: set[cst.Name] = set()  # uses of domain names that stay right in base 2
            self.known: dict[str, bool] = {n: False for n in false}
            self.exps = [e for e in exps if self._exp_in_domain(e)]
            out = {n for n, v in self.known.items() if not v}
            if out <= false:
                break
            false |= out

    def _exp_in_domain(self, call: cst.Call) -> bool:
        leaves = _linear_leaves(call.args[0].value)
        names = [leaf for leaf in leaves if isinstance(leaf, cst.Name)]
        if not names or not all(isinstance(leaf, cst.Name) or _neutral(leaf) for leaf in leaves):
            return False
        if all(self._name(n.value) for n in names):
            self.allowed.update(names)
            return True
        return False

    def _name(self, name: str) -> bool:
        if name in self.known:
            return self.known[name]
        values = self.defs.get(name)
        if not values or None in values:  # a parameter, or an augmented assignment: not a scaled logit
            self.known[name] = False
            return False
        self.known[name] = True  # provisionally: a running max refers to itself through the loop
        ok = all(self._value(v) for v in values)
        self.known[name] = ok
        return ok

    def _value(self, node: cst.BaseExpression) -> bool:
        if _neutral(node):
            return True
        if isinstance(node, cst.Name):
            if self._name(node.value):
                self.allowed.add(node)
                return True
            return False
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            for side in (node.right, node.left):
                if isinstance(side, cst.Name) and side.value in self.consts:
                    if self.scale not in (None, side.value):
                        return False  # two scales: one folded constant cannot serve both
                    self.scale = side.value
                    self.sources.append(side)
                    return True
            return False
        if isinstance(node, cst.Call):
            fn = C.last_part(C.call_name(node))
            args = [a.value for a in node.args if a.keyword is None]
            if fn in ("maximum", "minimum") and len(args) == 2:
                return all(self._value(a) for a in args)
            if fn in ("max", "min") and args:
                return self._value(args[0])
            if fn == "where" and len(args) == 3:
                return self._value(args[1]) and self._value(args[2])
        return False

    def ok(self) -> bool:
        """Every use of a domain name is one the base change keeps right (no store, no other arithmetic)."""
        if not (self.exps and self.sources and self.scale):
            return False
        domain = {n for n, v in self.known.items() if v}
        uses: list[cst.Name] = []
        targets: set[cst.Name] = set()

        class V(cst.CSTVisitor):
            def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
                if isinstance(node.target, cst.Name):
                    targets.add(node.target)

            def visit_Name(self, node: cst.Name) -> None:
                if node.value in domain:
                    uses.append(node)

        self.kernel.body.visit(V())
        return all(u in self.allowed or u in targets for u in uses)


def _fold_domain(kernel: cst.FunctionDef, domain: _Domain, tl: str, taken: set[str], src: C.Source,
                 edits: dict, changes: list[Change]) -> None:
    name, i = f"{domain.scale}_log2e", 1
    while name in taken:
        name, i = f"{domain.scale}_log2e_{i}", i + 1
    taken.add(name)
    first = min(domain.sources, key=src.line)
    top = next(s for s in kernel.body.body if any(first is n for n in _names(s)))
    stmt = cst.parse_statement(f"{name} = {domain.scale} * {LOG2E_LITERAL}  # log2(e) folded into the scale: "
                               f"exp(x) == exp2(x * log2(e))\n")
    edits[top] = (lambda s: lambda upd: cst.FlattenSentinel([s, upd]))(stmt)
    changes.append(Change(src.line(top), f"{name} = {domain.scale} * log2(e) computed once"))
    for n in domain.sources:
        edits[n] = (lambda new: lambda upd: cst.Name(new))(name)
        changes.append(Change(src.line(n), f"logits scaled by {name} instead of {domain.scale}"))
    for call in domain.exps:
        edits[call] = lambda upd: upd.with_changes(func=C.expr(f"{tl}.math.exp2"))
        changes.append(Change(src.line(call), f"{C.code_of(call)} -> {tl}.math.exp2(...) of the base-2 logits"))


def _names(node: cst.CSTNode) -> list[cst.Name]:
    found: list[cst.Name] = []

    class V(cst.CSTVisitor):
        def visit_Name(self, n: cst.Name) -> None:
            found.append(n)

    node.visit(V())
    return found


def rewrite(source: str, options: RewriteOptions) -> list[Rewrite]:
    src = C.parse(source)
    if isinstance(src, str):
        return C.failed(CODE, source, src, SAFETY)
    tl = C.triton_language_alias(src.module)
    helpers, helper_defs = _helper_exps(src.module, tl)
    ks = [k for k in C.kernels(src.module, options) if k not in helper_defs]
    if not ks:
        return C.skip(CODE, SAFETY, source, "not applicable: no @triton.jit function (other than exp helpers)")
    edits: dict = {}
    changes: list[Change] = []
    taken = C.names_in(src.module)
    for kernel in ks:
        defs = F.assignments(kernel)
        consts = {p.name.value for p in C.params(kernel)} - set(defs)
        exps = [c for c in C.calls_in(kernel) if (C.call_name(c) in helpers or _is_tl_exp(c, tl))
                and len(c.args) == 1 and not c.args[0].keyword]
        domain = _Domain(kernel, [c for c in exps if _is_tl_exp(c, tl)], consts)
        folded = set(domain.exps) if domain.ok() else set()
        if folded:
            _fold_domain(kernel, domain, tl, taken, src, edits, changes)
        for call in C.calls_in(kernel):
            is_helper = C.call_name(call) in helpers
            if call in folded or not (is_helper or _is_tl_exp(call, tl)) or len(call.args) != 1 or call.args[0].keyword:
                continue
            edits[call] = _edit(call, tl, consts, is_helper and F.value_dtype(call.args[0].value, defs) != "fp32")
            _, how = _fold_scale(call.args[0].value, consts)
            changes.append(Change(src.line(call), f"{C.code_of(call)} -> {tl}.math.exp2(...), {how}"))
    if not edits:
        if any(C.last_part(C.call_name(c)) == "exp2" and LOG2E_LITERAL[:8] in C.code_of(c) for k in ks for c in C.calls_in(k)):
            return C.skip(CODE, SAFETY, source, "already applied: exponentials are exp2 of a log2(e)-scaled argument")
        return C.skip(CODE, SAFETY, source, "not applicable: no natural exponential (tl.exp, tl.math.exp or an exp helper) "
                       "in any @triton.jit function")
    new = C.apply_edits(src.module, edits).code
    n = sum(1 for c in changes if "exp2" in c.description)
    return [C.applied_result(CODE, source, new, changes, f"{n} exp call(s) -> exp2 with log2(e) folded", SAFETY)]


def _edit(call: cst.Call, tl: str, consts: set[str], upcast: bool):
    def edit(upd: cst.Call) -> cst.Call:
        arg = upd.args[0].value
        if upcast:
            arg = _upcast(arg, tl)
        scaled, _ = _fold_scale(arg, consts)
        return upd.with_changes(func=C.expr(f"{tl}.math.exp2"), args=[upd.args[0].with_changes(value=scaled)])

    return edit


class Exp2WithLog2eFolding(Rule):
    """Compute exp(x) as exp2(x * log2(e)) with log2(e) folded into an existing scale."""

    SAFETY = SAFETY
    CONDITIONS = CONDITIONS

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(rewrite)
