"""``skel mine --variants A B ...``: distil candidate skeletons from kernels that implement one op in several places.

Each PATH (a file or a folder) is one *tree*: an upstream library, one of its backends, a
vendored copy in another project. Every top-level ``@...jit`` function of every Triton
file (text prefilter, then ``ast``; nothing is imported or run) and every ``__global__``
function of every CUDA/C++ file (tree-sitter, mirrored by ``history_cuda``) is a kernel site. A kernel
of a later tree is *aligned* with at most one kernel of an earlier tree when they are the
same op:

- names: equal after stripping leading underscores and the words that name a backend or
  a role rather than an op (``kernel``, ``npu``, ``ascend``, ``triton``, ...), or similar
  (``difflib`` ratio >= NAME_MIN);
- parameters: Jaccard similarity of the parameter names >= PARAMS_MIN, or the same number
  of parameters (renamed);
- bodies: ``difflib`` ratio of the statement shapes (local names blanked) >= BODY_MIN.

The best-scoring one-to-one pairs win. Each aligned pair is diffed with the history edit
machinery (``history_edits.diff_functions``: renames and moved code are not edits), from
the earlier tree's kernel (the reference) to the later one (the variant): PATH order is
the direction. The edits are stored as the pseudo-repository ``variants:<PATHs>`` with one
"commit" per pair whose message is the provenance ``variant pair: A:line vs B:line``, and
the candidates are re-distilled from every stored history and variant edit together. A
pair is deliberate evidence on its own: a variant edit needs no second occurrence
(``VARIANT_MIN_SUPPORT``). Re-running on unchanged files does nothing.
"""
from __future__ import annotations

import ast
import copy
import dataclasses
import difflib
import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from skel.catalog.store import Catalog, open_catalog
from skel.miner.history import text_hash
from skel.miner.history_cluster import distill
from skel.miner.history_cuda import cuda_module, is_cuda_path
from skel.miner.history_edits import (
    Edit, KernelEdit, _diff_root, _dump, _shape, _src, _tokens, diff_functions, functions, is_jit, local_names,
)
from skel.miner.history_patterns import MIN_SUPPORT, VARIANT_PREFIX, MinedEdit, Pattern

NAME_MIN = 0.85
PARAMS_MIN = 0.6
BODY_MIN = 0.5
# Variants of one op differ far more than one commit changes a kernel (a backend restructures
# its loops); the history limit (MAX_CHANGED, 24) would call most pairs rewritten wholesale.
# Whole compounds that large are not clustered anyway (MAX_EDITS), but their single
# replacements are, which is where a variant's local rewrites show.
VARIANT_MAX_CHANGED = 400
ROLE_WORDS = frozenset({"kernel", "kernels", "triton", "jit", "impl", "npu", "ascend", "cuda", "gpu", "xpu", "rocm",
                        "hip", "tl", "opt", "optimized", "v1", "v2", "v3", "new", "old"})
_SKIP_DIRS = frozenset({"__pycache__", "node_modules", "site-packages"})


@dataclass(frozen=True)
class KernelSite:
    tree: int  # index of the PATH it was found under
    path: str  # as the user gave it (a folder PATH joined with the file's path inside it)
    line: int
    name: str
    params: tuple[str, ...]
    source_hash: str  # text_hash of the whole file
    fn: ast.FunctionDef = dataclasses.field(compare=False, repr=False)

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


@dataclass(frozen=True)
class VariantPair:
    reference: KernelSite
    variant: KernelSite
    name_similarity: float
    param_similarity: float
    body_similarity: float
    edits: int  # edits found between them (0: identical modulo formatting and renames, or rewritten wholesale)

    @property
    def provenance(self) -> str:
        return f"variant pair: {self.reference.where} vs {self.variant.where}"

    def to_json(self) -> dict:
        return {"reference": self.reference.where, "reference_kernel": self.reference.name,
                "variant": self.variant.where, "variant_kernel": self.variant.name,
                "name_similarity": round(self.name_similarity, 3), "param_similarity": round(self.param_similarity, 3),
                "body_similarity": round(self.body_similarity, 3), "edits": self.edits}


@dataclass(frozen=True)
class VariantReport:
    repo: str  # the pseudo-repository the edits are stored under
    trees: tuple[str, ...]
    files: int
    kernels: int
    pairs: tuple[VariantPair, ...]
    kernel_edits: int
    errors: tuple[tuple[str, str], ...]  # (path, reason)
    unchanged: bool  # nothing changed since the last run: nothing was re-mined
    candidates: tuple[Pattern, ...]
    seconds: float
    catalog: str

    def to_json(self) -> dict:
        return {"repo": self.repo, "trees": list(self.trees), "files": self.files, "kernels": self.kernels,
                "pairs": [p.to_json() for p in self.pairs], "kernel_edits": self.kernel_edits,
                "errors": [{"path": p, "error": e} for p, e in self.errors], "unchanged": self.unchanged,
                "seconds": round(self.seconds, 3), "catalog": self.catalog,
                "candidates": [{"code": c.code, **c.to_json()} for c in self.candidates]}

    def summary(self) -> str:
        differing = sum(p.edits > 0 for p in self.pairs)
        return (f"variants of {len(self.trees)} trees: {self.files} kernel files, {self.kernels} kernels, "
                f"{len(self.pairs)} aligned pairs ({differing} with edits, {self.kernel_edits} kernel edits), "
                f"{len(self.errors)} unreadable files{', unchanged since the last run' if self.unchanged else ''} "
                f"in {self.seconds:.2f} s; {len(self.candidates)} candidate skeletons in the catalog\n"
                f"catalog: {self.catalog}")


# ------------------------------------------------------------------- sites
def op_words(name: str) -> str:
    """The op a kernel name names: lower case, role and backend words dropped (``_foo_kernel_npu`` -> ``foo``)."""
    words = [w for w in re.split(r"_+", name.strip("_").lower()) if w and w not in ROLE_WORDS]
    return "_".join(words)


def _files(root: Path):
    if root.is_file():
        yield root, str(root)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
        for f in sorted(filenames):
            if f.endswith(".py") or is_cuda_path(f):
                p = Path(dirpath) / f
                yield p, str(root / p.relative_to(root))


def collect(paths: list[str | os.PathLike]) -> tuple[list[KernelSite], int, list[tuple[str, str]]]:
    """Every jit kernel under each PATH; also the number of kernel files and the unreadable ones."""
    sites, files, errors = [], 0, []
    for tree, root in enumerate(paths):
        root = Path(root)
        if not root.exists():
            errors.append((str(root), "does not exist"))
            continue
        for path, shown in _files(root):
            try:
                data = path.read_bytes()
            except OSError as exc:
                errors.append((shown, f"cannot read ({exc.strerror})"))
                continue
            cuda = is_cuda_path(shown)
            if not (b"__global__" in data if cuda else b"triton" in data and b"jit" in data):
                continue
            try:
                text = data.decode("utf-8")
                module = cuda_module(text) if cuda else ast.parse(text, filename=shown)
            except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError) as exc:
                errors.append((shown, f"{type(exc).__name__}: {exc}"))
                continue
            if module is None:
                continue
            files += 1
            digest = text_hash(text)
            for fn in functions(module).values():
                if is_jit(fn) or any(ast.unparse(d) == "cuda_global" for d in fn.decorator_list):
                    params = tuple(a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs)
                    sites.append(KernelSite(tree, shown, fn.lineno, fn.name, params, digest, fn))
    return sites, files, errors


# --------------------------------------------------------------- alignment
def _body(site: KernelSite) -> list[str]:
    names = local_names(site.fn)
    return [_shape(t.node, names) for t in _tokens(site.fn)]


def similarity(a: KernelSite, b: KernelSite) -> tuple[float, float, float] | None:
    """(name, params, body) similarities when ``a`` and ``b`` are the same op, else None."""
    oa, ob = op_words(a.name), op_words(b.name)
    name = 1.0 if oa == ob else difflib.SequenceMatcher(None, oa, ob, autojunk=False).ratio()
    if name < NAME_MIN:
        return None
    pa, pb = set(a.params), set(b.params)
    params = len(pa & pb) / max(len(pa | pb), 1)
    if params < PARAMS_MIN and len(a.params) != len(b.params):
        return None
    body = difflib.SequenceMatcher(None, _body(a), _body(b), autojunk=False).ratio()
    if body < BODY_MIN:
        return None
    return name, params, body


def align(sites: list[KernelSite]) -> list[tuple[KernelSite, KernelSite, tuple[float, float, float]]]:
    """One-to-one (reference, variant) pairs across trees (reference from the earlier PATH), best first."""
    scored = []
    for b in sites:
        for a in sites:
            if a.tree < b.tree:
                sim = similarity(a, b)
                if sim is not None:
                    scored.append((sum(sim), a, b, sim))
    scored.sort(key=lambda t: (-t[0], t[1].where, t[2].where))
    used_a, used_b, out = set(), set(), []
    for _, a, b, sim in scored:
        if a.where in used_a or b.where in used_b:
            continue
        used_a.add(a.where)
        used_b.add(b.where)
        out.append((a, b, sim))
    out.sort(key=lambda t: (t[1].where, t[0].where))
    return out


def pair_edits(a: KernelSite, b: KernelSite, repo: str) -> list[MinedEdit]:
    """The edits from reference ``a`` to variant ``b`` as one mined kernel edit (none when identical)."""
    # The variant's own kernel name is not an edit: diff it under the reference's name.
    fb = copy.copy(b.fn)
    fb.name = a.fn.name
    for attr in [k for k in vars(fb) if k.startswith("_skel_")]:
        delattr(fb, attr)  # results history_edits caches on a node belong to the original
    if _dump(a.fn) == _dump(fb):
        return []
    names = local_names(a.fn) | local_names(fb)
    edits = repair(diff_functions(a.fn, fb, names, VARIANT_MAX_CHANGED))
    if not edits:
        return []
    ke = KernelEdit(b.path, b.name, b.line, True, tuple(sorted(names)), tuple(edits), (a.source_hash, b.source_hash))
    where = f"{a.where} vs {b.where}"
    return [MinedEdit(repo, where, f"variant pair: {where}", "", ke)]


REPAIR_MIN = 0.6  # text similarity for a deleted and an inserted assignment to be one replaced statement


def repair(edits: list[Edit]) -> list[Edit]:
    """Turn a deleted and an inserted assignment to the same target into one replacement.

    The history diff pairs statements only within one block nesting; a variant often keeps
    a statement but moves it under another loop or branch (the backend restructured the
    kernel), which leaves a delete and an insert where the statement itself changed a little.
    Each deleted assignment is paired with the most similar inserted one to the same
    target (``difflib`` ratio >= REPAIR_MIN), and the pair is reduced to the smallest
    differing expression like any replacement. Identical statements stay moved, not edited.
    """
    def target(e: Edit, text: str):
        try:
            node = ast.parse(text).body[0]
        except SyntaxError:
            return None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            return _dump(node.targets[0]), node
        return None, None

    inserts = [(i, *target(e, e.after)) for i, e in enumerate(edits) if e.kind == "insert"]
    used: set[int] = set()
    out: list[Edit] = []
    replaced: set[int] = set()
    for e in edits:
        if e.kind != "delete":
            continue
        key, old = target(e, e.before)
        if key is None:
            continue
        best = max(((difflib.SequenceMatcher(None, e.before, edits[i].after, autojunk=False).ratio(), i, new)
                    for i, k, new in inserts if k == key and i not in used), default=None, key=lambda t: t[0])
        if best is None or best[0] < REPAIR_MIN or e.before == edits[best[1]].after:
            continue
        _, i, new = best
        used.add(i)
        replaced.add(id(e))
        rb, ra = _diff_root(old, new)
        out.append(Edit("replace", _src(rb), _src(ra), edits[i].line, isinstance(rb, ast.stmt), edits[i].nesting))
    out += [e for n, e in enumerate(edits) if n not in used and id(e) not in replaced]
    out.sort(key=lambda e: (e.line, e.kind, e.before, e.after))
    return out


# -------------------------------------------------------------------- mine
def variant_repo(paths) -> str:
    return VARIANT_PREFIX + ",".join(str(Path(p).resolve()) for p in paths)


def mine_variants(paths: list[str | os.PathLike], catalog: Catalog | str | os.PathLike | None = None,
                  min_support: int = MIN_SUPPORT, force: bool = False) -> VariantReport:
    """Align the kernels of ``paths`` (two or more trees), store their edits, re-distil the catalog's candidates.

    ``min_support`` applies to history clusters re-distilled alongside (variant edits need one pair).
    """
    started = time.perf_counter()
    if len(paths) < 2:
        raise ValueError("variant mining needs two or more PATHs (the reference first, then its variants)")
    repo = variant_repo(paths)
    sites, files, errors = collect(paths)
    state = hashlib.sha256("\n".join(sorted(f"{s.tree}:{s.path}:{s.source_hash}" for s in sites)).encode()).hexdigest()
    own = not isinstance(catalog, Catalog)
    cat = open_catalog(catalog) if own else catalog
    try:
        pairs, mined = [], []
        for a, b, (n, p, body) in align(sites):
            found = pair_edits(a, b, repo)
            mined += found
            pairs.append(VariantPair(a, b, n, p, body, sum(len(m.kernel_edit.edits) for m in found)))
        unchanged = not force and cat.history_head(repo) == state
        if unchanged:
            from skel.miner.history import _stored_patterns

            cands = _stored_patterns(cat)
        else:
            cat.record_history(repo, state, len(pairs), mined, reset=True)
            cands = tuple(distill(cat.history_edits(), min_support=min_support))
            cat.store_candidates(cands)
        return VariantReport(repo, tuple(str(p) for p in paths), files, len(sites), tuple(pairs), len(mined),
                             tuple(errors), unchanged, tuple(cands), time.perf_counter() - started, str(cat.path))
    finally:
        if own:
            cat.close()
