"""Find a target's spec and load kernel files by path, each under its own module name.

A target is a family under ``kernels/`` ("kda_decode"), or the path of a kernel file; a
file outside ``kernels/`` is validated against the spec named by ``spec`` (a family name or
the path of a spec.py: a harness), or against a ``spec.py`` lying beside it.
"""
from __future__ import annotations

import hashlib
import importlib.resources
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

KERNELS_DIR = Path(__file__).resolve().parent.parent / "kernels"


def kernels_dir() -> Path:
    """The ``kernels/`` folder: data (kernel, reference and spec files, loaded by path with
    ``load_module``), found as the package's files; no skel module imports the families' code."""
    try:
        return Path(str(importlib.resources.files("skel.kernels")))
    except ModuleNotFoundError:  # running from a source tree without the package installed
        return KERNELS_DIR


def families() -> tuple[str, ...]:
    """Family names under kernels/ (folders holding kernel.py and spec.py)."""
    root = kernels_dir()
    return tuple(sorted(p.parent.name for p in root.glob("*/spec.py") if (p.parent / "kernel.py").exists()))


@dataclass(frozen=True)
class TargetRef:
    """Where a target's original kernel and its spec file live."""

    kernel: Path
    spec: Path

    @property
    def inferred(self) -> bool:
        """The spec is one skel inferred from the kernel's launcher (``skel harness``)."""
        from skel.harness.writer import cache_root

        return cache_root() in self.spec.parents


class TargetError(ValueError):
    """The target or its spec cannot be found or loaded (a usage error, not a rejection)."""


def resolve_target(target: str | Path, spec: str | Path | None = None, entry: str | None = None) -> TargetRef:
    root = kernels_dir()
    text = str(target)
    if not text.endswith(".py") and (root / text / "kernel.py").exists() and spec is None:
        return TargetRef(root / text / "kernel.py", root / text / "spec.py")
    path = Path(text).expanduser().resolve()
    if not path.exists():
        raise TargetError(
            f"target {text!r} is neither a family under {root} ({', '.join(families())}) nor an existing file"
        )
    if path.is_dir():
        path = path / "kernel.py"
        if not path.exists():
            raise TargetError(f"target folder {target} has no kernel.py")
    return TargetRef(path, _spec_path(path, spec, root, entry))


def _spec_path(kernel: Path, spec: str | Path | None, root: Path, entry: str | None = None) -> Path:
    if spec is not None:
        text = str(spec)
        if (root / text / "spec.py").exists():
            return root / text / "spec.py"
        path = Path(text).expanduser().resolve()
        if path.is_file():
            return path
        raise TargetError(f"spec {text!r} is neither a family ({', '.join(families())}) nor a spec file")
    beside = kernel.parent / "spec.py"
    if beside.exists():
        return beside
    return _inferred(kernel, entry)


def _inferred(kernel: Path, entry: str | None) -> Path:
    """No spec anywhere: the harness skel infers from the kernel file's own launcher (``skel harness``)."""
    from skel.harness.infer import HarnessError
    from skel.harness.writer import inferred_spec
    from skel.miner.sourcefile import UnreadableSource, read_source

    try:
        source = read_source(str(kernel), "triton").text
        spec, _ = inferred_spec(kernel, source, entry)
    except HarnessError as exc:
        raise TargetError(f"no spec for target {kernel}, and none can be inferred: {exc}; pass a family name or a"
                          f" spec file ({', '.join(families())})") from None
    except (OSError, ValueError, UnreadableSource) as exc:
        raise TargetError(f"no spec for target {kernel}, and its text cannot be read: {exc}") from None
    return spec


def load_module(path: str | Path, tag: str, package_of: str | Path | None = None) -> ModuleType:
    """Import a .py file by path under a private name (two files with equal names never clash).

    A file with relative imports (``from .utils import x``) is imported as a private submodule of the
    package its ``__init__.py`` chain names, so those imports resolve as they do in the user's code;
    ``package_of`` names the file whose package that is (a candidate is a copy of the target, judged as
    if it stood in the target's place). Raises whatever executing the file raises.
    """
    path = Path(path).resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
    name = f"_skel_{tag}_{path.stem}_{digest}"
    package = _package_for(path, Path(package_of).resolve() if package_of else path)
    if package is not None:
        name = f"{package}.{name}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    # Registered before executing: Triton and dataclasses look the module up by name.
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def enclosing_package(path: Path) -> tuple[str, Path] | None:
    """The dotted package a file sits in by its ``__init__.py`` chain, and the folder above its top
    package (what must be on ``sys.path`` to import it); None outside a package."""
    parts: list[str] = []
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.name.isidentifier() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return (".".join(parts), folder) if parts else None


def _imports(path: Path) -> tuple[bool, tuple[str, ...]]:
    """Whether the file imports relatively (``from . import x``), and the modules it imports absolutely."""
    import ast

    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return False, ()
    relative, absolute = False, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            relative |= bool(node.level)
            if not node.level and node.module:
                absolute.append(node.module)
        elif isinstance(node, ast.Import):
            absolute += [a.name for a in node.names]
    return relative, tuple(absolute)


# packages whose ``__init__`` failed here and were set up without running it (load_notes() reports them)
_UNINITIALISED: dict[str, str] = {}


def load_notes() -> tuple[str, ...]:
    """What loading kernel files had to work around: packages whose ``__init__`` does not import here."""
    return tuple(f"package {name}: its __init__ does not import here ({why}); its modules were loaded without it"
                 for name, why in sorted(_UNINITIALISED.items()))


def _ensure_package(package: str, root: Path) -> None:
    """``package`` imported, or, when its ``__init__`` fails here (a CUDA extension the package imports
    eagerly, a dependency of another part of it: mamba-ssm's ``__init__`` imports its compiled selective
    scan, sglang's a JSON library), registered without running it, so that its kernel modules and their
    helpers still load. Parents first."""
    parts = package.split(".")
    for i in range(1, len(parts) + 1):
        name = ".".join(parts[:i])
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
            continue
        except Exception as exc:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                sys.modules.pop(loaded, None)  # what the failed __init__ left half-built
            why = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
        folder = root.joinpath(*parts[:i])
        init = folder / "__init__.py"
        if not init.is_file():
            raise ImportError(f"package {name} does not import ({why}) and has no __init__.py under {root}")
        module_spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(folder)])
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        if i > 1:
            setattr(sys.modules[".".join(parts[:i - 1])], parts[i - 1], module)
        _UNINITIALISED[name] = why


def _package_for(path: Path, anchor: Path) -> str | None:
    """The package to import ``path`` under, its packages imported first: for a file with relative imports,
    or one that imports modules of its own project by absolute name (``from mamba_ssm.ops.triton.softplus
    import softplus`` in ``mamba_ssm/ops/triton/``, ``from sglang.kernels.ops.attention.fla.op import exp`` in
    a namespace folder without ``__init__.py``): where that project is not installed, the folder above it,
    found among the file's own folders, goes on ``sys.path``. Any other file runs standalone, its package's
    ``__init__`` never executed for nothing."""
    relative, absolute = _imports(path)
    found = enclosing_package(anchor)
    if relative and found is None:
        raise ImportError(f"{anchor} imports relatively but is not inside a package (no __init__.py beside it):"
                          " judge it where it lives in its package")
    roots: dict[str, Path] = {}  # top-level name -> the folder above it
    if found is not None:
        roots[found[0].split(".")[0]] = found[1]
    folders = anchor.parent.parts
    own = []
    for module in absolute:
        top = module.split(".")[0]
        if top not in folders:
            continue
        if top not in roots:  # the nearest folder of that name above the file
            roots[top] = Path(*folders[:len(folders) - folders[::-1].index(top) - 1])
        own.append(module)
    if not relative and not own:
        return None
    for top, root in roots.items():
        if importlib.util.find_spec(top) is None:
            sys.path.append(str(root))
    try:
        if relative:
            _ensure_package(found[0], found[1])
        for module in own:  # the packages above each module it names (the module itself it imports)
            if "." in module:
                _ensure_package(module.rsplit(".", 1)[0], roots[module.split(".")[0]])
    except Exception as exc:
        name = found[0] if found else own[0].split(".")[0]
        raise ImportError(f"its package {name} does not import: {type(exc).__name__}: {exc}") from exc
    return found[0] if relative else None


def load_spec(path: str | Path):
    """The ``SPEC`` (a TargetSpec) exported by a spec file."""
    from skel.validate.spec import TargetSpec

    path = Path(path)
    try:
        module = load_module(path, "spec")
    except Exception as exc:
        raise TargetError(f"spec {path} does not import: {type(exc).__name__}: {exc}") from exc
    spec = getattr(module, "SPEC", None)
    if not isinstance(spec, TargetSpec):
        raise TargetError(f"spec {path} does not export SPEC = TargetSpec(...)")
    return spec


def signature_problem(fn: Callable, names: tuple[str, ...]) -> str | None:
    """Why ``fn`` cannot be called with these keyword arguments, or None."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins and C callables: let the call decide
    try:
        sig.bind(**{name: None for name in names})
    except TypeError as exc:
        return f"{getattr(fn, '__name__', 'launcher')}{sig} cannot take ({', '.join(names)}): {exc}"
    return None
