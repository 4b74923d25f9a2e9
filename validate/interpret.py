"""Kernels that call aliased Triton builtins, made to run in Triton's CPU interpreter.

FLA, SGLang and vLLM files write ``exp = tl.exp`` at module level (or import such a name from a
helper module) and call ``exp(x)`` inside ``@triton.jit`` code. The interpreter swaps the builtins of
``triton.language`` for its own only while a kernel runs, so an alias bound at import still holds the
compiled-mode builtin, and the *original* kernel fails ("Did you forget to add @triton.jit ?").

``late_bind_aliases(module)`` rebinds every such alias, in the module and in the globals of every
jitted function reachable from it, to a stand-in that looks the builtin up on its home module when
called, so inside the interpreter it finds the interpreter's version. It changes which object a name
holds, never what it computes; in compiled mode it is not used.
"""
from __future__ import annotations

import ast
import sys
from types import FunctionType, ModuleType
from typing import Any

from skel.validate.libdevice import LibdeviceStandIn, is_libdevice_function, is_libdevice_module, numpy_stand_in


def _is_builtin(value: Any) -> bool:
    return callable(value) and getattr(value, "__triton_builtin__", False) is True


def _home(value: Any) -> tuple[ModuleType, str] | None:
    """The triton.language module (and name) that holds ``value``, if it is one of its builtins."""
    import triton.language as tl

    name = getattr(value, "__name__", "")
    candidates = [sys.modules.get(getattr(value, "__module__", "") or ""), tl, tl.math, tl.core]
    for module in candidates:
        if isinstance(module, ModuleType) and module.__name__.startswith("triton.language") \
                and getattr(module, name, None) is value:
            return module, name
    return None


def _late(module: ModuleType, name: str):
    def call(*args, **kwargs):
        return getattr(module, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__skel_late_bound__ = f"{module.__name__}.{name}"
    return call


def _namespaces(module: ModuleType):
    """``(name, globals)`` of ``module`` and of the module of every jitted function reachable from it
    (through Triton's wrappers: heuristics -> autotuner -> jit function -> its Python function), and of
    every plain function it holds whose own module defines kernels (a launcher imported from a sibling
    module, unwrapped through ``functools.wraps``: its kernels run too), each once. The caller may rebind
    names in a namespace before the walk looks into it for more."""
    seen: set[int] = set()
    spaces = [(module.__name__, vars(module))]
    while spaces:
        label, space = spaces.pop()
        if id(space) in seen:
            continue
        seen.add(id(space))
        yield label, space
        for value in list(space.values()):
            chain = _wrapped(value)
            fn_globals = getattr(chain[-1], "__globals__", None) if len(chain) > 1 else None
            if isinstance(fn_globals, dict):
                spaces.append((fn_globals.get("__name__", "?"), fn_globals))
            for fn in _unwrapped(value):
                if id(fn.__globals__) not in seen and _holds_kernels(fn.__globals__):
                    spaces.append((fn.__globals__.get("__name__", "?"), fn.__globals__))


def _holds_kernels(space: dict) -> bool:
    try:
        from triton.runtime.jit import KernelInterface
    except ImportError:
        return False
    return any(isinstance(v, KernelInterface) for v in list(space.values()))


def _unwrapped(value: Any) -> list[Any]:
    """``value`` and the functions it wraps through ``__wrapped__`` (functools.wraps), plain functions only."""
    chain = []
    while isinstance(value, FunctionType) and len(chain) < 6 and value not in chain:
        chain.append(value)
        value = getattr(value, "__wrapped__", None)
    return chain


def late_bind_aliases(module: ModuleType) -> list[str]:
    """Rebind aliased builtins reachable from ``module``; returns "namespace.alias -> home.name" per rebinding."""
    done: list[str] = []
    for label, space in _namespaces(module):
        for alias, value in list(space.items()):
            if alias.startswith("__"):
                continue
            stand_in = _libdevice(value.__name__) if is_libdevice_function(value) else None
            if stand_in is not None:
                space[alias] = stand_in
                done.append(f"{label}.{alias} -> {stand_in.__skel_late_bound__} (libdevice has no interpreter)")
            elif _is_builtin(value):
                home = _home(value)
                if home is not None and home[0] is not sys.modules.get(label):
                    space[alias] = _late(*home)
                    done.append(f"{label}.{alias} -> {home[0].__name__}.{home[1]}")
            elif is_libdevice_module(value):
                space[alias] = LibdeviceStandIn(value, _libdevice)
                done.append(f"{label}.{alias} -> its functions' tl.math or numpy namesakes (libdevice has no interpreter)")
    return done


def _libdevice(name: str):
    """What stands in for libdevice's ``name`` in the interpreter: its tl.math namesake (bound late), else
    the numpy function that computes it (validate/libdevice.py), else None (left as it is)."""
    import triton.language as tl

    if _is_builtin(getattr(tl.math, name, None)):
        return _late(tl.math, name)
    return numpy_stand_in(name)


def float_scalars_as_tensors() -> bool:
    """Give float arguments the compiled type: an fp32 scalar tensor, not a Python float.

    Compiled Triton passes a float argument as an fp32 scalar, so kernels call ``eps.to(tl.float32)``
    on it (Liger's norms and activations do); the interpreter hands the kernel the bare Python float,
    and the *original* fails ("'float' object has no attribute 'to'"). This wraps the interpreter's
    argument conversion so floats arrive as the compiled path types them. Returns whether it applied.
    """
    try:
        import numpy as np
        import triton.language as tl
        import triton.runtime.interpreter as interpreter
    except ImportError:
        return False
    convert = getattr(interpreter, "_implicit_cvt", None)
    if convert is None or getattr(convert, "_skel_floats", False):
        return convert is not None

    def implicit_cvt(arg):
        if isinstance(arg, float):
            handle = interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return convert(arg)

    implicit_cvt._skel_floats = True
    interpreter._implicit_cvt = implicit_cvt
    return True


def cuda_device_scopes_on_cpu() -> bool:
    """Let ``with torch.cuda.device(x.device.index):`` run when x lives on the CPU.

    Launchers enter their tensors' CUDA device before launching (mamba-ssm's and vLLM's state updates,
    FLA's device guards); a CPU tensor's ``device.index`` is None, which ``torch.cuda.device`` refuses
    ("'<' not supported between 'NoneType' and 'int'"), so the *original* fails in the interpreter before
    any kernel runs. torch itself treats index -1 as "no device change": None is taken as that. Only in the
    CPU workers, where no CUDA device exists to be entered. Returns whether it applied.
    """
    import torch

    scope = torch.cuda.device
    init = scope.__init__
    if getattr(init, "_skel_cpu", False):
        return True

    def cpu_init(self, device):
        init(self, -1 if device is None or (isinstance(device, torch.device) and device.type == "cpu") else device)

    cpu_init._skel_cpu = True
    scope.__init__ = cpu_init
    return True


def loop_indices_as_tensors() -> bool:
    """Give a ``range`` / ``tl.range`` loop index the compiled type: an integer scalar tensor.

    Compiled Triton lowers such a loop to ``scf.for``, whose index is a tensor (``i_t.to(tl.int64)``, as
    FLA's chunk kernels write, is valid there); the interpreter runs the loop in Python, so the index is
    a bare int and the *original* fails ("'int' object has no attribute 'to'"). The interpreter already
    rewrites every assignment in a kernel's source to pass through ``to_tensor``; this extends that
    source rewrite with one assignment ``i = i`` at the top of each such loop body. ``tl.static_range``
    loops are left alone: their index is a compile-time constant in compiled code too. The values the
    kernel computes do not change (int32 unless the value needs more, as for any scalar the interpreter
    types). Returns whether it applied.
    """
    try:
        import triton.runtime.interpreter as interpreter
    except ImportError:
        return False
    rewriter = getattr(interpreter, "FunctionRewriter", None)
    current = getattr(rewriter, "ast_transformer", None)
    if current is None or not hasattr(current, "visit_Assign"):
        return False
    if getattr(current, "_skel_loops", False):
        return True

    class LoopIndexAsTensor(type(current)):
        _skel_loops = True

        def visit_For(self, node: ast.For) -> ast.For:
            self.generic_visit(node)
            if isinstance(node.target, ast.Name) and _dynamic_range(node.iter):
                name = node.target.id
                rebind = ast.Assign(targets=[ast.Name(id=name, ctx=ast.Store())], value=ast.Name(id=name, ctx=ast.Load()))
                node.body.insert(0, ast.copy_location(self.visit_Assign(rebind), node))
            return node

    rewriter.ast_transformer = LoopIndexAsTensor()
    getattr(interpreter.InterpretedFunction, "rewritten_fn", {}).clear()  # rewritten before: rewrite again
    return True


def _dynamic_range(node: ast.expr) -> bool:
    """``range(...)``, ``tl.range(...)`` or ``triton.language.range(...)``: a loop compiled to ``scf.for``."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    return (isinstance(func, ast.Name) and func.id == "range") or (isinstance(func, ast.Attribute) and func.attr == "range")


def bf16_on_values() -> bool:
    """bf16 arithmetic and ``tl.dot`` on bf16 operands compute on the values, as compiled code does.

    The interpreter keeps bf16 data as its uint16 bits, and its dot and elementwise ops (``a * b``,
    ``a + b``, comparisons) compute on those bits as integers: FLA's chunk kernels (``b_k * b_b[:, None]``
    on bf16 loads, casts to bf16 before ``tl.dot``) returned 1e9 or inf in the *original*. This widens bf16
    operands to fp32 first, exactly (every bf16 is an fp32), and rounds a float result back to bf16 to
    nearest, what the hardware does for one bf16 op; a dot's accumulator type, and so its result's, is
    unchanged. Returns whether it applied."""
    try:
        import triton.language as tl
        import triton.runtime.interpreter as interpreter
    except ImportError:
        return False
    builder = getattr(interpreter, "InterpreterBuilder", None)
    dot, binary = getattr(builder, "create_dot", None), getattr(builder, "binary_op", None)
    if dot is None or binary is None or not hasattr(builder, "cast_impl"):
        return False
    if getattr(dot, "_skel_bf16", False):
        return True
    handle = interpreter.TensorHandle

    def wide(self, x):
        return self.cast_impl(x, tl.float32) if x.dtype.scalar == tl.bfloat16 else x

    def create_dot(self, a, b, d, *args, **kwargs):
        return dot(self, wide(self, a), wide(self, b), d, *args, **kwargs)

    def binary_op(self, lhs, rhs, op):
        if lhs.dtype.scalar != tl.bfloat16 or rhs.dtype.scalar != tl.bfloat16:
            return binary(self, lhs, rhs, op)

        out = op(wide(self, lhs).data, wide(self, rhs).data)
        if out.dtype.kind != "f":  # a comparison: its truth on the values, typed as the interpreter types it
            return handle(out, lhs.dtype.scalar)
        return self.cast_impl(handle(out.astype("float32"), tl.float32), tl.bfloat16)

    create_dot._skel_bf16 = True
    builder.create_dot, builder.binary_op = create_dot, binary_op
    _bf16_reductions(interpreter, tl)
    return True


def _bf16_reductions(interpreter: ModuleType, tl: ModuleType) -> None:
    """``tl.sum``, ``tl.max``/``tl.min`` and ``tl.cumsum``/``cumprod`` of a bf16 tensor on its values (the
    interpreter summed and ordered the uint16 bits): computed in fp32, results rounded back to bf16."""
    cast = interpreter.interpreter_builder.cast_impl

    def retyped(t, dtype):
        ty = t.type.with_element_ty(dtype) if t.type.is_block() else dtype
        return tl.tensor(cast(t.handle, dtype), ty)

    def on_values(method):
        def call(self, input, *args, **kwargs):
            if input.dtype != tl.bfloat16:
                return method(self, input, *args, **kwargs)
            out = method(self, retyped(input, tl.float32), *args, **kwargs)
            many = isinstance(out, (tuple, list))
            back = [retyped(o, tl.bfloat16) if o.dtype == tl.float32 else o for o in (out if many else (out,))]
            return type(out)(back) if many else back[0]
        return call

    for cls, names in ((interpreter.ReduceOps, ("sum", "min_max")), (interpreter.ScanOps, ("cumsum", "cumprod"))):
        for name in names:
            if hasattr(cls, name):
                setattr(cls, name, on_values(getattr(cls, name)))


def one_config_autotune(module: ModuleType) -> list[str]:
    """Autotuned kernels reachable from ``module`` keep only their first config.

    In the interpreter, an autotuner with two or more configs benchmarks them through a GPU driver there
    is none of ("0 active drivers"), so the *original* fails; a config's launch parameters (warps, stages)
    do not change what the interpreter computes. Returns "namespace.name" per autotuner trimmed."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return []
    done: list[str] = []
    for label, space in _namespaces(module):
        for name, value in list(space.items()):
            for layer in _wrapped(value):  # heuristics -> autotuner -> jit function -> python function
                if isinstance(layer, Autotuner) and len(layer.configs) > 1:
                    layer.configs = layer.configs[:1]
                    done.append(f"{label}.{name}")
    return done


def _wrapped(value: Any) -> list[Any]:
    """``value`` and what it wraps through ``.fn`` (Triton's decorators each wrap the next)."""
    chain = [value]
    while len(chain) < 6 and hasattr(chain[-1], "fn") and not isinstance(chain[-1], ModuleType):
        inner = getattr(chain[-1], "fn", None)
        if inner is None or inner is chain[-1]:
            break
        chain.append(inner)
    return chain
