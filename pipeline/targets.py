"""Which family a target file belongs to, and how the gate should call it.

Zero-config targets:
- the suite's own kernels (``kernels/<family>/kernel.py``) and copies of them anywhere:
  recognised by the family's launcher name and kernel parameters;
- FLA's upstream decode files (fla-core 0.6.0 ``fla/ops/kda/fused_recurrent.py`` and
  ``fla/ops/gated_delta_rule/fused_recurrent.py``) copied anywhere: recognised by their entry
  function and kernel parameters, validated through the harness spec beside the family.
Each family declares how it is recognised in its own ``kernels/<family>/fingerprint.toml``.
Any other kernel: the harness skel infers from the file's own launcher (``skel.harness``), or
``--harness SPEC.py`` (a file exporting ``SPEC = TargetSpec(...)``, see ``validate/spec.py``) naming
the spec, inputs, reference and tolerances to judge it against.

Recognition is static (``ast``): the target is not imported to find out what it is.
"""
from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

from skel.errors import UsageError


@dataclass(frozen=True)
class Fingerprint:
    """How a copy of one family's kernel is recognised: one ``[[fingerprint]]`` of the family's
    ``kernels/<family>/fingerprint.toml`` (each family declares its own; nothing lists them here)."""

    family: str
    harness: str  # spec file name inside kernels/<family>/
    entry: str  # top-level function the gate calls
    kernel_params: frozenset[str]  # parameters one @triton.jit kernel of the file must have
    dims: tuple[tuple[str, str], ...]  # shape dim -> expression over the entry's arguments
    entry_params: frozenset[str] = frozenset()  # parameters the entry function must have


FINGERPRINT_FILE = "fingerprint.toml"
_FINGERPRINT_KEYS = ("harness", "entry", "kernel_params", "entry_params", "dims")


class FingerprintError(UsageError):
    """A family's fingerprint.toml that does not load (the message names the file and the field)."""


def fingerprints(root: Path | None = None) -> tuple[Fingerprint, ...]:
    """Every family's fingerprints under ``root`` (default: the shipped ``kernels/``), by family name
    and then in file order."""
    root = kernels_root() if root is None else root
    return tuple(fp for path in sorted(root.glob(f"*/{FINGERPRINT_FILE}")) for fp in _read_fingerprints(path))


def _read_fingerprints(path: Path) -> tuple[Fingerprint, ...]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise FingerprintError(f"{path}: cannot be read: {exc}") from None
    tables = data.get("fingerprint")
    if not isinstance(tables, list) or not tables or set(data) != {"fingerprint"}:
        raise FingerprintError(f"{path}: expected one or more [[fingerprint]] tables and nothing else")
    return tuple(_fingerprint(path, i, table) for i, table in enumerate(tables))


def _fingerprint(path: Path, i: int, table: dict) -> Fingerprint:
    def fail(key: str, why: str):
        raise FingerprintError(f"{path}: fingerprint[{i}].{key}: {why}")

    for key in table:
        if key not in _FINGERPRINT_KEYS:
            fail(key, f"unknown key (known: {', '.join(_FINGERPRINT_KEYS)})")
    for key in ("harness", "entry"):
        if not isinstance(table.get(key), str) or not table[key]:
            fail(key, "missing or not a non-empty string")
    if not (path.parent / table["harness"]).is_file():
        fail("harness", f"no file {table['harness']!r} in {path.parent}")
    names = {}
    for key in ("kernel_params", "entry_params"):
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.isidentifier() for v in value):
            fail(key, "not a list of parameter names")
        names[key] = frozenset(value)
    dims = table.get("dims", {})
    if not isinstance(dims, dict) or not all(isinstance(v, str) for v in dims.values()):
        fail("dims", "not a table of dim = \"expression over the entry's arguments\"")
    if not names["kernel_params"] and not names["entry_params"]:
        fail("kernel_params", "neither kernel_params nor entry_params given: every file defining the entry would match")
    return Fingerprint(path.parent.name, table["harness"], table["entry"], names["kernel_params"],
                       tuple(dims.items()), names["entry_params"])


@dataclass(frozen=True)
class TargetBinding:
    """A target file bound to the spec that judges it."""

    path: Path
    family: str
    spec: Path  # spec file (harness) the gate uses
    entry: str  # function the gate calls in the target and in each candidate
    how: str  # "recognised as ..." or "harness ..."
    dims: tuple[tuple[str, str], ...] = ()
    batch: str = "N"  # the spec's batch-like dim (shape buckets are the other dims)

    def to_json(self) -> dict:
        return {"path": str(self.path), "family": self.family, "spec": str(self.spec) if self.family else None,
                "entry": self.entry, "how": self.how, "batch": self.batch}


class NotRecognised(UsageError):
    """The target is no known family and no harness was given: it can be rewritten, not judged."""


def unbound(path: Path) -> TargetBinding:
    """A binding for ``skel apply --dry-run`` on a file no spec judges: candidates are shown, nothing runs."""
    return TargetBinding(path, "", Path(), "", "not a recognised kernel family: dry run without a spec "
                         "(pass --harness SPEC.py to validate the candidates)")


def kernels_root() -> Path:
    from skel.validate.load import kernels_dir

    return kernels_dir()


def bind_target(path: Path, source: str, harness: Path | None = None, entry: str | None = None,
                variants: tuple[str, ...] = (), dims: dict[str, int] | None = None) -> TargetBinding:
    """Recognise ``path`` (its text is ``source``), bind it to the user's harness, or to the one inferred
    from its launcher (``entry``, ``variants`` and ``dims`` as for ``skel harness``; asking for any of
    them skips recognition)."""
    if harness is not None:
        return _bind_harness(path, harness)
    if entry or variants or dims:
        return _bind_inferred(path, source, entry, variants, dims)
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise UsageError(f"{path}:{exc.lineno}: target does not parse: {exc.msg}") from None
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    jit_params = [
        {a.arg for a in fn.args.args}
        for fn in functions.values()
        if any("jit" in ast.unparse(d) for d in fn.decorator_list)
    ]
    for fp in fingerprints():
        entry = functions.get(fp.entry)
        if entry is None or not fp.entry_params <= {a.arg for a in entry.args.args + entry.args.kwonlyargs}:
            continue
        if any(fp.kernel_params <= params for params in jit_params):
            spec = kernels_root() / fp.family / fp.harness
            return TargetBinding(path, fp.family, spec, fp.entry,
                                 f"recognised as {fp.family} (entry {fp.entry}, spec {fp.harness})", fp.dims)
    return _bind_inferred(path, source, None, (), None)


def _bind_inferred(path: Path, source: str, entry: str | None, variants: tuple[str, ...],
                   dims: dict[str, int] | None) -> TargetBinding:
    from skel.harness.infer import HarnessError
    from skel.harness.writer import inferred_spec

    try:
        spec, harness = inferred_spec(path, source, entry, tuple(variants), dims)
    except HarnessError as exc:
        raise NotRecognised(
            f"{path}: no harness can be inferred ({exc}); pass --harness SPEC.py, a file exporting"
            " SPEC = TargetSpec(...) (see README, 'Your own kernel')") from None
    bound = _bind_harness(path, spec)
    shapes = "; ".join(f"{t.name} [{', '.join(t.dims)}]" for t in harness.tensors)
    return TargetBinding(path, bound.family, spec, bound.entry,
                         f"harness inferred from launcher {harness.entry} (oracle: the original kernel, tolerance"
                         f" calibrated; {shapes}; spec {spec})", bound.dims, bound.batch)


def _bind_harness(path: Path, harness: Path) -> TargetBinding:
    from skel.validate.gate import GateInputError, spec_info
    from skel.validate.load import TargetError, resolve_target

    try:
        ref = resolve_target(path, harness)
        spec = spec_info(ref.spec)  # read in a contained worker: the harness is code
    except (TargetError, GateInputError) as exc:
        raise UsageError(str(exc)) from None
    # dims the spec does not give are inferred when a dispatch needs them (dispatch_dims), not at every bind
    return TargetBinding(path, spec.family, ref.spec, spec.entry, f"harness {harness}", tuple(spec.dims), spec.batch)


def dispatch_dims(binding: TargetBinding) -> tuple[tuple[tuple[str, str], ...], str]:
    """The dims a dispatch may read: the binding's own, or for a harness that gives none, those
    ``infer_dims`` reads off its ci inputs (with its note on what it could not read)."""
    if binding.dims or not binding.how.startswith("harness"):
        return binding.dims, ""
    from skel.validate.gate import spec_dims

    return spec_dims(binding.spec)
