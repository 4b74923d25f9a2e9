"""What a launcher (a Python function that launches a ``@triton.jit`` kernel of its file) says about
its arguments, read from its code with ``ast``: parameters with their annotations and defaults,
the shape dims it unpacks (``B, T, H, K = k.shape``, ``*k.shape, v.shape[-1]``, ``x.shape[-3:]``,
``x.size(1)``), the tensors it allocates, its ``assert``/``raise`` checks on shapes, ranks, dtypes and
choices, the kernel launches with each kernel parameter's argument, and what it returns.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from skel.harness.truth import truth

_ALLOC = {"empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "new_empty",
          "new_zeros", "new_ones", "new_full", "empty_strided"}


# torch's short names of a dtype (``torch.float`` is float32)
_DTYPE_ALIASES = {"float": "float32", "half": "float16", "double": "float64", "long": "int64", "int": "int32",
                  "short": "int16", "cfloat": "complex64"}


def dtype_name(text: str) -> str:
    """``torch.float`` -> "float32", ``torch.bfloat16`` -> "bfloat16"; other text passes through."""
    name = text.removeprefix("torch.")
    return _DTYPE_ALIASES.get(name, name)


@dataclass(frozen=True)
class Param:
    name: str
    annotation: str  # as written ("" when none)
    default: object  # the literal default, or NO_DEFAULT
    has_default: bool

    @property
    def optional(self) -> bool:
        return self.has_default and self.default is None or "None" in self.annotation or "Optional" in self.annotation


@dataclass(frozen=True)
class Launch:
    kernel: str
    line: int
    grid: str
    args: dict[str, ast.AST]  # kernel parameter -> the launcher's expression


@dataclass
class LauncherFacts:
    name: str
    line: int
    params: tuple[Param, ...]
    dims: dict[str, tuple[str, int]] = field(default_factory=dict)  # dim -> (tensor, axis) it was read from
    ranks: dict[str, int] = field(default_factory=dict)  # tensor -> ndim the code implies
    axes: dict[str, dict[int, str]] = field(default_factory=dict)  # tensor -> axis -> dim
    same_dim: list[tuple[tuple[str, int], tuple[str, int]]] = field(default_factory=list)  # asserted equal
    same_shape: list[tuple[str, str]] = field(default_factory=list)
    # asserted multiples: ((x, i), (y, j), k) for ``x.shape[i] == y.shape[j] * k`` (a packed tensor's dim)
    scaled: list[tuple[tuple[str, int], tuple[str, int], int]] = field(default_factory=list)
    dtypes: dict[str, str] = field(default_factory=dict)  # tensor -> dtype asserted or allocated
    choices: dict[str, tuple] = field(default_factory=dict)  # param -> values an assert allows
    bounds: dict[str, int] = field(default_factory=dict)  # dim -> upper bound asserted
    # dim -> upper bounds asserted over other dims (``a <= b // 2``: (b // 2, False); ``<``: strict)
    dim_bounds: dict[str, list[tuple[ast.AST, bool]]] = field(default_factory=dict)
    multiples: dict[str, int] = field(default_factory=dict)  # dim -> k of an asserted ``dim % k == 0``
    products: dict[str, ast.AST] = field(default_factory=dict)  # dim -> the product it is asserted to be
    allocs: dict[str, tuple[list, str, str]] = field(default_factory=dict)  # local -> (shape items, dtype, like)
    launches: list[Launch] = field(default_factory=list)
    returns: tuple[ast.AST, ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)  # local -> param it renames (h0 = initial_state)
    used_as_tensor: set[str] = field(default_factory=set)
    conditions: set[str] = field(default_factory=set)  # params tested by `if p:` / `p or ...`
    none_tested: set[str] = field(default_factory=set)  # params compared with None (`x is None`): may be None
    dim_alias: dict[str, str] = field(default_factory=dict)  # local -> the dim it equals on the default path
    flat: set[str] = field(default_factory=set)  # dims that are a flat tensor's numel
    view_of: dict[str, str] = field(default_factory=dict)  # local view -> the parameter it views
    gates: set[str] = field(default_factory=set)
    grid_fns: dict[str, ast.AST] = field(default_factory=dict)  # nested grid function -> the tuple it returns
    required: set[str] = field(default_factory=set)  # Optional params an assert on the judged path requires
    dereferenced: set[str] = field(default_factory=set)  # params used as tensors under no undecided condition
    unnamed: dict[str, set[int]] = field(default_factory=dict)  # tensor -> axes unpacked into `_`
    exprs: dict[str, ast.AST] = field(default_factory=dict)  # local -> its (last) value on the judged path  # params whose `if p:` allocates a tensor (an extra output)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.params if p.name == name), None)


NO_DEFAULT = object()
PRESENT = "tensor"  # env value of a tensor argument that is given
UNKNOWN = object()  # env value the inference has not chosen yet


def _literal(node: ast.AST | None) -> tuple[bool, object]:
    if node is None:
        return False, NO_DEFAULT
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return True, ast.unparse(node)


def launcher_params(fn: ast.FunctionDef) -> tuple[Param, ...]:
    args = fn.args
    positional = args.posonlyargs + args.args
    defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    out = []
    for a, d in list(zip(positional, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults)):
        has, value = _literal(d)
        out.append(Param(a.arg, ast.unparse(a.annotation) if a.annotation is not None else "", value, has))
    return tuple(out)


def _shape_source(node: ast.AST, shapes: dict[str, str]) -> tuple[str, slice | int | None] | None:
    """``x.shape`` -> (x, None); ``x.shape[i]`` / ``x.size(i)`` -> (x, i); ``x.shape[a:b]`` -> (x, slice);
    ``int(x.shape[i])`` (a graph-safe launcher's Python int) as ``x.shape[i]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "int" \
            and len(node.args) == 1 and not node.keywords:
        return _shape_source(node.args[0], shapes)
    if isinstance(node, ast.Attribute) and node.attr == "shape" and isinstance(node.value, ast.Name):
        return node.value.id, None
    if isinstance(node, ast.Name) and node.id in shapes:
        return shapes[node.id], None
    if isinstance(node, ast.Subscript):
        base = _shape_source(node.value, shapes)
        if base and base[1] is None:
            idx = node.slice
            if isinstance(idx, ast.Slice):
                lo = ast.literal_eval(idx.lower) if idx.lower else None
                hi = ast.literal_eval(idx.upper) if idx.upper else None
                return base[0], slice(lo, hi)
            try:
                return base[0], int(ast.literal_eval(idx))
            except (ValueError, TypeError):
                return None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "size" \
            and isinstance(node.func.value, ast.Name) and len(node.args) == 1:
        try:
            return node.func.value.id, int(ast.literal_eval(node.args[0]))
        except (ValueError, TypeError):
            return None
    return None


class _Reader(ast.NodeVisitor):
    def __init__(self, facts: LauncherFacts, kernels: set[str], module_values: dict[str, object],
                 env: dict[str, object]):
        self.f, self.kernels, self.module_values = facts, kernels, module_values
        self.shapes: dict[str, str] = {}  # local holding a tensor's shape -> tensor
        self.env = env  # param -> its value on the judged path (None: omitted; PRESENT: a tensor; bools)
        self.guards = 0  # undecided conditions around the statement read (both branches are read)

    def truth(self, test: ast.AST) -> bool | None:
        """The value of a test on the judged path, when the parameters' values decide it."""
        return truth(test, self._leaf)

    def _leaf(self, test: ast.AST, depth: int = 0) -> bool | None:
        if isinstance(test, ast.Name) and test.id in self.env:
            value = self.env[test.id]
            return None if value is UNKNOWN else bool(value)
        if isinstance(test, ast.Name) and depth < 4 and isinstance(self.f.exprs.get(test.id), (ast.Compare, ast.BoolOp,
                                                                                           ast.UnaryOp)):
            # is_varlen = cu_seqlens is not None: the local's test, on the judged path
            return truth(self.f.exprs[test.id], lambda t: self._leaf(t, depth + 1))
        flag = _bool_test(test)
        if flag is not None and flag[0] in self.env and self.env[flag[0]] is not UNKNOWN:
            return (self.env[flag[0]] is True) == flag[1]  # `x is True` / `x == False`
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot)) \
                and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None:
            name = self.f.aliases.get(test.left.id, test.left.id)
            if name in self.f.allocs and name not in self.env:
                return not isinstance(test.ops[0], ast.Is)  # a tensor the launcher allocates is there
            if name not in self.env or self.env[name] is UNKNOWN:
                return None
            return (self.env[name] is None) == isinstance(test.ops[0], ast.Is)
        return None

    def _dim(self, name: str, tensor: str, axis: int) -> None:
        tensor = self.f.view_of.get(tensor, tensor)  # read off a view: the viewed parameter's (as the view)
        self.f.dims.setdefault(name, (tensor, axis))
        self.f.axes.setdefault(tensor, {}).setdefault(axis, name)
        self.f.used_as_tensor.add(tensor)

    def visit_Assign(self, node: ast.Assign) -> None:
        value = node.value
        while isinstance(value, ast.IfExp) and self.truth(value.test) is not None:
            value = value.body if self.truth(value.test) else value.orelse
        for target in node.targets:
            self._assign(target, value)
            self._local(target, value)
        self.generic_visit(node)

    def _view(self, local: str, value: ast.AST) -> None:
        """``x2 = x.view(-1, D)``: the dims later read off ``x2`` are the 2-D view's; x is taken as 2-D too."""
        self.f.view_of[local] = _view_of(value)

    def _local(self, target: ast.AST, value: ast.AST) -> None:
        """Locals the launch passes on: ``s = x.stride(0)`` and the like, to read the kernel's strides."""
        if isinstance(target, ast.Name):
            self.f.exprs[target.id] = value
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
            for t, v in zip(target.elts, value.elts):
                self._local(t, v)
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Call) and not value.args \
                and isinstance(value.func, ast.Attribute) and value.func.attr == "stride":
            for i, t in enumerate(target.elts):  # s_b, s_h, s_d = x.stride(): s_h is x.stride(1)
                if isinstance(t, ast.Name):
                    self.f.exprs[t.id] = ast.Call(ast.Attribute(value.func.value, "stride", ast.Load()),
                                                  [ast.Constant(i)], [])

    def _assign(self, target: ast.AST, value: ast.AST) -> None:
        src = _shape_source(value, self.shapes)
        if isinstance(target, ast.Name):
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "numel" \
                    and isinstance(value.func.value, ast.Name) and value.func.value.id not in self.f.axes:
                tensor = value.func.value.id  # n = x.numel() of a tensor never unpacked: x is flat, [n]
                self._dim(target.id, tensor, 0)
                self.f.ranks.setdefault(tensor, 1)
                self.f.flat.add(target.id)
                return
            flat = _numel_over(value)
            if flat and all(d in self.f.dims for d in flat[1]) and 0 not in self.f.axes.get(flat[0], {}) \
                    and all(self.f.axes.get(flat[0], {}).get(i - len(flat[1])) == d for i, d in enumerate(flat[1])):
                # T = g.numel() // H of g [..., H] (or // (H * K) of g [..., H, K]): g taken as [T, H(, K)]
                self._dim(target.id, flat[0], 0)
                self.f.ranks.setdefault(flat[0], 1 + len(flat[1]))
                return
            if _view_of(value) == target.id and self.f.param(target.id) and target.id not in self.f.ranks:
                rank = self._rank_of_view(value)  # x = x.reshape(-1, H, D): the kernel sees x as 3-D
                if rank:
                    self.f.ranks[target.id] = rank
            if src and src[1] is None:
                self.shapes[target.id] = src[0]
            elif src and isinstance(src[1], int):
                self._dim(target.id, src[0], src[1])
            elif isinstance(value, ast.Name) and self.f.param(value.id):
                self.f.aliases[target.id] = value.id
            elif _view_of(value) and self.f.param(_view_of(value)) and target.id != _view_of(value):
                self.f.aliases[target.id] = _view_of(value)  # x2 = x.view(-1, n): the kernel reads x's data
                self._view(target.id, value)
            elif isinstance(value, ast.Name) and value.id in self.f.dims and target.id not in self.f.dims:
                self.f.dim_alias[target.id] = value.id
            elif isinstance(value, ast.IfExp) and isinstance(value.body, ast.Name) and value.body.id in self.f.dims \
                    and _tests_none(value.test):  # N = B if cu_seqlens is None else ...: B on the default path
                self.f.dim_alias[target.id] = value.body.id
            elif isinstance(value, ast.Call):
                self._alloc(target.id, value)
            return
        if not isinstance(target, ast.Tuple):
            return
        # `_, H, K = x.shape`: the throwaway name is no dim (the kernel's addressing sizes that axis)
        names = [e.id if isinstance(e, ast.Name) and e.id != "_" else None for e in target.elts]
        if src is not None:  # A, B, C = x.shape (or x.shape[-3:])
            tensor, part = src
            tensor = self.f.view_of.get(tensor, tensor)
            n = len(names)
            if part is None:
                self.f.ranks[tensor] = n
                axes = range(n)
            else:
                lo = part.start if part.start is not None else 0
                axes = range(lo, lo + n) if lo >= 0 else range(lo, lo + n)
            for name, elt, axis in zip(names, target.elts, axes):
                if name:
                    self._dim(name, tensor, axis)
                elif isinstance(elt, ast.Name):  # `_`: the kernel's addressing sizes it (else a dim of its own)
                    self.f.unnamed.setdefault(tensor, set()).add(axis)
                    self.f.used_as_tensor.add(tensor)
            return
        if isinstance(value, ast.Tuple):  # A, B, C, V = *k.shape, v.shape[-1]
            i = 0
            for elt in value.elts:
                if isinstance(elt, ast.Starred):
                    star = _shape_source(elt.value, self.shapes)
                    rest = len(value.elts) - 1
                    count = len(names) - rest
                    if star and star[1] is None:
                        self.f.ranks[self.f.view_of.get(star[0], star[0])] = count
                        for axis in range(count):
                            if names[i + axis]:
                                self._dim(names[i + axis], star[0], axis)
                    i += count
                    continue
                one = _shape_source(elt, self.shapes)
                if one and isinstance(one[1], int) and i < len(names) and names[i]:
                    self._dim(names[i], one[0], one[1])
                i += 1

    def _alloc(self, name: str, call: ast.Call) -> None:
        func = call.func
        op = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if op not in _ALLOC:
            return
        like = ""
        if isinstance(func, ast.Attribute) and op.startswith("new_") and isinstance(func.value, ast.Name):
            like = func.value.id
        items: list = []
        args = list(call.args)
        if op.endswith("_like"):
            if args and isinstance(args[0], ast.Name):
                like = args[0].id
                self._tensor_use(like)
                items = [("*", like)]
        else:
            if op in ("full", "new_full") and len(args) > 1:
                args = args[:1]
            if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
                args = list(args[0].elts)
            for a in args:
                if isinstance(a, ast.Starred):
                    src = _shape_source(a.value, self.shapes)
                    items.append(("*", src[0]) if src and src[1] is None else ("?", ast.unparse(a)))
                elif isinstance(a, ast.Name):
                    items.append(("dim", a.id))
                elif isinstance(a, ast.Constant) and isinstance(a.value, int):
                    items.append(("int", a.value))
                else:
                    src = _shape_source(a, self.shapes)
                    items.append(("axis", src) if src and isinstance(src[1], int) else ("?", ast.unparse(a)))
        dtype = ""
        for kw in call.keywords:
            if kw.arg == "dtype":
                dtype = dtype_name(ast.unparse(kw.value))
        self.f.allocs[name] = (items, dtype, like)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._check(node.test, True)
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) \
                and isinstance(test.left, ast.Name) and self.f.param(test.left.id):
            self.f.required.add(test.left.id)  # assert x is not None on the judged path: x must be given
        self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        flag = _bool_test(node.test)
        if flag is not None and self.f.param(flag[0]):
            self.f.conditions.add(flag[0])  # `if in_place is True:`: a flag
        if isinstance(node.test, ast.Name):
            self.f.conditions.add(node.test.id)
            if any(isinstance(n, ast.Call) and (getattr(n.func, "attr", "") in _ALLOC or getattr(n.func, "id", "") in _ALLOC)
                   for stmt in node.body for n in ast.walk(stmt)):
                self.f.gates.add(node.test.id)
        taken = self.truth(node.test)
        if taken is not None:  # the judged path decides it: read only the branch that runs
            self.visit(node.test)
            for stmt in node.body if taken else node.orelse:
                self.visit(stmt)
            return
        raises = node.body and all(isinstance(s, ast.Raise) for s in node.body)
        if raises:
            self._check(node.test, False)
        self.visit(node.test)
        self.guards += 1
        for stmt in node.body + node.orelse:
            self.visit(stmt)
        self.guards -= 1

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.visit(node.test)
        self.guards += 1
        self.visit(node.body)
        self.visit(node.orelse)
        self.guards -= 1

    def _tensor_use(self, name: str) -> None:
        self.f.used_as_tensor.add(name)
        if not self.guards and self.f.param(name):
            self.f.dereferenced.add(name)

    def visit_Compare(self, node: ast.Compare) -> None:
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)) and isinstance(node.left, ast.Name) \
                and isinstance(node.comparators[0], ast.Constant) and node.comparators[0].value is None \
                and self.f.param(node.left.id):
            self.f.none_tested.add(node.left.id)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        for v in node.values:
            if isinstance(v, ast.Name):
                self.f.conditions.add(v.id)
        self.visit(node.values[0])
        self.guards += 1  # `x is not None and x.dim() == 2`: what follows the first operand may never run
        for v in node.values[1:]:
            self.visit(v)
        self.guards -= 1

    def _check(self, test: ast.AST, holds: bool) -> None:
        """What an assert (holds=True) or a raising if (holds=False: the test must be false) requires."""
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And if holds else ast.Or):
            for v in test.values:
                self._check(v, holds)
            return
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            self._check(test.operand, not holds)
            return
        if not isinstance(test, ast.Compare) or len(test.ops) != 1:
            return
        op, left, right = test.ops[0], test.left, test.comparators[0]
        eq = isinstance(op, ast.Eq) if holds else isinstance(op, ast.NotEq)
        if eq and isinstance(left, ast.Name) and isinstance(right, ast.Name) and left.id != right.id \
                and left.id in self.f.dims and right.id in self.f.dims:
            self._same_dim(left.id, right.id)
        if eq:
            ls, rs = _shape_source(left, self.shapes), _shape_source(right, self.shapes)
            if ls and rs and isinstance(ls[1], int) and isinstance(rs[1], int):
                self.f.same_dim.append(((ls[0], ls[1]), (rs[0], rs[1])))
            elif ls and rs and ls[1] is None and rs[1] is None:
                self.f.same_shape.append((ls[0], rs[0]))
            for shape, items in ((ls, right), (rs, left)):
                if shape and shape[1] is None and isinstance(items, (ast.Tuple, ast.List)):
                    self._shape_tuple(shape[0], items.elts)
            for a, b in ((left, right), (right, left)):
                relation = self._multiple(a, b)
                if relation is not None:
                    self.f.scaled.append(relation)
                    break
            for a, b in ((left, right), (right, left)):  # assert H * head_k_dim == HD: HD is a product
                if isinstance(a, ast.Name) and isinstance(b, ast.BinOp) and isinstance(b.op, ast.Mult) \
                        and all(isinstance(n, (ast.Name, ast.Constant, ast.BinOp, ast.Load, ast.Mult))
                                for n in ast.walk(b)):
                    self.f.products.setdefault(a.id, b)
            for a, b in ((left, right), (right, left)):
                if isinstance(a, ast.Attribute) and isinstance(a.value, ast.Name):
                    if a.attr == "ndim" and isinstance(b, ast.Constant):
                        self.f.ranks[a.value.id] = int(b.value)
                    if a.attr == "dtype" and isinstance(b, ast.Attribute):
                        self.f.dtypes[a.value.id] = dtype_name(b.attr)
                if isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "dim" \
                        and isinstance(a.func.value, ast.Name) and isinstance(b, ast.Constant):
                    self.f.ranks[a.func.value.id] = int(b.value)
        bound = (isinstance(op, (ast.LtE, ast.Lt)) if holds else isinstance(op, (ast.Gt, ast.GtE)))
        if bound and isinstance(left, ast.Name) and isinstance(right, ast.Constant) and isinstance(right.value, int):
            self.f.bounds[left.id] = right.value - (1 if isinstance(op, (ast.Lt, ast.GtE)) else 0)
        elif bound and isinstance(left, ast.Name) and not isinstance(right, ast.Constant):
            # headdim_angles <= headdim_qk // 2: sized no larger than the other dims allow
            self.f.dim_bounds.setdefault(left.id, []).append((right, isinstance(op, (ast.Lt, ast.GtE))))
        if eq and isinstance(left, ast.BinOp) and isinstance(left.op, ast.Mod) and isinstance(left.left, ast.Name) \
                and isinstance(left.right, ast.Constant) and type(left.right.value) is int and left.right.value > 1 \
                and isinstance(right, ast.Constant) and right.value == 0:
            self.f.multiples[left.left.id] = left.right.value  # assert headdim % 2 == 0: an even size
        member = isinstance(op, ast.In) if holds else isinstance(op, ast.NotIn)
        if member and isinstance(left, ast.Name):
            values = self._values_of(right)
            if values:
                self.f.choices[left.id] = values

    def _shape_tuple(self, tensor: str, elts: list[ast.AST]) -> None:
        """``assert A.shape == (nheads, dim, dstate)`` (Mamba's launchers check every argument so): A's rank
        and each axis's dim, as an unpacking would give them; ``x.shape[i]`` items are that axis's dim."""
        if any(isinstance(e, ast.Starred) for e in elts):
            return
        tensor = self.f.view_of.get(tensor, tensor)
        self.f.ranks.setdefault(tensor, len(elts))
        if self.f.ranks[tensor] != len(elts):
            return  # asserted with another rank on another branch (`x.dim() == 2` or 3): keep the first
        for axis, e in enumerate(elts):
            if isinstance(e, ast.Name):
                name = self.f.dim_alias.get(e.id, e.id)
                if name not in self.f.dims and (self.f.param(name) is not None or name in self.f.exprs):
                    continue  # an argument, or a local computed otherwise (a product, a call): not read off here
                if self.f.axes.get(tensor, {}).get(axis) not in (None, name):
                    continue
                self._dim(name, tensor, axis)
            elif isinstance(e, ast.Constant) and type(e.value) is int:
                self.f.axes.setdefault(tensor, {}).setdefault(axis, str(e.value))
                self.f.used_as_tensor.add(tensor)
            else:
                src = _shape_source(e, self.shapes)
                if src and isinstance(src[1], int):
                    self.f.same_dim.append(((tensor, axis), (self.f.view_of.get(src[0], src[0]), src[1])))

    def _axis(self, node: ast.AST) -> tuple[str, int] | None:
        """``x.shape[i]`` or a dim unpacked from one -> (x, i)."""
        if isinstance(node, ast.Name) and node.id in self.f.dims:
            return self.f.dims[node.id]
        src = _shape_source(node, self.shapes)
        return (self.f.view_of.get(src[0], src[0]), src[1]) if src and isinstance(src[1], int) else None

    def _multiple(self, big: ast.AST, small: ast.AST) -> tuple[tuple[str, int], tuple[str, int], int] | None:
        """``big == small * k`` (or ``k * small``), or ``big // k == small``, over dims of shapes, k > 1."""
        def factor(node: ast.AST, ops: tuple[type, ...]) -> tuple[ast.AST, int] | None:
            if isinstance(node, ast.BinOp) and isinstance(node.op, ops):
                for x, c in ((node.left, node.right), (node.right, node.left)):
                    if isinstance(c, ast.Constant) and type(c.value) is int and c.value > 1 \
                            and (isinstance(node.op, ast.Mult) or c is node.right):
                        return x, c.value
            return None

        for whole, part, ops in ((big, small, (ast.Mult,)), (small, big, (ast.FloorDiv, ast.Div))):
            scaled = factor(part, ops)
            if scaled is not None:
                x, y = self._axis(whole), self._axis(scaled[0])
                if x and y and x != y:
                    return (x, y, scaled[1]) if ops == (ast.Mult,) else (y, x, scaled[1])
        return None

    def _same_dim(self, a: str, b: str) -> None:
        """``K2, M = phi.shape; assert K2 == K``: one dim, named as first read (K); the other is an alias."""
        keep, drop = (a, b) if list(self.f.dims).index(a) < list(self.f.dims).index(b) else (b, a)
        for axes in self.f.axes.values():
            for axis, dim in axes.items():
                if dim == drop:
                    axes[axis] = keep
        del self.f.dims[drop]
        self.f.dim_alias[drop] = keep

    def _values_of(self, node: ast.AST) -> tuple:
        if isinstance(node, ast.Name) and node.id in self.module_values:
            value = self.module_values[node.id]
            return tuple(value) if isinstance(value, (dict, tuple, list, set, frozenset)) else ()
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("keys", "values"):
            base = self._values_of(node.func.value) if node.func.attr == "keys" else ()
            return base
        try:
            value = ast.literal_eval(node)
        except (ValueError, SyntaxError, TypeError):
            return ()
        return tuple(value) if isinstance(value, (tuple, list, set, frozenset, dict)) else ()

    def visit_Subscript(self, node: ast.Subscript) -> None:
        """``MODES[mode]`` with MODES a module-level dict: ``mode`` must be one of its keys."""
        if isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Name) and self.f.param(node.slice.id) \
                and isinstance(self.module_values.get(node.value.id), dict) and node.slice.id not in self.f.choices:
            keys = tuple(self.module_values[node.value.id])
            if keys:
                self.f.choices[node.slice.id] = keys
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.value, ast.Name) and node.attr in ("shape", "stride", "ndim", "dtype", "device",
                                                               "new_empty", "new_zeros", "view", "reshape",
                                                               "contiguous", "is_contiguous", "numel", "size"):
            self._tensor_use(node.value.id)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name) and func.value.id in self.kernels:
            self.f.launches.append(Launch(func.value.id, node.lineno, ast.unparse(func.slice), self._bind(node)))
        self.generic_visit(node)

    def _spread(self, node: ast.AST) -> list[ast.AST] | None:
        """The arguments ``*node`` passes on the judged path: a tuple's elements, a local tuple's, the branch
        of ``*(a, b) if x is not None else (0, 0)`` the path takes (a bare ``else 0`` spreads nothing: it
        would fail, and the path that runs is the tuple's); None where the count is not known."""
        for _ in range(4):
            if isinstance(node, ast.Name) and isinstance(self.f.exprs.get(node.id), (ast.Tuple, ast.IfExp)):
                node = self.f.exprs[node.id]
            elif isinstance(node, ast.IfExp):
                taken = self.truth(node.test)
                self._spread_needs(node)
                branches = [b for b in (node.body, node.orelse) if isinstance(b, (ast.Tuple, ast.List))]
                if taken is not None:
                    node = node.body if taken else node.orelse
                elif len(branches) == 2 and len(branches[0].elts) == len(branches[1].elts):
                    node = branches[0]  # either way as many arguments: the given one's expressions
                elif len(branches) == 1:
                    node = branches[0]
                else:
                    return None
            else:
                break
        if isinstance(node, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in node.elts):
            return list(node.elts)
        if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "stride" and isinstance(node.func.value, ast.Name):
            rank = self._rank(node.func.value.id)  # *x.stride(): x.stride(0), ..., one per dim
            return [ast.Call(ast.Attribute(node.func.value, "stride", ast.Load()), [ast.Constant(i)], [])
                    for i in range(rank)] if rank else None
        return None

    def _rank(self, name: str) -> int | None:
        """The number of dims of tensor ``name``: that of the view it was made (``x = x.reshape(-1, H, D)``:
        3), else asserted or unpacked."""
        return self._rank_of_view(self.f.exprs.get(name)) or self.f.ranks.get(self.f.view_of.get(name, name))

    @staticmethod
    def _rank_of_view(value: ast.AST | None) -> int | None:
        """``x.view(a, b, c)`` / ``x.reshape((a, b))`` -> its number of sizes."""
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in ("view", "reshape") \
                and value.args and not any(isinstance(a, ast.Starred) for a in value.args):
            args = value.args[0].elts if len(value.args) == 1 and isinstance(value.args[0], (ast.Tuple, ast.List)) \
                else value.args
            if len(value.args) == 1 and isinstance(value.args[0], ast.Constant):
                return 1
            return len(args) if not any(isinstance(a, ast.Starred) for a in args) else None
        return None

    def _taken(self, node: ast.AST) -> ast.AST:
        """``x.stride(0) if not is_varlen else 0``: the branch the judged path takes, where it decides."""
        for _ in range(4):
            if not isinstance(node, ast.IfExp) or (taken := self.truth(node.test)) is None:
                break
            node = node.body if taken else node.orelse
        return node

    def _spread_needs(self, node: ast.IfExp) -> None:
        """``*(b.stride(0), b.stride(1)) if b is not None else 0``: with b None the launch spreads a number,
        a TypeError before any kernel runs (mamba-ssm's launchers pass their Optional bias so), so b is
        required on every path that runs."""
        test = node.test
        if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name)
                and isinstance(test.ops[0], (ast.Is, ast.IsNot)) and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None and self.f.param(test.left.id)):
            return
        when_none = node.orelse if isinstance(test.ops[0], ast.IsNot) else node.body
        if isinstance(when_none, ast.Constant) and not isinstance(when_none.value, (str, bytes)):
            self.f.required.add(test.left.id)

    def _bind(self, call: ast.Call) -> dict[str, ast.AST]:
        params = self.kernels[call.func.value.id]
        args: list[ast.AST] = []
        for a in call.args:
            if not isinstance(a, ast.Starred):
                args.append(self._taken(a))
                continue
            spread = self._spread(a.value)
            if spread is None:  # how many positions it fills is not known: the later ones are unbound
                break
            args.extend(spread)
        out = dict(zip(params, args))
        for kw in call.keywords:
            if kw.arg:
                out[kw.arg] = self._taken(kw.value)
            elif isinstance(kw.value, ast.Name):  # **kwargs of a local dict(a=x, ...) or {"a": x, ...}
                out.update(_dict_items(self.f.exprs.get(kw.value.id)))
        return out

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        """A nested function (``def grid(meta): return (cdiv(T, meta["BT"]), N * H)``): what it returns is
        kept, as a grid a launch may name (and its body read as before)."""
        returns = [n.value for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
        if len(returns) == 1:
            self.f.grid_fns[node.name] = returns[0]
        self.generic_visit(node)

    def visit_Return(self, node: ast.Return) -> None:
        if node.value is not None:
            self.f.returns = tuple(node.value.elts) if isinstance(node.value, ast.Tuple) else (node.value,)


_VIEWS = {"view", "reshape", "contiguous", "flatten", "to", "float", "half", "bfloat16", "squeeze", "unsqueeze"}


def _view_of(value: ast.AST) -> str | None:
    """The tensor ``x`` of ``x.view(...)``, ``x.reshape(...)``, ``x.contiguous()`` and the like."""
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr in _VIEWS:
        inner = value.func.value
        return inner.id if isinstance(inner, ast.Name) else _view_of(inner)
    return None


def _dict_items(node: ast.AST | None) -> dict[str, ast.AST]:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {kw.arg: kw.value for kw in node.keywords if kw.arg}
    if isinstance(node, ast.Dict):
        return {k.value: v for k, v in zip(node.keys, node.values) if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return {}


def _numel_over(value: ast.AST) -> tuple[str, tuple[str, ...]] | None:
    """``x.numel() // D`` -> (x, (D,)), ``x.numel() // (H * K)`` -> (x, (H, K)): the rows of x."""
    def names(node: ast.AST) -> tuple[str, ...] | None:
        if isinstance(node, ast.Name):
            return (node.id,)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            a, b = names(node.left), names(node.right)
            return a + b if a is not None and b is not None else None
        return None
    if isinstance(value, ast.BinOp) and isinstance(value.op, ast.FloorDiv) and names(value.right) \
            and isinstance(value.left, ast.Call) and isinstance(value.left.func, ast.Attribute) \
            and value.left.func.attr == "numel" and isinstance(value.left.func.value, ast.Name):
        return value.left.func.value.id, names(value.right)
    return None


def _bool_test(test: ast.AST) -> tuple[str, bool] | None:
    """``x is True`` / ``x == True`` -> (x, True); ``x is False`` / ``x is not True`` -> (x, False)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
            and isinstance(test.comparators[0], ast.Constant) and isinstance(test.comparators[0].value, bool):
        op, value = test.ops[0], test.comparators[0].value
        if isinstance(op, (ast.Is, ast.Eq)):
            return test.left.id, value
        if isinstance(op, (ast.IsNot, ast.NotEq)):
            return test.left.id, not value
    return None


def _tests_none(test: ast.AST) -> bool:
    return isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is) \
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None


def read_launcher(fn: ast.FunctionDef, kernels: dict[str, tuple[str, ...]],
                  module_values: dict[str, object], env: dict[str, object] | None = None) -> LauncherFacts:
    """The launcher's facts on the path ``env`` (param -> value; None omitted, PRESENT given) takes;
    branches the values do not decide are all read."""
    facts = LauncherFacts(fn.name, fn.lineno, launcher_params(fn))
    reader = _Reader(facts, kernels, module_values, env or {})
    for stmt in fn.body:
        reader.visit(stmt)
    return facts


def module_values(tree: ast.Module) -> dict[str, object]:
    """Module-level names bound to literals (dicts, tuples, numbers), for ``x in NAME`` checks."""
    out: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value  # _MODE: tl.constexpr = tl.constexpr(0)
        else:
            continue
        if isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] == "constexpr" and value.args:
            value = value.args[0]
        try:
            out[target] = ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError):
            if isinstance(value, ast.Dict):
                out[target] = {ast.literal_eval(k): None for k in value.keys if isinstance(k, ast.Constant)}
    return out


def grid_extents(lf: LauncherFacts, launch: Launch) -> tuple[tuple[str, ...] | None, ...]:
    """Each grid axis of ``launch`` as the product of launcher dims it spans (``(NV, N * H)`` ->
    ``(None, ("H", "N"))`` when NV is no dim), or None where it is not a product of dims (a tile count
    such as ``cdiv(T, BT)``). A grid named by a local tuple, a lambda or a nested ``def grid(meta)``
    is read through its name."""
    return tuple(_dim_product(lf, axis) for axis in grid_axes(lf, launch))


def grid_axes(lf: LauncherFacts, launch: Launch) -> list[ast.AST]:
    """The expressions of ``launch``'s grid axes (through a local tuple, a lambda or ``def grid(meta)``)."""
    try:
        node = ast.parse(launch.grid, mode="eval").body
    except SyntaxError:
        return []
    for _ in range(3):
        if isinstance(node, ast.Name) and node.id in lf.grid_fns:
            node = lf.grid_fns[node.id]
        elif isinstance(node, ast.Name) and node.id in lf.exprs:
            node = lf.exprs[node.id]
        elif isinstance(node, ast.Lambda):
            node = node.body
        else:
            break
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def _dim_product(lf: LauncherFacts, node: ast.AST) -> tuple[str, ...] | None:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        a, b = _dim_product(lf, node.left), _dim_product(lf, node.right)
        return None if a is None or b is None else tuple(sorted(a + b))
    if isinstance(node, ast.Constant) and node.value == 1:
        return ()
    if isinstance(node, ast.Name):
        name = lf.dim_alias.get(node.id, node.id)
        return (name,) if name in lf.dims else None
    return None
