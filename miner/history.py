"""``skel mine --history``: distil candidate skeletons from the commits that changed kernels.

Per commit (oldest first, merges skipped) and per changed file under the chosen paths
whose old and new blobs both look like kernels (a ``.py`` file with ``triton`` and ``jit``
in the text, or a CUDA/C++ file with ``__global__`` or ``__device__``): both blobs are read
through one ``git cat-file --batch``, parsed (Python with ``ast``; CUDA with tree-sitter,
mirrored as Python syntax trees by ``history_cuda``; each blob once per run), diffed
function by function (``history_edits``), and the edits are
stored in the catalog. Then every stored edit, from every mined repository, is
clustered into ranked patterns (``history_cluster``) that replace the catalog's
candidates.

Incremental: the catalog remembers the last mined commit per repository; the next run
walks only the commits after it, and a run with nothing new reads no blob and changes
nothing. History rewritten under the remembered commit (it is no longer an ancestor)
means a full re-mine of that repository. Nothing from the repository is imported or run.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from skel.catalog.store import Catalog, open_catalog
from skel.miner import history_git as git
from skel.miner.history_cluster import distill
from skel.miner.history_cuda import cuda_module, is_cuda_path
from skel.miner.history_edits import diff_files
from skel.miner.history_patterns import MIN_SUPPORT, MinedEdit, Pattern

_MARKERS = (b"triton", b"jit")
_PARSE_CACHE = 256  # blobs kept parsed: each is the "after" of one commit and the "before" of the next


@dataclass(frozen=True)
class HistoryReport:
    repo: str
    head: str
    since: str | None  # the commit mined up to last time (None: from the beginning)
    commits: int  # commits walked this run
    kernel_commits: int  # of them, commits that changed a kernel function
    files: int  # kernel files diffed
    kernel_edits: int  # (commit, file, function) with at least one edit
    blobs: int  # blobs read
    errors: tuple[tuple[str, str, str], ...]  # (commit, path, reason): a version that does not parse
    candidates: tuple[Pattern, ...]  # every candidate now in the catalog, best first
    seconds: float
    catalog: str

    def to_json(self) -> dict:
        return {
            "repo": self.repo, "head": self.head, "since": self.since, "commits": self.commits,
            "kernel_commits": self.kernel_commits, "files": self.files, "kernel_edits": self.kernel_edits,
            "blobs": self.blobs, "seconds": round(self.seconds, 3), "catalog": self.catalog,
            "errors": [{"commit": c, "path": p, "error": e} for c, p, e in self.errors],
            "candidates": [{"code": p.code, **p.to_json()} for p in self.candidates],
        }

    def summary(self) -> str:
        since = f" since {self.since[:10]}" if self.since else ""
        return (f"history of {self.repo}{since}: {self.commits} commits walked in {self.seconds:.2f} s, "
                f"{self.kernel_commits} changed kernels ({self.files} files diffed, {self.kernel_edits} kernel edits, "
                f"{self.blobs} blobs read, {len(self.errors)} unparsable versions); "
                f"{len(self.candidates)} candidate skeletons\ncatalog: {self.catalog}")


def repo_id(path: Path) -> str:
    """How a repository is named in the catalog: its absolute git directory for a bare one, else its top level."""
    p = Path(path).resolve()
    try:
        top = git._git(p, "rev-parse", "--show-toplevel").decode().strip()
    except git.GitError:
        top = ""
    return top or str(p)


def mine_history(
    path: str | os.PathLike,
    catalog: Catalog | str | os.PathLike | None = None,
    paths: tuple[str, ...] = (),
    rev: str = "HEAD",
    max_commits: int | None = None,
    min_support: int = MIN_SUPPORT,
    force: bool = False,
    repo_name: str | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> HistoryReport:
    """Mine the history of ``path`` (a checkout or a bare repository) into ``catalog``.

    ``paths`` limit the walk to those folders/files (git pathspecs relative to the top);
    ``max_commits`` to the newest N commits on the first run.
    """
    started = time.perf_counter()
    root = Path(path)
    if not git.is_git_repo(root):
        raise git.GitError(f"{root}: not a git repository (history mining needs one)")
    repo = repo_name or repo_id(root)
    head = git.head(root, rev)
    own = not isinstance(catalog, Catalog)
    cat = open_catalog(catalog) if own else catalog
    try:
        since = None if force else cat.history_head(repo)
        reset = force or (since is not None and not git.is_ancestor(root, since, head))
        if reset:
            since = None
        if since == head:
            # Nothing new: no blob is read and the candidates stay as they are.
            cands = _stored_patterns(cat)
            return HistoryReport(repo, head, since, 0, 0, 0, 0, 0, (), cands, time.perf_counter() - started, str(cat.path))
        walked = git.commits(root, head, since=since, paths=paths, max_count=max_commits if since is None else None)
        mined, stats = _walk(root, repo, walked, paths, progress)
        cat.record_history(repo, head, len(walked), mined, reset=reset)
        patterns = distill(cat.history_edits(), min_support=min_support)
        cat.store_candidates(patterns)
        return HistoryReport(
            repo, head, since, len(walked), stats["kernel_commits"], stats["files"], len(mined), stats["blobs"],
            tuple(stats["errors"]), tuple(patterns), time.perf_counter() - started, str(cat.path),
        )
    finally:
        if own:
            cat.close()


def text_hash(text: str) -> str:
    """sha256 of a kernel file's text as `skel apply` hashes its target (newlines as Python reads them)."""
    return hashlib.sha256(text.replace("\r\n", "\n").replace("\r", "\n").encode()).hexdigest()


def _stored_patterns(cat: Catalog) -> tuple[Pattern, ...]:
    return tuple(_Stored(c) for c in cat.candidates())


class _Stored:
    """A stored candidate seen through the ``Pattern`` attributes a report uses."""

    def __init__(self, c):
        self.code, self._c = c.code, c
        self.key = c.pattern["key"]

    def to_json(self) -> dict:
        return self._c.pattern


def _selected(path: str, paths: tuple[str, ...]) -> bool:
    if not (path.endswith(".py") or is_cuda_path(path)):
        return False
    return not paths or any(path == p or path.startswith(p.rstrip("/") + "/") for p in paths)


def _walk(root: Path, repo: str, walked: list[git.Commit], paths, progress):
    stats = {"kernel_commits": 0, "files": 0, "blobs": 0, "errors": []}
    parsed: dict[str, ast.Module | None | str] = {}
    hashes: dict[str, str] = {}  # blob id -> text_hash of its content (held-out checks need it)
    mined: list[MinedEdit] = []

    with git.BlobReader(root) as reader:
        def tree(blob: str, commit: str, where: str):
            if blob in parsed:
                return parsed[blob]
            data = reader.read(blob)
            stats["blobs"] += 1
            if data is not None:
                hashes[blob] = text_hash(data.decode("utf-8", errors="replace"))
            result = None
            cuda = is_cuda_path(where)
            if data is not None and (b"__global__" in data or b"__device__" in data if cuda
                                     else all(m in data for m in _MARKERS)):
                try:
                    text = data.decode("utf-8-sig")
                    result = cuda_module(text) if cuda else ast.parse(text, filename=where)
                except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError) as exc:
                    stats["errors"].append((commit, where, f"{type(exc).__name__}: {exc}"))
            if len(parsed) >= _PARSE_CACHE:
                parsed.pop(next(iter(parsed)))
            parsed[blob] = result
            return result

        for n, c in enumerate(walked, 1):
            touched = False
            for ch in c.changes:
                if not (ch.old_blob and ch.new_blob and _selected(ch.new_path, paths)):
                    continue
                old = tree(ch.old_blob, c.parent or "", ch.old_path)
                new = tree(ch.new_blob, c.sha, ch.new_path)
                if old is None or new is None:
                    continue
                stats["files"] += 1
                sources = tuple(hashes[b] for b in (ch.old_blob, ch.new_blob) if b in hashes)
                for ke in diff_files(ch.new_path, old, new):
                    ke = dataclasses.replace(ke, sources=sources)
                    mined.append(MinedEdit(repo, c.sha, c.message, c.date, ke))
                    touched = True
            stats["kernel_commits"] += touched
            if progress:
                progress(n, len(walked), c.sha[:10])
    return mined, stats
