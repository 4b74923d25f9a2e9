"""The launchers of a Triton file, found statically (``ast``; the file is never imported here).

A launcher is a top-level function of the file that launches a ``@triton.jit`` kernel defined in the
same file (``kernel[grid](...)``). ``skel capture`` wraps exactly these when the user's run imports the
file; a kernel launched only from another file has no launcher here, and the capture says so.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Launcher:
    """A top-level function of the target file and the kernels of that file it launches."""

    name: str
    line: int
    kernels: tuple[str, ...]
    returns: tuple[str, ...]  # names its last ``return`` gives its values, "" where one is not a plain name


@dataclass(frozen=True)
class FileLaunchers:
    path: Path
    kernels: tuple[str, ...]  # @triton.jit functions defined in the file
    launchers: tuple[Launcher, ...]
    foreign_launches: tuple[str, ...]  # "fn launches name" for launches of kernels not defined in the file


class LauncherError(ValueError):
    """The file cannot be read, or has no launcher to capture (a usage error)."""


def find_launchers(path: Path) -> FileLaunchers:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise LauncherError(f"{path}: cannot read it as Python ({type(exc).__name__}: {exc})") from None
    top = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    kernels = tuple(jit_functions(tree))
    launchers, foreign = [], []
    for fn in top:
        if fn.name in kernels:
            continue
        launched = _launched(fn)
        own = tuple(dict.fromkeys(k for k in launched if k in kernels))
        foreign += [f"{fn.name} launches {k}" for k in dict.fromkeys(launched) if k not in kernels]
        if own:
            launchers.append(Launcher(fn.name, fn.lineno, own, _return_names(fn)))
    return FileLaunchers(path, kernels, tuple(launchers), tuple(foreign))


def pick(found: FileLaunchers, entry: str | None) -> tuple[Launcher, ...]:
    """The launchers to wrap: the one named by ``entry``, else all; a LauncherError saying why there is none."""
    names = ", ".join(l.name for l in found.launchers) or "none"
    if entry is not None:
        chosen = tuple(l for l in found.launchers if l.name == entry)
        if not chosen:
            raise LauncherError(f"{found.path}: {entry!r} is not a launcher of this file (launchers: {names})")
        return chosen
    if found.launchers:
        return found.launchers
    if not found.kernels:
        where = f" ({'; '.join(found.foreign_launches)})" if found.foreign_launches else ""
        raise LauncherError(f"{found.path} defines no @triton.jit kernel{where}: capture the file that defines it")
    raise LauncherError(f"{found.path}: its kernels ({', '.join(found.kernels)}) are launched from no top-level "
                        "function of this file (a kernel launched only from another file): capture that file")


def jit_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The file's top-level ``@triton.jit`` kernels by name."""
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and is_jit(n)}


def launcher_functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The file's top-level functions that launch one of its kernels (``kernel[grid](...)``), by name."""
    kernels = jit_functions(tree)
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name not in kernels
            and any(k in kernels for k in _launched(n))}


def is_jit(fn: ast.AST) -> bool:
    for dec in getattr(fn, "decorator_list", ()):
        target = dec.func if isinstance(dec, ast.Call) else dec
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "jit":
            return True
    return False


def _launched(fn: ast.AST) -> list[str]:
    """Names ``k`` of every ``k[grid](...)`` call inside ``fn`` (nested functions included)."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
            out.append(node.func.value.id)
    return out


def _return_names(fn: ast.AST) -> tuple[str, ...]:
    returns = sorted((n for n in _own_nodes(fn) if isinstance(n, ast.Return) and n.value is not None),
                     key=lambda n: (n.lineno, n.col_offset))
    if not returns:
        return ()
    value = returns[-1].value
    items = value.elts if isinstance(value, ast.Tuple) else [value]
    return tuple(item.id if isinstance(item, ast.Name) else "" for item in items)


def _own_nodes(fn: ast.AST):
    """Nodes of ``fn`` outside its nested functions and classes (their returns are not its own)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


def kernels_reached(tree: ast.Module, entry: str) -> set[str]:
    """The file's kernels that calling ``entry`` can launch: those it launches and those the same-file
    functions it calls (transitively) launch."""
    return functions_reached(tree, entry) & set(jit_functions(tree))


def functions_reached(tree: ast.Module, entry: str) -> set[str]:
    """The file's top-level functions that calling ``entry`` runs: itself, the kernels it launches, the
    same-file functions it calls and, transitively, theirs (a kernel's ``@triton.jit`` helpers too)."""
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    todo, seen = [entry], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in functions:
            continue
        seen.add(name)
        for node in ast.walk(functions[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and isinstance(node.func.value, ast.Name):
                todo.append(node.func.value.id)  # kernel[grid](...)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                todo.append(node.func.id)
            elif isinstance(node, ast.Name) and node.id in functions:
                todo.append(node.id)  # passed as a value (a helper handed to a wrapper)
    return seen


def changed_kernels(before: str, after: str) -> set[str] | None:
    """The kernels whose code differs between two versions of a file (None when either does not parse)."""
    try:
        old, new = jit_functions(ast.parse(before)), jit_functions(ast.parse(after))
    except SyntaxError:
        return None
    return {name for name in old.keys() | new.keys()
            if name not in old or name not in new or ast.dump(old[name]) != ast.dump(new[name])}
