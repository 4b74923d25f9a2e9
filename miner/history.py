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

Resumable: each walked commit is committed to the catalog with its edits and the run's
progress (one transaction per commit), so a run that is killed keeps every commit it
finished; the next run walks the same range again from where it stopped (checked: the
commit it stopped at must be the same one at the same place), and ends with the catalog
an uninterrupted run would have left. The head moves, and the candidates are distilled,
only when the whole range was walked.
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

from skel.catalog.candidates import UNKNOWN_HEAD, HistoryProgress
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
    executor=None,
    on_tally=None,
) -> HistoryReport:
    """Mine the history of ``path`` (a checkout or a bare repository) into ``catalog``.

    ``paths`` limit the walk to those folders/files (git pathspecs relative to the top);
    ``max_commits`` to the newest N commits on the first run. ``executor`` (a
    ``skel.executor.RayExecutor``) diffs runs of consecutive commits as Ray tasks (the repository must be
    at the same path on every node); this process records them in commit order, as the local walk does.
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
        plan = _plan(cat, root, repo, head, paths, max_commits, force)
        if plan is None:
            # Nothing new: no blob is read and the candidates stay as they are (unless a stopped run left
            # them behind its edits).
            cands = _distill(cat, min_support) if cat.candidates_stale() else _stored_patterns(cat)
            since = cat.history_head(repo)
            return HistoryReport(repo, head, since, 0, 0, 0, 0, 0, (), cands, time.perf_counter() - started, str(cat.path))
        first_since, stats, walked_now = plan.since, _Stats(), 0
        while plan is not None:
            todo = plan.walked[plan.skip:]
            if progress:
                progress(plan.skip, len(plan.walked), "")
            walk = (_walk(root, repo, todo, paths, stats) if executor is None
                    else _walk_tasks(executor, root, repo, todo, paths, stats, on_tally))
            for n, (commit, mined) in enumerate(walk, plan.skip + 1):
                cat.record_commit(repo, HistoryProgress(plan.since, plan.target, n, commit.sha, tuple(paths)), mined,
                                  reset=plan.reset and n == 1)
                if progress:
                    progress(n, len(plan.walked), commit.sha[:10])
            cat.finish_history(repo, plan.target, len(plan.walked), reset=plan.reset, forget=plan.reset and not todo)
            walked_now += len(todo)
            # A resumed walk ends at the target of the run that was stopped; go on from there to ``head``.
            plan = None if plan.target == head else _plan(cat, root, repo, head, paths, max_commits, False)
        patterns = _distill(cat, min_support)
        return HistoryReport(
            repo, head, first_since, walked_now, stats.kernel_commits, stats.files, stats.kernel_edits, stats.blobs,
            tuple(stats.errors), patterns, time.perf_counter() - started, str(cat.path),
        )
    finally:
        if own:
            cat.close()


@dataclass(frozen=True)
class _Plan:
    since: str | None  # the walk is since..target (None: from the first commit)
    target: str
    walked: list  # its commits, oldest first
    skip: int  # how many of them a stopped run already recorded
    reset: bool  # the repository's stored edits are replaced (with the first commit walked)


def _plan(cat: Catalog, root: Path, repo: str, head: str, paths, max_commits, force) -> _Plan | None:
    """The walk to do next, or None when there is nothing to walk.

    A run that was stopped resumes its own walk (same ``since`` and target) after its last finished
    commit, provided the walk still has that commit at that place; otherwise the repository is
    re-walked from the start (``reset``: its edits are replaced).
    """
    stopped = None if force else cat.history_progress(repo)
    if stopped is not None:
        try:
            walked = git.commits(root, stopped.target, since=stopped.since, paths=paths,
                                 max_count=max_commits if stopped.since is None else None)
        except git.GitError:  # the stopped run's commits are gone (history rewritten and pruned)
            walked = []
        same = stopped.paths == tuple(paths) and 1 <= stopped.done <= len(walked)
        if same and walked[stopped.done - 1].sha == stopped.last:
            return _Plan(stopped.since, stopped.target, walked, stopped.done, False)
        return _Plan(None, head, git.commits(root, head, paths=paths, max_count=max_commits), 0, True)
    known = None if force else cat.history_head(repo)
    since = known or None
    reset = force or known == UNKNOWN_HEAD or (since is not None and not git.is_ancestor(root, since, head))
    if reset:
        since = None
    if since == head:
        return None
    walked = git.commits(root, head, since=since, paths=paths, max_count=max_commits if since is None else None)
    return _Plan(since, head, walked, 0, reset)


def _distill(cat: Catalog, min_support: int) -> tuple[Pattern, ...]:
    patterns = distill(cat.history_edits(), min_support=min_support)
    cat.store_candidates(patterns)
    return tuple(patterns)


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


@dataclass
class _Stats:
    kernel_commits: int = 0
    files: int = 0
    kernel_edits: int = 0
    blobs: int = 0
    errors: list = dataclasses.field(default_factory=list)


def _walk(root: Path, repo: str, walked: list[git.Commit], paths, stats: _Stats):
    """(commit, its MinedEdits) for each commit of ``walked``, in order; ``stats`` counts as it goes."""
    parsed: dict[str, ast.Module | None | str] = {}
    hashes: dict[str, str] = {}  # blob id -> text_hash of its content (held-out checks need it)

    with git.BlobReader(root) as reader:
        def tree(blob: str, commit: str, where: str):
            if blob in parsed:
                return parsed[blob]
            data = reader.read(blob)
            stats.blobs += 1
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
                    stats.errors.append((commit, where, f"{type(exc).__name__}: {exc}"))
            if len(parsed) >= _PARSE_CACHE:
                parsed.pop(next(iter(parsed)))
            parsed[blob] = result
            return result

        for c in walked:
            mined: list[MinedEdit] = []
            for ch in c.changes:
                if not (ch.old_blob and ch.new_blob and _selected(ch.new_path, paths)):
                    continue
                old = tree(ch.old_blob, c.parent or "", ch.old_path)
                new = tree(ch.new_blob, c.sha, ch.new_path)
                if old is None or new is None:
                    continue
                stats.files += 1
                sources = tuple(hashes[b] for b in (ch.old_blob, ch.new_blob) if b in hashes)
                for ke in diff_files(ch.new_path, old, new):
                    mined.append(MinedEdit(repo, c.sha, c.message, c.date, dataclasses.replace(ke, sources=sources)))
            stats.kernel_commits += bool(mined)
            stats.kernel_edits += len(mined)
            yield c, mined


CHUNK_COMMITS = 32  # commits per Ray task: long enough to reuse parsed blobs, short enough to spread a repository


def walk_task(job: tuple[str, str, list, tuple]) -> tuple[list, _Stats]:
    """A Ray task: ``_walk`` over one run of consecutive commits; (commit, its MinedEdits) pairs and the counts."""
    root, repo, commits, paths = job
    stats = _Stats()
    return list(_walk(Path(root), repo, commits, paths, stats)), stats


def _walk_tasks(executor, root: Path, repo: str, walked: list, paths, stats: _Stats, on_tally=None):
    """``_walk`` as Ray tasks of CHUNK_COMMITS commits each, yielded in commit order as soon as every earlier
    chunk is in (later ones wait here), so the catalog is written exactly as by the local walk. A chunk whose
    task failed after its retries stops the run; the commits recorded before it stay, and the next run resumes."""
    from skel.executor import TaskFailed

    chunks = [walked[i:i + CHUNK_COMMITS] for i in range(0, len(walked), CHUNK_COMMITS)]
    jobs = [(str(root), repo, chunk, tuple(paths)) for chunk in chunks]
    arrived: dict[int, tuple[list, _Stats]] = {}
    following = 0
    for index, result in executor.map(walk_task, jobs, on_tally=on_tally):
        if isinstance(result, TaskFailed):
            first = chunks[index][0].sha[:10]
            raise git.GitError(f"{root}: the Ray task diffing commits from {first} failed ({result.error}); "
                               "what was walked before it is recorded: run again to resume")
        arrived[index] = result
        while following in arrived:
            pairs, part = arrived.pop(following)
            for field in ("kernel_commits", "files", "kernel_edits", "blobs"):
                setattr(stats, field, getattr(stats, field) + getattr(part, field))
            # a blob that fails to parse at a chunk's edge is read (and reported) by both chunks
            stats.errors.extend(e for e in part.errors if e not in stats.errors)
            yield from pairs
            following += 1
