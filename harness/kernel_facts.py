"""What a ``@triton.jit`` kernel does with each argument, read from its code (``ast``, never run).

For every pointer parameter: whether the kernel loads it, stores it, the polynomial of its
address offset (``poly``) with each index replaced by a *root* (a program id, a masked offset and
its bound, a loop variable, a value loaded from another tensor, a division or remainder), and what
the values it loads flow into (``exp`` of a loaded value is a log-decay; ``log``/``sqrt`` need
positive values). A root that is a value loaded from another tensor makes that tensor an index
tensor; a ``< 0`` test on it means negative entries are padding the kernel skips.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from skel.harness.poly import Poly
from skel.harness.truth import truth

_MASK_ROOT = "mask<"  # a masked offset: "mask<K" ranges over [0, K)
_LOAD_ROOT = "load:"  # a value loaded from a pointer parameter: "load:idx"


@dataclass(frozen=True)
class PointerUse:
    param: str
    loaded: bool
    stored: bool
    address: Poly | None  # offset from the parameter, in kernel names and roots (None: not read)
    regime: str = ""  # "log-decay", "positive" or "" (what the loaded values flow into)
    # the addresses of its other loads and stores where they differ from ``address`` (``lse + base`` then
    # ``lse + base + i * stride_n`` in a loop): an axis only a later access moves along is read off them
    more: tuple[Poly, ...] = ()

    def size_factors(self, roots: frozenset[str]) -> frozenset[str]:
        return frozenset(f for m, _ in (self.address.terms if self.address else ()) for f in m if f not in roots)


@dataclass(frozen=True)
class KernelFacts:
    name: str
    line: int
    params: tuple[str, ...]
    constexprs: frozenset[str]
    pointers: dict[str, PointerUse]
    roots: frozenset[str]
    index_tensors: dict[str, str]  # index parameter -> the pointer parameter its values offset
    skips_negative: frozenset[str]  # index parameters whose negative values the kernel skips
    arange_bounds: frozenset[str]  # parameters used as tl.arange(0, X) bounds (powers of two)
    scalar_use: dict[str, str]  # non-pointer parameter -> "eps", "scale", "offset", "sentinel" or ""
    loop_bounds: frozenset[str] = frozenset()  # parameters a loop runs to (sequence lengths)
    splits: tuple[tuple[str, str, str, str], ...] = ()  # (root, root // X, root % X, X): an index split in two
    flags: dict[str, bool] = field(default_factory=dict)  # constexpr parameters tested by `if` -> their default
    # offsets parameter (cu_seqlens) -> the length parameter whose axis its values offset (T): a program
    # reads entries i and i + 1, a sequence's start and end in tensors packed along that axis
    offsets: dict[str, str] = field(default_factory=dict)
    packed: frozenset[str] = frozenset()  # pointer parameters addressed through those offsets
    # parameters the kernel only moves (``q += off``) or never names: it reads and writes nothing through them
    unread: frozenset[str] = frozenset()
    # local names that are roots with a value the arithmetic does not expand (``NT = tl.cdiv(T, BT)``),
    # with that value: a size the harness may compute from the parameters
    root_defs: dict[str, ast.AST] = field(default_factory=dict)
    # parameter -> what the kernel compares it with for equality, in source order (``mode == _MODE_A``)
    compared: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # tile parameter -> the parameter its one block must cover: ``offs = tl.arange(0, BLOCK)`` masked by
    # ``offs < n_cols`` with no loop stepping over BLOCK (a row in one block)
    covers: dict[str, str] = field(default_factory=dict)
    # pointer parameters whose values, as loaded (no cast), meet in one tl.dot: they must share a dtype
    dot_pairs: frozenset[tuple[str, str]] = frozenset()
    # pointer parameter -> the dtype its loaded values meet in a tl.dot, the other operand cast to it
    dot_casts: dict[str, str] = field(default_factory=dict)
    # pointer parameters whose loaded values go through bitwise ops (&, |, ^, <<, >>): packed integers
    bitwise: frozenset[str] = frozenset()

    @staticmethod
    def bounded(dim: str) -> str:
        """The root of an index over [0, dim), as a masked offset's."""
        return _MASK_ROOT + dim

    @staticmethod
    def root_bound(root: str) -> str | None:
        return root[len(_MASK_ROOT):] if root.startswith(_MASK_ROOT) else None

    @staticmethod
    def loaded_from(root: str) -> str | None:
        return root[len(_LOAD_ROOT):] if root.startswith(_LOAD_ROOT) else None


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return ""


def _strip(node: ast.AST) -> ast.AST:
    """``x[:, None]``, ``x.to(...)``, ``(x)`` -> ``x``: what does not change an index's value."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
            node = node.func.value
        elif isinstance(node, ast.Call) and _call_name(node) == "cast" and node.args:  # tl.cast(x, tl.int64)
            node = node.args[0]
        else:
            return node


class _Assignments(ast.NodeVisitor):
    """Every assignment in source order (depth first, as the code runs on one path)."""

    def __init__(self, expander: "_Expander"):
        self.ex = expander
        self.loops = 0

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self.ex._bind(target, node.value, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        """``p += off`` outside loops is ``p = p + off`` from its line on: a pointer copied before the move
        (``dst = state_ptr + ...``, then ``state_ptr += ...``) keeps the value it had. Steps inside loops are
        ``_loop_steps``' (a loop walks a dim)."""
        if not self.loops and isinstance(node.target, ast.Name) and isinstance(node.op, (ast.Add, ast.Sub)):
            value = ast.BinOp(ast.Name(node.target.id, ast.Load()), node.op, node.value)
            self.ex._bind(node.target, ast.copy_location(value, node), node.lineno)
        self.generic_visit(node)

    def visit_For(self, node: ast.For) -> None:
        self.loops += 1
        self._for(node)
        self.loops -= 1

    def visit_While(self, node: ast.While) -> None:
        self.loops += 1
        self.generic_visit(node)
        self.loops -= 1

    def _for(self, node: ast.For) -> None:
        stop = None
        if _call_name(node.iter) == "range" and node.iter.args:
            last = _strip(node.iter.args[-1] if len(node.iter.args) > 1 else node.iter.args[0])
            stop = last.id if isinstance(last, ast.Name) else None
        for name in ast.walk(node.target):
            if isinstance(name, ast.Name):
                self.ex.loops[name.id] = stop or name.id  # the loop index spans [0, stop)
        self.generic_visit(node)


class _Expander:
    def __init__(self, fn: ast.FunctionDef, params: tuple[str, ...]):
        self.params = set(params)
        self.defs: dict[str, list[tuple[int, ast.AST]]] = {}  # name -> (line, value) of its assignments, in order
        self.loops: dict[str, str] = {}  # loop index -> the parameter it runs to (or itself)
        self.roots: set[str] = set()
        self.root_defs: dict[str, ast.AST] = {}
        _Assignments(self).visit(fn)
        self.masks: list[tuple[Poly, str]] = []
        self._at: int | None = None  # names resolve to their latest assignment above this line (None: any)

    def _bind(self, target: ast.AST, value: ast.AST, line: int) -> None:
        if isinstance(target, ast.Name):
            self.defs.setdefault(target.id, []).append((line, value))
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                self._bind(t, v, line)

    def last(self, name: str) -> ast.AST | None:
        values = self.defs.get(name)
        return values[-1][1] if values else None

    def at(self, node: ast.AST, line: int) -> Poly:
        """``node``'s polynomial where it stands: each name is its latest assignment above ``line`` (the
        value a pointer holds at a load on the first pass through a loop, not a later re-assignment)."""
        outer, self._at = self._at, line
        try:
            return self.expand(node)
        finally:
            self._at = outer

    def root(self, name: str) -> Poly:
        self.roots.add(name)
        return Poly.atom(name)

    def expand(self, node: ast.AST) -> Poly:
        node = _strip(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, bool)):
            return Poly.const(int(node.value))
        if isinstance(node, ast.Name):
            name = node.id
            moved = name in self.params and any(self._at is None or line < self._at for line, _ in self.defs.get(name, ()))
            if name in self.params and not moved:  # a parameter (a pointer not yet moved by `p = p + off`)
                return Poly.atom(name)
            if name in self.loops:
                return self.root(f"loop:{self.loops[name]}")
            # the latest assignment above the line being read; inside it (p = p + ...) a name means
            # its assignment before that one
            above = [(line, value) for line, value in self.defs.get(name, ()) if self._at is None or line < self._at]
            if above:
                line, value = above[-1]
                outer, self._at = self._at, line
                try:
                    poly = self._poly(value)
                    if poly is None:
                        self.root_defs.setdefault(name, value)
                    return poly if poly is not None else self.root(name)
                finally:
                    self._at = outer
            return self.root(name)
        poly = self._poly(node)
        return poly if poly is not None else self.root(ast.unparse(node))

    def _poly(self, node: ast.AST) -> Poly | None:
        """The polynomial of an arithmetic expression, or None when it is not one (a root)."""
        node = _strip(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult)):
            a, b = self.expand(node.left), self.expand(node.right)
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.expand(node.operand)
        if isinstance(node, ast.IfExp):  # a constexpr switch: its "else" is the flags-off default path
            return self.expand(node.orelse)
        if isinstance(node, ast.Name):
            return self.expand(node)
        if isinstance(node, ast.Constant):  # a float or string constant is no index arithmetic
            return Poly.const(int(node.value)) if isinstance(node.value, (int, bool)) else None
        name = _call_name(node)
        if name == "program_id":  # tl.program_id(1) or tl.program_id(axis=1)
            axis = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "axis"), None)
            return self.root(f"pid{ast.unparse(axis) if axis is not None else '0'}")
        if name == "arange" and len(node.args) == 2:
            return self.expand(node.args[0]) + self.root(f"arange({ast.unparse(node.args[1])})")
        if name == "load" and node.args:
            base = self.base_of(node.args[0])
            if base:
                return self.root(_LOAD_ROOT + base)
        if name == "make_block_ptr":
            return self._block_ptr(node)
        if name == "advance" and node.args:  # a block pointer moved: the same tensor, the same layout
            return self.expand(node.args[0])
        return None

    def _block_ptr(self, node: ast.Call) -> Poly | None:
        """``tl.make_block_ptr(base, shape, strides, ...)``: the base's offset plus, per block dim, an index
        ranging over that dim's extent (like a masked offset) times its stride."""
        names = ("base", "shape", "strides", "offsets", "block_shape", "order")
        args = dict(zip(names, node.args))
        args.update({kw.arg: kw.value for kw in node.keywords if kw.arg})
        shape, strides = args.get("shape"), args.get("strides")
        if "base" not in args or not isinstance(shape, ast.Tuple) or not isinstance(strides, ast.Tuple) \
                or len(shape.elts) != len(strides.elts):
            return None
        poly = self.expand(args["base"])
        for extent, stride in zip(shape.elts, strides.elts):
            extent = _strip(extent)
            bound = extent.id if isinstance(extent, ast.Name) and extent.id in self.params else ast.unparse(extent)
            poly = poly + self.root(_MASK_ROOT + bound) * self.expand(stride)
        return poly

    def base_of(self, node: ast.AST, line: int | None = None) -> str | None:
        poly = self.expand(node) if line is None else self.at(node, line)
        bases = [m[0] for m, c in poly.terms if len(m) == 1 and c == 1 and m[0] in self.params]
        return bases[0] if len(bases) == 1 else None

    def masked(self, poly: Poly) -> Poly:
        """Each masked offset in ``poly``, also scaled by a stride (``(o_k) * V``), becomes its root."""
        for part, bound in self.masks:
            lead, lead_coef = part.terms[0]
            for m, c in poly.terms:
                extra = _divide(m, lead)
                if extra is None or c != lead_coef:
                    continue
                scaled = part * Poly((((*extra,), 1),))
                if poly.contains(scaled):
                    root = _MASK_ROOT + bound
                    self.roots.add(root)
                    poly = poly - scaled + Poly(((tuple(sorted((root, *extra))), 1),))
                    break
        return poly


def _seen_base(ex: _Expander, node: ast.Call, seen: set[str]) -> str | None:
    """The one pointer of ``seen`` among an address's bare parameters (``state + base + stride_w``)."""
    poly = ex.at(node.args[0], node.lineno)
    bases = [m[0] for m, c in poly.terms if len(m) == 1 and c == 1 and m[0] in seen]
    return bases[0] if len(bases) == 1 else None


def _divide(m: tuple[str, ...], d: tuple[str, ...]) -> tuple[str, ...] | None:
    rest = list(m)
    for f in d:
        if f not in rest:
            return None
        rest.remove(f)
    return tuple(rest)


class _Prune(ast.NodeTransformer):
    """``if FLAG:`` on a constexpr whose value is known keeps only the branch that runs."""

    def __init__(self, flags: dict[str, bool]):
        self.flags = flags

    def _value(self, test: ast.AST) -> bool | None:
        return truth(test, lambda t: self.flags.get(t.id) if isinstance(t, ast.Name) else None)

    def visit_If(self, node: ast.If):
        self.generic_visit(node)
        value = self._value(node.test)
        if value is None:
            return node
        return (node.body if value else node.orelse) or [ast.Pass()]

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        value = self._value(node.test)
        return node if value is None else (node.body if value else node.orelse)


def prune(fn: ast.FunctionDef, flags: dict[str, bool]) -> ast.FunctionDef:
    """A copy of ``fn`` with the branches of known constexpr flags resolved (the path a launch takes)."""
    import copy

    return ast.fix_missing_locations(_Prune(flags).visit(copy.deepcopy(fn))) if flags else fn


def kernel_facts(fn: ast.FunctionDef, flags: dict[str, bool] | None = None) -> KernelFacts:
    whole, fn = fn, prune(fn, flags or {})
    args = fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs
    params = tuple(a.arg for a in args)
    constexprs = frozenset(a.arg for a in args if a.annotation is not None and "constexpr" in ast.unparse(a.annotation))
    ex = _Expander(fn, params)
    _collect_masks(fn, ex, params)

    loads: dict[str, list[ast.Call]] = {}
    stores: dict[str, list[ast.Call]] = {}
    skips: set[str] = set()
    aranges: set[str] = set()
    accesses = ("load", "store", "atomic_add", "atomic_max", "atomic_min", "atomic_xchg")
    # pointers some access names alone: where an address adds a bare int parameter as well
    # (``state + base + stride_w``), the pointer is the one of them other accesses show
    pointers_seen = {b for node in ast.walk(fn) if _call_name(node) in accesses and node.args
                     and (b := ex.base_of(node.args[0], node.lineno))}
    for node in ast.walk(fn):
        name = _call_name(node)
        if name in accesses and node.args:
            base = ex.base_of(node.args[0], node.lineno) or _seen_base(ex, node, pointers_seen)
            if base:
                (loads if name == "load" else stores).setdefault(base, []).append(node)
                if name.startswith("atomic"):
                    loads.setdefault(base, []).append(node)
        if name == "arange" and len(node.args) == 2 and isinstance(node.args[1], ast.Name) and node.args[1].id in params:
            aranges.add(node.args[1].id)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Lt, ast.GtE)):
            right = node.comparators[0]
            if isinstance(right, ast.Constant) and right.value == 0:
                for root in ex.at(node.left, node.lineno).terms:
                    for f in root[0]:
                        src = KernelFacts.loaded_from(f)
                        if src:
                            skips.add(src)

    pointers: dict[str, PointerUse] = {}
    index_of: dict[str, str] = {}
    starts = _offset_starts(loads, ex)
    transforms = _skipped_transforms(whole, flags or {}, {p: _loaded_names(fn, p, ex) for p in loads})
    offsets: dict[str, str] = {}
    packed: set[str] = set()
    for param in sorted(set(loads) | set(stores)):
        calls = loads.get(param, []) + stores.get(param, [])
        address = ex.masked(_reverse_walks(ex.at(calls[0].args[0], calls[0].lineno) - Poly.atom(param)
                                           + _loop_steps(fn, param, ex)))
        for src, start in starts.items():
            unpacked, length = _unpack(address, _LOAD_ROOT + src, start)
            if length:
                address, offsets[src] = unpacked, length
                packed.add(param)
        if all(not m for m, _ in address.terms):  # fixed elements (w[0], w[1], w[2]): the last one read
            places = [ex.at(c.args[0], c.lineno) - Poly.atom(param) for c in calls]
            if all(all(not m for m, _ in o.terms) for o in places):
                address = Poly.const(max(sum(c for _, c in o.terms) for o in places))
        regime = transforms.get(param) or _regime(fn, param, ex)
        more: list[Poly] = []
        for call in calls[1:]:
            other = ex.masked(_reverse_walks(ex.at(call.args[0], call.lineno) - Poly.atom(param)
                                             + _loop_steps(fn, param, ex)))
            if other != address and other not in more:
                more.append(other)
        pointers[param] = PointerUse(param, param in loads, param in stores, address, regime, tuple(more))
        for m, _ in address.terms:
            for f in m:
                src = KernelFacts.loaded_from(f)
                if src and src != param:
                    index_of[src] = param
    loaded_values = set().union(*(_loaded_names(fn, q, ex) for q in loads)) if loads else set()
    scalars = {p: _scalar_use(fn, p, loaded_values) for p in params if p not in pointers and p not in constexprs}
    bounds = set()
    for loop in ast.walk(fn):
        if isinstance(loop, ast.For) and _call_name(loop.iter) == "range" and loop.iter.args:
            stop = _strip(loop.iter.args[-1] if len(loop.iter.args) > 1 else loop.iter.args[0])
            if isinstance(stop, ast.Name) and stop.id in params:
                bounds.add(stop.id)
    tested = _tested_flags(whole, constexprs)
    in_addresses = {f for use in pointers.values() for poly in (use.address, *use.more) for m, _ in poly.terms
                    for f in m}
    for p in constexprs - set(pointers) - set(tested) - aranges - bounds - in_addresses:
        # a constexpr that only enters the arithmetic (Liger's lse_square_scale, label_smoothing): a value
        use = _scalar_use(fn, p, loaded_values)
        if use in ("scale", "offset", "eps"):
            scalars[p] = use
    return KernelFacts(fn.name, fn.lineno, params, constexprs, pointers, frozenset(ex.roots), index_of,
                       frozenset(skips), frozenset(aranges), scalars, frozenset(bounds), _splits(ex),
                       tested, offsets, frozenset(packed),
                       frozenset(p for p in params if p not in pointers and p not in constexprs and _unread(fn, p)),
                       {k: v for k, v in ex.root_defs.items() if k in ex.roots}, _compared(whole, params),
                       _covers(fn, ex, frozenset(aranges)), *_dot_operands(fn, ex), _bitwise(fn, ex))


def _covers(fn: ast.FunctionDef, ex: _Expander, tiles: frozenset[str]) -> dict[str, str]:
    looped = {n.id for loop in ast.walk(fn) if isinstance(loop, ast.For) and _call_name(loop.iter) == "range"
              for a in loop.iter.args for n in ast.walk(a) if isinstance(n, ast.Name)}
    out: dict[str, str] = {}
    for poly, bound in ex.masks:
        for m, _ in poly.terms:
            for f in m:
                tile = f[7:-1] if f.startswith("arange(") else None
                if tile in tiles and tile not in looped and tile != bound:
                    out.setdefault(tile, bound)
    return out


def _compared(fn: ast.FunctionDef, params: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    nodes = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Compare) and len(n.ops) == 1
                    and isinstance(n.ops[0], (ast.Eq, ast.NotEq)) and isinstance(n.left, ast.Name)
                    and n.left.id in params and isinstance(n.comparators[0], (ast.Constant, ast.Name))),
                   key=lambda n: (n.lineno, n.col_offset))
    for n in nodes:
        text = ast.unparse(n.comparators[0])
        if text not in out.setdefault(n.left.id, []):
            out[n.left.id].append(text)
    return {k: tuple(v) for k, v in out.items()}


_BITWISE = (ast.BitAnd, ast.BitOr, ast.BitXor, ast.LShift, ast.RShift)


def _bitwise(fn: ast.FunctionDef, ex: _Expander) -> frozenset[str]:
    """``(b_packed & mask) >> shift`` with ``b_packed = tl.load(p_b)``: b holds packed integer bits."""
    updated = {n.target.id for n in ast.walk(fn) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    out = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.BinOp) and isinstance(node.op, _BITWISE):
            source = _raw_load(node.left, ex, node.lineno, updated)
            if source:
                out.add(source)
    return frozenset(out)


def _cast_dtype(node: ast.AST, ex: _Expander, line: int, depth: int = 0) -> str | None:
    """The dtype an expression is explicitly given: ``x.to(tl.int8)``, ``tl.full(.., dtype=tl.int8)``,
    and arithmetic of such with constants or another of the same dtype (its latest assignment for a name)."""
    if depth > 4:
        return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args:
        text = ast.unparse(node.args[0])
        return text.rsplit(".", 1)[-1] if text.startswith(("tl.", "triton.language.")) else None
    if _call_name(node) in ("full", "zeros") and isinstance(node, ast.Call):
        dtype = next((kw.value for kw in node.keywords if kw.arg == "dtype"), None)
        text = ast.unparse(dtype) if dtype is not None else ""
        return text.rsplit(".", 1)[-1] if text.startswith(("tl.", "triton.language.")) else None
    if isinstance(node, ast.BinOp):
        a, b = (None if isinstance(x, ast.Constant) else _cast_dtype(x, ex, line, depth + 1)
                for x in (node.left, node.right))
        if isinstance(node.left, ast.Constant) or isinstance(node.right, ast.Constant):
            return a or b
        return a if a is not None and a == b else None
    if isinstance(node, ast.Name) and node.id in ex.defs:
        above = [(at, value) for at, value in ex.defs[node.id] if at <= line]
        return _cast_dtype(above[-1][1], ex, above[-1][0], depth + 1) if above else None
    return None


def _dot_operands(fn: ast.FunctionDef, ex: _Expander) -> tuple[frozenset[tuple[str, str]], dict[str, str]]:
    """``tl.dot(b_do, b_v)`` with ``b_do = tl.load(p_do)`` and ``b_v = tl.load(p_v)``: Triton requires both
    operands in one dtype, so ``do`` and ``v`` must be passed in one (a cast anywhere on the way frees them);
    ``tl.dot(b_a, b.to(tl.int8) - one)``: ``a`` must be int8. Returns (the pairs, parameter -> dtype)."""
    pairs, casts = set(), {}
    updated = {n.target.id for n in ast.walk(fn) if isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)}
    for node in ast.walk(fn):
        if _call_name(node) == "dot" and len(node.args) >= 2:
            a, b = (_raw_load(arg, ex, node.lineno, updated) for arg in node.args[:2])
            if a and b and a != b:
                pairs.add((min(a, b), max(a, b)))
            for raw, other in ((a, node.args[1]), (b, node.args[0])):
                dtype = _cast_dtype(other, ex, node.lineno) if raw else None
                if dtype:
                    casts.setdefault(raw, dtype)
    return frozenset(pairs), casts


def _raw_load(node: ast.AST, ex: _Expander, line: int, updated: set[str], depth: int = 0) -> str | None:
    """The pointer parameter ``node`` holds values of exactly as loaded (through transposes, reshapes,
    subscripts and renames: a name's latest assignment above the use, with no ``x *= ...`` anywhere), else
    None."""
    while True:
        if isinstance(node, ast.Subscript) or isinstance(node, ast.Attribute) and node.attr == "T":
            node = node.value
        elif _call_name(node) in ("trans", "permute", "reshape", "view"):
            func = node.func
            method = isinstance(func, ast.Attribute) and ast.unparse(func.value) not in ("tl", "triton.language")
            if not method and not node.args:
                return None
            node = func.value if method else node.args[0]
        else:
            break
    if _call_name(node) == "load" and node.args:
        return ex.base_of(node.args[0], line)
    if not isinstance(node, ast.Name) or depth > 4 or node.id not in ex.defs or node.id in updated:
        return None
    above = [(at, value) for at, value in ex.defs[node.id] if at <= line]  # the value that reaches the use
    if not above:
        return None
    at, value = above[-1]
    return _raw_load(value, ex, at, updated, depth + 1)


def _unread(fn: ast.FunctionDef, param: str) -> bool:
    """``param`` is named in the body only as the target of ``param += ...``: an offset applied to a pointer
    the kernel then never loads, stores or passes on."""
    moved = {id(n.target) for n in ast.walk(fn) if isinstance(n, ast.AugAssign)}
    names = [n for stmt in fn.body for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id == param]
    return bool(names) and all(id(n) in moved for n in names)


def _offset_starts(loads: dict[str, list[ast.Call]], ex: _Expander) -> dict[str, Poly]:
    """Parameters read as sequence offsets: two scalar loads at ``i`` and ``i + 1`` (a start and an end,
    ``bos, eos = tl.load(cu_seqlens + i_n), tl.load(cu_seqlens + i_n + 1)``) -> the index ``i``."""
    out = {}
    for param, calls in loads.items():
        places = [ex.at(c.args[0], c.lineno) - Poly.atom(param) for c in calls if c.args]
        scalar = [p for p in places if not any(f.startswith(("arange(", _MASK_ROOT)) for m, _ in p.terms for f in m)]
        for a in scalar:
            if any(b - a == Poly.const(1) for b in scalar) and a.terms:
                out[param] = a
                break
    return out


def _unpack(address: Poly, root: str, start: Poly) -> tuple[Poly, str | None]:
    """An address packed along a length axis by loaded offsets (``(bos + t) * H*V``: ``root`` next to a
    loop or masked offset over ``T`` with the same stride) as the equal-length layout it generalises
    (``(i_n * T + t) * H*V``): ``root`` replaced by ``T * start``. Unchanged (None) when no such axis."""
    terms = address.as_dict()
    for m, c in terms.items():
        if root not in m:
            continue
        rest = list(m)
        rest.remove(root)
        for m2, c2 in terms.items():
            if c2 != c or len(m2) != len(m):
                continue
            axis = [f for f in m2 if f not in rest]
            spare = list(m2)
            for f in rest:
                if f in spare:
                    spare.remove(f)
            if len(spare) != 1:
                continue
            length = spare[0][5:] if spare[0].startswith("loop:") else KernelFacts.root_bound(spare[0])
            if length and axis:
                stride = Poly(((tuple(sorted(rest)), c),))
                return address - Poly(((m, c),)) + stride * Poly.atom(length) * start, length
    return address, None


def _tested_flags(fn: ast.FunctionDef, constexprs: frozenset[str]) -> dict[str, bool]:
    """Constexpr parameters the kernel tests (``if FLAG:``, ``if not FLAG:``), with the default it declares
    (False where it declares none)."""
    defaults = dict(zip([a.arg for a in fn.args.args][::-1], fn.args.defaults[::-1]))
    tested = set()
    for node in ast.walk(fn):
        if isinstance(node, (ast.If, ast.IfExp)):
            test = node.test.operand if isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not) \
                else node.test
            if isinstance(test, ast.Name) and test.id in constexprs:
                tested.add(test.id)
    return {name: bool(getattr(defaults.get(name), "value", False)) for name in sorted(tested)}


def _splits(ex: _Expander) -> tuple[tuple[str, str, str, str], ...]:
    """``a = r // X`` and ``b = r % X`` (the same r and X): r spans a's dims then b's (X a name)."""
    div, mod = {}, {}
    for name in ex.defs:
        value = _strip(ex.last(name))
        if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.FloorDiv, ast.Mod)):
            whole = ex.expand(value.left)
            if len(whole.terms) == 1 and len(whole.terms[0][0]) == 1 and whole.terms[0][1] == 1:
                key = (whole.terms[0][0][0], ast.unparse(_strip(value.right)))
                (div if isinstance(value.op, ast.FloorDiv) else mod)[key] = name
    return tuple((key[0], div[key], mod[key], key[1]) for key in div if key in mod)


def _loop_steps(fn: ast.FunctionDef, param: str, ex: _Expander) -> Poly:
    """``p += STEP`` (or ``p -= STEP``, ``p = p + STEP``) in ``for _ in range(..., T)`` on a pointer into
    ``param``: the term loop:T * STEP (the loop walks a dim of stride STEP; backwards for ``-=``).
    Counted once per pointer variable."""
    out = Poly()
    seen: set[str] = set()
    for loop in ast.walk(fn):  # (the parameter moved once outside loops, a_ptr += row * stride: a definition)
        if not (isinstance(loop, ast.For) and _call_name(loop.iter) == "range" and loop.iter.args):
            continue
        stop = _strip(loop.iter.args[-1] if len(loop.iter.args) > 1 else loop.iter.args[0])
        if not (isinstance(stop, ast.Name) and stop.id in ex.params):
            continue
        for node in ast.walk(loop):
            step = _step(node)
            if step is None:
                continue
            var, sign, value = step
            if var in seen or (var != param and (var not in ex.defs or ex.base_of(ast.Name(id=var), node.lineno) != param)):
                continue
            seen.add(var)
            out = out + Poly.const(sign) * Poly.atom(f"loop:{stop.id}") * ex.at(value, node.lineno)
    return out


def _step(node: ast.AST) -> tuple[str, int, ast.AST] | None:
    """A pointer variable moved by a step: ``p += s`` / ``p -= s`` / ``p = p + s`` / ``p = p - s``
    -> (p, +1 or -1, s)."""
    if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Add, ast.Sub)) and isinstance(node.target, ast.Name):
        return node.target.id, 1 if isinstance(node.op, ast.Add) else -1, node.value
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        value = node.value
        if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Add, ast.Sub)) \
                and isinstance(value.left, ast.Name) and value.left.id == node.targets[0].id:
            return value.left.id, 1 if isinstance(value.op, ast.Add) else -1, value.right
    return None


def _reverse_walks(address: Poly) -> Poly:
    """A loop walking a dim backwards from its end (``p = x + (T - 1) * S``, then ``p -= S`` per step of
    ``range(T)``: ``S*T - S - S*loop:T``) covers the same elements as one walking it forwards: ``S*loop:T``."""
    terms = address.as_dict()
    for m, c in list(terms.items()):
        if c >= 0 or m not in terms:
            continue
        loops = [f for f in m if f.startswith("loop:")]
        if len(loops) != 1:
            continue
        rest = list(m)
        rest.remove(loops[0])
        stride = tuple(sorted(rest))
        end = tuple(sorted((*rest, loops[0][5:])))
        if terms.get(end) == -c and terms.get(stride) == c:
            for key in (m, end, stride):
                terms.pop(key)
            terms[m] = -c
    return Poly.of({k: v for k, v in terms.items() if v})


def _collect_masks(fn: ast.FunctionDef, ex: _Expander, params: tuple[str, ...]) -> None:
    """``offset < BOUND`` comparisons: the offset ranges over [0, BOUND) (BOUND a parameter)."""
    seen = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Lt):
            bound = _strip(node.comparators[0])
            if isinstance(bound, ast.Name) and bound.id in params:
                poly = ex.at(node.left, node.lineno)
                if any(f.startswith("arange(") for m, _ in poly.terms for f in m):
                    key = (poly, bound.id)
                    if key not in seen:
                        seen.add(key)
                        ex.masks.append(key)
    ex.masks.sort(key=lambda pb: -len(pb[0].terms))


def _loaded_names(fn: ast.FunctionDef, param: str, ex: _Expander) -> set[str]:
    """Names holding values loaded from ``param``, and names that merely rename one (``b_gk = b_g``)."""
    names = set()
    renames: list[tuple[str, str]] = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _strip(node.value)
            if _call_name(value) == "load" and value.args and ex.base_of(value.args[0]) == param:
                names.add(node.targets[0].id)
            elif isinstance(value, ast.Name):
                renames.append((node.targets[0].id, value.id))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
            value = _strip(node.value)  # dt += tl.load(dt_bias_ptrs): the bias's values land in dt
            if _call_name(value) == "load" and value.args and ex.base_of(value.args[0]) == param:
                names.add(node.target.id)
    grew = True
    while grew:
        grew = False
        for target, source in renames:
            if source in names and target not in names:
                names.add(target)
                grew = True
    return names


def _transform_of(value: ast.AST, name: str) -> str:
    """The regime a transform of ``name`` puts values in: ``sigmoid(x)`` -> "unit-interval",
    ``x / sqrt(sum(x * x) + eps)`` or ``x * rsqrt(...)`` -> "unit-norm", ``softplus(x)``/``exp(x)`` -> "positive"."""
    value = _strip(value)
    uses = lambda node: any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node))  # noqa: E731
    call = _call_name(value)
    if call == "sigmoid" and value.args and uses(value.args[0]):
        return "unit-interval"
    if call in ("softplus", "exp") and value.args and uses(value.args[0]):
        return "positive"
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Div, ast.Mult)):
        left, right = _strip(value.left), _strip(value.right)
        root = _call_name(right)
        if isinstance(left, ast.Name) and left.id == name and root in ("sqrt", "rsqrt") \
                and (root == "sqrt") == isinstance(value.op, ast.Div) and uses(right):
            return "unit-norm"
    return ""


def _skipped_transforms(fn: ast.FunctionDef, flags: dict[str, bool], loaded: dict[str, set[str]]) -> dict[str, str]:
    """Transforms the kernel applies to a loaded tensor only under a constexpr flag that is off on the
    judged path (``if USE_QK_L2NORM_IN_KERNEL: b_k = b_k / tl.sqrt(tl.sum(b_k * b_k) + 1e-6)``,
    ``if APPLY_BETA_SIGMOID: b_beta = tl.sigmoid(b_beta)``): with the flag off the caller does it, so the
    tensor holds transformed values -> pointer parameter: the regime the transform implies."""
    out: dict[str, str] = {}
    for node in ast.walk(fn):
        if not (isinstance(node, ast.If) and isinstance(node.test, ast.Name) and flags.get(node.test.id) is False):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                name = stmt.targets[0].id
                regime = _transform_of(stmt.value, name)
                param = next((p for p, names in loaded.items() if name in names), None)
                if regime and param:
                    out.setdefault(param, regime)
    return out


def _is_exp(name: str | None) -> bool:
    """``exp``, ``exp2`` and the projects' own wrappers of them (FLA's ``safe_exp``, vLLM's ``fast_exp``)."""
    return bool(name) and (name in ("exp", "exp2") or name.endswith(("_exp", "_exp2")))


def _regime(fn: ast.FunctionDef, param: str, ex: _Expander) -> str:
    names = _loaded_names(fn, param, ex)
    if not names:
        return ""
    for node in ast.walk(fn):
        name = _call_name(node)
        if (_is_exp(name) or name in ("log", "log2", "sqrt", "rsqrt")) and node.args:
            arg = _strip(node.args[0])
            if isinstance(arg, ast.Name) and arg.id in names:
                return "log-decay" if _is_exp(name) else "positive"
    for node in ast.walk(fn):  # exp(A * dt): a rate times a step (Mamba's dA); their product must be a decay
        if _is_exp(_call_name(node)) and node.args and isinstance(arg := _strip(node.args[0]), ast.BinOp) \
                and isinstance(arg.op, ast.Mult):
            left, right = _strip(arg.left), _strip(arg.right)
            if isinstance(left, ast.Name) and isinstance(right, ast.Name) and left.id != right.id:
                if left.id in names:
                    return "log-decay"
                if right.id in names:
                    return "positive"
    if names & _cumulated_in_exp(fn, ex):
        return "log-decay"
    return "positive" if names & _root_terms(fn, ex) else ""


def _cumulated_in_exp(fn: ast.FunctionDef, ex: _Expander) -> set[str]:
    """Names (and the locals holding them) whose cumulative sum an ``exp`` argument holds
    (``tl.exp(tl.sum(g) - tl.cumsum(g))``, ``b_gc = tl.cumsum(b_g); exp(b_gc)``): log-decays summed along
    a chunk; N(0, 1) values there would grow the decay by e^sqrt(T) instead of shrinking it."""
    found: set[str] = set()

    def names_in(node: ast.AST, seen: set[str]) -> set[str]:
        out = set()
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and n.id not in seen:
                seen.add(n.id)
                out.add(n.id)
                for _, value in ex.defs.get(n.id, []):
                    out |= names_in(value, seen)
        return out

    def cumulated(node: ast.AST, seen: set[str]) -> None:
        for n in ast.walk(node):
            if _call_name(n) == "cumsum" and n.args:
                found.update(names_in(n.args[0], set()))
            elif isinstance(n, ast.Name) and n.id not in seen:
                seen.add(n.id)
                for _, value in ex.defs.get(n.id, []):
                    cumulated(value, seen)

    for node in ast.walk(fn):
        if _is_exp(_call_name(node)) and node.args:
            cumulated(node.args[0], set())
    return found


def _root_terms(fn: ast.FunctionDef, ex: _Expander) -> set[str]:
    """Names whose values reach the argument of a ``log`` / ``sqrt`` only through sums, products and
    quotients, directly or through the locals that hold them (``b_a = exp(g) * b_a + b_beta * (b_k * b_k)``
    then ``tl.log(b_a + eps)``): positive values there keep the argument positive, where N(0, 1) values
    would make it negative (NaN) about half the time. Squares and calls other than sum/maximum (exp,
    sigmoid, abs: never negative) end a path; a difference ends it too (its sign is not the terms')."""
    updates: dict[str, list[ast.AST]] = {}
    for node in ast.walk(fn):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) \
                and isinstance(node.op, (ast.Add, ast.Mult, ast.Div)):
            updates.setdefault(node.target.id, []).append(node.value)
    found: set[str] = set()
    seen: set[str] = set()

    def walk(node: ast.AST) -> None:
        node = _strip(node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult, ast.Div)):
            if isinstance(node.op, ast.Mult) and ast.dump(_strip(node.left)) == ast.dump(_strip(node.right)):
                return  # x * x
            walk(node.left)
            walk(node.right)
        elif isinstance(node, ast.Call) and _call_name(node) in ("sum", "maximum") and node.args:
            walk(node.args[0])
        elif isinstance(node, ast.Name) and node.id not in seen:
            seen.add(node.id)
            found.add(node.id)
            for _, value in ex.defs.get(node.id, []):
                walk(value)
            for value in updates.get(node.id, []):
                walk(value)

    for node in ast.walk(fn):
        if _call_name(node) in ("log", "log2", "sqrt", "rsqrt") and node.args:
            walk(node.args[0])
    return found


def _scalar_use(fn: ast.FunctionDef, param: str, loaded: set[str] = frozenset()) -> str:
    """How a scalar argument enters the arithmetic: added under a root/division ("eps"), a factor
    ("scale"), a term ("offset"), or compared for equality with loaded values ("sentinel": an index
    value such as an ignore_index that marks entries to skip)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
            sides = [_strip(node.left), _strip(node.comparators[0])]
            if any(isinstance(x, ast.Name) and x.id == param for x in sides) \
                    and any(isinstance(x, ast.Name) and x.id in loaded for x in sides):
                return "sentinel"
    for node in ast.walk(fn):
        if _call_name(node) in ("maximum", "clamp") and any(isinstance(_strip(a), ast.Name) and _strip(a).id == param
                                                           for a in node.args[1:]):
            return "eps"  # a floor under values (tl.maximum(x, eps)): small and positive
        if isinstance(node, ast.BinOp):
            sides = [_strip(node.left), _strip(node.right)]
            if not any(isinstance(s, ast.Name) and s.id == param for s in sides):
                continue
            if isinstance(node.op, ast.Add):
                parent_calls = [c for c in ast.walk(fn) if _call_name(c) in ("sqrt", "rsqrt", "log")
                                and any(n is node for n in ast.walk(c))]
                return "eps" if parent_calls else "offset"
            if isinstance(node.op, ast.Mult) or isinstance(node.op, ast.Div) and isinstance(sides[0], ast.Name) \
                    and sides[0].id == param:
                return "scale"  # x * s, s / V
            if isinstance(node.op, ast.Sub):
                return "offset"  # 1 - s
    return ""
