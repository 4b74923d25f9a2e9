"""``skel mine``: profile every kernel under some paths, run the detectors, record it all.

Pipeline per file (``prepare`` in the main process, ``analyze`` in workers):
stat -> size limit -> read -> empty / binary check -> text prefilter (``triton`` and
``jit`` for Python, ``__global__`` for CUDA) -> content key -> unchanged since the
last run? reuse the catalog's record : decode -> frontend -> detectors -> catalog.

Static only: kernel files are parsed (``ast`` / tree-sitter), never imported or run.
Every bad input becomes an ``errors`` row with a reason and the run goes on; each
file is one catalog transaction, so an interrupted run leaves a consistent catalog.
Mining is not a check: the exit code is 0 whatever was found (2 for usage errors).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from skel.catalog.records import KernelProfile, StoredFile
from skel.catalog.store import Catalog, Finding, SourceRecord, open_catalog
from skel.miner.cache import cache_key
from skel.miner.fork_parts import map_parts
from skel.miner.interproc import attribute_to_callers
from skel.miner.gc_pause import gc_paused
from skel.miner.sourcefile import UnreadableSource, decode, default_max_bytes, os_reason, too_large
from skel.miner.walk import Candidate, collect
from skel.procs import die_with_parent

POOL_MIN_FILES = 8  # below this a process pool costs more than it saves
MIN_PART_KERNELS = 100  # a file is shared with forked children only with this many kernels a part
# a file is parsed when it holds every marker of one group: Triton kernels; CUDA kernels, or CUDA
# helpers (a header of __device__ functions, whose findings count for the kernels of other files)
_MARKERS = {"triton": ((b"triton", b"jit"),), "cuda": ((b"__global__",), (b"__device__",))}


@dataclass(frozen=True)
class FileOutcome:
    path: str
    status: str  # parsed | cached | skipped (no kernel in it) | error
    kernels: int = 0  # profiles with kind "kernel" (jit device helpers not counted)
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    kernel_file: bool = False  # passed the text prefilter (parsed, cached, or failed to parse)


@dataclass(frozen=True)
class MineReport:
    files: int  # source files looked at (.py and CUDA/C++ files under the paths)
    kernel_files: int  # files that passed the text prefilter
    parsed: int  # files handed to a frontend this run (including those that failed to parse)
    cached: int  # unchanged files served from the catalog
    kernels: int
    instances: tuple[Finding, ...]
    opportunities: tuple[Finding, ...]
    errors: tuple[tuple[str, str], ...]  # (path, reason)
    seconds: float
    catalog: str
    detectors: bool  # False when miner.detectors could not be imported (profiles only)

    def to_json(self) -> dict:
        def row(f: Finding) -> dict:
            return {"skeleton": f.skeleton, "path": f.path, "line": f.line, "kernel": f.kernel}

        return {
            "files": self.files,
            "kernels": self.kernels,
            "instances": [row(f) for f in self.instances],
            "opportunities": [row(f) for f in self.opportunities],
            "errors": [{"path": p, "error": e} for p, e in self.errors],
        }

    def summary(self) -> str:
        lines = [
            f"mined {self.files} files in {self.seconds:.2f} s: {self.kernel_files} with kernels "
            f"({self.parsed} parsed, {self.cached} unchanged), {self.kernels} kernels, "
            f"{len(self.instances)} instances, {len(self.opportunities)} opportunities, {len(self.errors)} errors",
            "(an instance: a kernel that already uses a skeleton's technique; an opportunity: a kernel it could be "
            "applied to; `# skel: ignore[CODE]` comments silence opportunities)",
            f"catalog: {self.catalog}",
        ]
        if not self.detectors:
            lines.append("note: skeleton detectors unavailable (miner.detectors failed to import); profiles only")
        return "\n".join(lines)


@dataclass
class _Prepared:
    cand: Candidate
    key: str | None = None
    text: str | None = None
    size: int | None = None
    mtime: float | None = None
    outcome: FileOutcome | None = None  # decided without parsing
    forget: bool = False  # the catalog knows this path but it no longer holds kernels


# ------------------------------------------------------------------ analysis
def _detectors():
    try:
        from skel.miner.detect import run_detectors
    except ImportError:
        return None
    return run_detectors


# The library of the ``mine()`` run in progress (None outside one): loaded once by the run, before its
# workers fork, so that they inherit it instead of checking it again for every file.
_run_library = None


def _file_detectors():
    """``run(profile, text) -> findings`` for the kernels of one file, or None without detectors.

    The library is loaded once a file (once a run inside ``mine()``), not once a kernel: checking
    that a cached library is still current stats every file of every skeleton folder, which a file
    of thousands of kernels would otherwise pay thousands of times. A library that fails to load
    fails each kernel as before.
    """
    run = _detectors()
    if run is None:
        return None
    library = _run_library or _load_library()
    if library is None:
        return run
    return lambda p, text: run(p, text, library=library)


def _load_library():
    """The shipped library, or None when it does not load (the detectors then report why, per kernel)."""
    from skel.skeletons.library import load_library

    try:
        return load_library()
    except Exception:
        return None


@contextmanager
def _one_library():
    """The library loaded once for a whole ``mine()`` run (its pool workers fork inside)."""
    global _run_library
    outer = _run_library
    _run_library = outer or (_load_library() if _detectors() is not None else None)
    try:
        yield
    finally:
        _run_library = outer


def _frontend(language: str):
    """The language's ``profile_source(text, path) -> profiles``."""
    return _frontend_module(language).profile_source


def _reader(language: str):
    """The language's ``read_source(text, path)``: the parsed file, its kernels still to profile."""
    return _frontend_module(language).read_source


def _frontend_module(language: str):
    if language == "triton":
        from skel.miner import triton_frontend as frontend
    else:
        from skel.miner import cuda_frontend as frontend
    return frontend


def analyze(path: str, text: str, language: str, parts: int = 1
            ) -> tuple[list[KernelProfile], list[Finding], str | None]:
    """Profiles, findings and an error (or None) for one file's text. Never raises.

    ``parts`` > 1: a file of many kernels is profiled and detected in up to that many slices,
    all but one in forked children (``fork_parts``); the result is the same.
    """
    with gc_paused():
        return _analyze(path, text, language, parts)


def _analyze(path: str, text: str, language: str, parts: int
             ) -> tuple[list[KernelProfile], list[Finding], str | None]:
    run = _file_detectors()

    def work(kernels) -> list[tuple[KernelProfile, list[Finding], str | None]]:
        return [(p, *_findings(run, p, text)) for p in source.profiles(kernels)]

    try:
        source = _reader(language)(text, path)
        parts = max(1, min(parts, len(source.kernels) // MIN_PART_KERNELS))
        rows = [row for part in map_parts(work, source.kernels, parts) for row in part]
    except SyntaxError as exc:
        return [], [], f"syntax error at line {exc.lineno}, column {exc.offset}: {exc.msg}"
    except RecursionError:
        return [], [], "too deeply nested for the parser (RecursionError)"
    except ImportError as exc:
        return [], [], f"no {language} frontend available ({exc})"
    except Exception as exc:  # a frontend bug must not stop the run: report it with the file
        return [], [], f"{language} frontend failed: {type(exc).__name__}: {exc}"
    problems = [problem for _, _, problem in rows if problem]
    profiles = [p for p, _, _ in rows]
    # a helper's findings count for its callers (at the call site), then suppression comments apply
    attributed = attribute_to_callers(profiles, [f for _, fs, _ in rows for f in fs], text)
    by_kernel: dict[str, list[Finding]] = {}
    for f in attributed:
        by_kernel.setdefault(f.kernel, []).append(f)
    grouped = [(p, by_kernel.pop(p.name, [])) for p in profiles]
    findings = unsuppressed(text, language, grouped)
    return profiles, findings, "; ".join(problems) or None


def unsuppressed(text: str, language: str, rows: list[tuple[KernelProfile, list[Finding]]]) -> list[Finding]:
    """The findings, less the opportunities a suppression comment (``# skel: ignore[SK001] reason``)
    silences; instances (a technique already used) are evidence and always kept."""
    from skel.miner import suppress as sup

    comments = sup.parse(text)
    if not comments:
        return [f for _, fs in rows for f in fs]
    spans = sup.headers(text, language)
    return [f for p, fs in rows for f in fs
            if f.kind != "opportunity"
            or comments.find(f.skeleton, (f.line,), sup.header_span(spans, p.line, language)) is None]


def _findings(run, p: KernelProfile, text: str) -> tuple[list[Finding], str | None]:
    """One kernel's findings, or a problem when the detectors failed on it."""
    if run is None:
        return [], None
    try:
        return run(p, text), None
    except Exception as exc:
        return [], f"detectors failed on kernel {p.name} (line {p.line}): {type(exc).__name__}: {exc}"


def _analyze_job(args):
    return analyze(*args)


# ------------------------------------------------------------------- prepare
def prepare(cand: Candidate, max_bytes: int | None = None) -> _Prepared:
    """Read one candidate and decide whether it needs parsing (no parsing here).

    At most ``max_bytes`` are read (default: ``SKEL_MAX_BYTES`` or 5 MB); the text prefilter
    runs on the bytes, so a file without kernel markers is never decoded.
    """
    limit = max_bytes or default_max_bytes()
    prep = _Prepared(cand)
    path = cand.path
    try:
        st = os.stat(path)
        prep.size, prep.mtime = st.st_size, st.st_mtime
        if st.st_size > limit:
            return _err(prep, too_large(st.st_size, limit))
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        return _err(prep, os_reason(exc))
    if len(data) > limit:
        return _err(prep, too_large(len(data), limit))
    if not data.strip():
        if cand.explicit:
            return _err(prep, "empty file: nothing to mine" if not data else "blank file: nothing to mine")
        prep.outcome = FileOutcome(path, "skipped")
        prep.forget = True
        return prep
    if cand.explicit or b"\x00" in data:
        # a file named on the command line, or a binary one, that cannot be read as source is an
        # error even without kernel markers; walked files that are merely undecodable are skipped
        try:
            decode(data, cand.language, path)
        except UnreadableSource as exc:
            return _err(prep, exc.entry)
    if not any(all(m in data for m in group) for group in _MARKERS[cand.language]):
        prep.outcome = FileOutcome(path, "skipped")
        prep.forget = True
        return prep
    try:
        prep.text = decode(data, cand.language, path).text  # PEP 263 for Python: a coding cookie is honoured
    except UnreadableSource as exc:
        return _err(prep, exc.entry)
    prep.key = cache_key(data)
    return prep


def _err(prep: _Prepared, reason: str) -> _Prepared:
    prep.outcome = FileOutcome(prep.cand.path, "error", error=reason)
    prep.forget = True  # whatever the catalog said about this path no longer holds
    return prep


# ---------------------------------------------------------------------- mine
def mine(
    paths: Iterable[str],
    catalog: Catalog | str | os.PathLike | None = None,
    jobs: int | None = None,
    force: bool = False,
    max_bytes: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    executor=None,
    on_tally=None,
) -> MineReport:
    """Mine ``paths`` into ``catalog`` (a Catalog, a path, or None for the default catalog).

    ``progress(done, total, path)`` is called after each file. ``force`` re-parses files
    the catalog already holds unchanged. ``executor`` (a ``skel.executor.RayExecutor``) parses the
    files as Ray tasks instead of the local pool (``on_tally(Tally)`` hears how they stand); this
    process still reads every file and is the only one that writes the catalog.
    """
    started = time.perf_counter()
    paths = [str(p) for p in paths]
    cands, walk_errors = collect(paths)
    own = not isinstance(catalog, Catalog)
    cat = open_catalog(catalog) if own else catalog
    try:
        outcomes = _mine_candidates(cands, cat, jobs, force, max_bytes, progress, executor, on_tally)
        _forget_deleted(cat, paths)
    finally:
        if own:
            cat.close()
    errors = [(e.path, e.error) for e in walk_errors] + [(o.path, o.error) for o in outcomes if o.error]
    findings = [f for o in outcomes for f in o.findings]
    return MineReport(
        files=len(cands),
        kernel_files=sum(o.kernel_file for o in outcomes),
        parsed=sum(o.kernel_file and o.status != "cached" for o in outcomes),
        cached=sum(o.status == "cached" for o in outcomes),
        kernels=sum(o.kernels for o in outcomes),
        instances=tuple(f for f in findings if f.kind == "instance"),
        opportunities=tuple(f for f in findings if f.kind == "opportunity"),
        errors=tuple(errors),
        seconds=time.perf_counter() - started,
        catalog=str(cat.path),
        detectors=_detectors() is not None,
    )


def _mine_candidates(cands, cat: Catalog, jobs, force, max_bytes, progress, executor=None, on_tally=None
                     ) -> list[FileOutcome]:
    known = {s.path: s for s in cat.sources()}
    total = len(cands)
    done = 0
    outcomes: dict[str, FileOutcome] = {}
    todo: list[_Prepared] = []

    def finished(o: FileOutcome) -> None:
        nonlocal done
        outcomes[o.path] = o
        done += 1
        if progress:
            progress(done, total, o.path)

    unchanged: list[_Prepared] = []
    for cand in cands:
        prep = prepare(cand, max_bytes)
        rec = known.get(cand.path)
        if prep.outcome is not None:
            if prep.forget and rec is not None:
                cat.forget_source(cand.path)
            finished(prep.outcome)
        elif rec is not None and rec.content_hash == prep.key and not force:
            unchanged.append(prep)
        else:
            todo.append(prep)
    # Unchanged files are answered from the catalog together: a few queries for all of them, not a
    # query (or a scan of the findings) per file. One replaced meanwhile by another writer is parsed.
    stored = cat.stored_files(p.cand.path for p in unchanged)
    for prep in unchanged:
        held = stored.get(prep.cand.path)
        if held is not None and held.source.content_hash == prep.key:
            finished(_cached(held))
        else:
            todo.append(prep)
    if todo:
        with _one_library():  # only when something is parsed: a warm run never loads the library
            _record(cat, todo, jobs, executor, on_tally, finished)
    _link_files(cat, [p for p in unchanged + todo if p.cand.language == "cuda"], outcomes)
    return [outcomes[c.path] for c in cands]


def _link_files(cat: Catalog, preps: list[_Prepared], outcomes: dict[str, FileOutcome]) -> None:
    """The cross-file pass (``crossfile.attribute``) over the run's CUDA files, parsed or unchanged:
    a helper's findings copied to the kernels of other files that reach it. It runs on the findings
    each file has on its own (copies from an earlier run dropped), so a changed header changes its
    includers' copies even when they are unchanged; a file whose copies changed is recorded again."""
    from skel.miner.crossfile import SourceFile, attribute, own_findings

    files = [SourceFile(p.cand.path, p.text, own_findings(outcomes[p.cand.path].findings))
             for p in preps if p.text is not None and outcomes.get(p.cand.path) is not None
             and outcomes[p.cand.path].status in ("parsed", "cached")]
    if not files:
        return
    extra = attribute(files)
    for f in files:
        o = outcomes[f.path]
        findings = tuple(sorted(f.findings + tuple(extra.get(f.path, ())), key=lambda x: (x.line, x.skeleton, x.kind)))
        if set(findings) == set(o.findings):
            continue
        source = cat.source(f.path)
        if source is not None:
            cat.record_file(source, cat.profiles(f.path), findings)
        outcomes[f.path] = replace(o, findings=findings)


def _record(cat: Catalog, todo: list[_Prepared], jobs, executor, on_tally, finished) -> None:
    """Analyse the files of ``todo`` (local pool or Ray) and record each in the catalog as it finishes."""
    jobs_done = _run_jobs(todo, jobs) if executor is None else _ray_jobs(todo, executor, on_tally)
    for prep, (profiles, findings, error) in jobs_done:
        c = prep.cand
        source = SourceRecord(c.path, prep.key, repo=c.repo, mtime=prep.mtime, size=prep.size, error=error)
        try:
            cat.record_file(source, profiles, findings)
        except (ValueError, TypeError) as exc:
            # A profile or finding the catalog cannot store (a frontend/detector bug): keep the
            # file's failure on record instead of stopping the run. CatalogError (an unusable
            # catalog) is not caught: that ends the run with exit status 2.
            error = f"cannot record the results: {exc}"
            profiles, findings = [], []
            cat.record_file(SourceRecord(c.path, prep.key, repo=c.repo, mtime=prep.mtime, size=prep.size,
                                         error=error))
        finished(FileOutcome(c.path, "parsed" if not (error and not profiles) else "error",
                             sum(p.kind == "kernel" for p in profiles), tuple(findings), error, kernel_file=True))


def _forget_deleted(cat: Catalog, paths: list[str]) -> None:
    """Drop catalog entries for files that were under a mined directory and no longer exist."""
    roots = [os.path.join(os.path.abspath(os.path.expanduser(p)), "") for p in paths]
    roots = [r for r in roots if os.path.isdir(r)]
    if not roots:
        return
    for rec in cat.sources():
        if any(rec.path.startswith(r) for r in roots) and not os.path.lexists(rec.path):
            cat.forget_source(rec.path)


def _cached(held: StoredFile) -> FileOutcome:
    rec = held.source
    findings = held.findings if rec.error is None or "detectors failed" in rec.error else ()
    return FileOutcome(rec.path, "cached", held.kernels, findings, rec.error, kernel_file=True)


def _run_jobs(todo: list[_Prepared], jobs: int | None):
    """Yield (prepared, analysis) as files finish; a process pool when there is enough work."""
    jobs = max(1, jobs or os.cpu_count() or 1)
    if jobs == 1 or len(todo) < POOL_MIN_FILES:
        # one file at a time here: a file of many kernels shares its kernels with the idle cores
        for prep in todo:
            yield prep, analyze(prep.cand.path, prep.text, prep.cand.language, parts=jobs)
        return
    _detectors()  # import once before forking so workers inherit it
    import multiprocessing

    ctx = multiprocessing.get_context("fork") if hasattr(os, "fork") else None
    # Big files first: the longest jobs start early and the tail stays short.
    order = sorted(todo, key=lambda p: -len(p.text))
    # Workers die with this process, even when it is killed with SIGKILL (no orphans left waiting
    # on the queue, holding the catalog's files); the pool is forked from this, the waiting, thread.
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx,
                               initializer=die_with_parent, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(_analyze_job, (p.cand.path, p.text, p.cand.language)): p for p in order}
        for fut in as_completed(futures):
            prep = futures[fut]
            try:
                result = fut.result()
            except Exception as exc:  # a worker died (out of memory, killed): report the file, go on
                result = ([], [], f"worker failed: {type(exc).__name__}: {exc}")
            yield prep, result
    except BaseException:
        # Ctrl-C or a catalog failure: drop queued files instead of parsing them all first.
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()


def analyze_task(job: tuple[str, str, str]):
    """A Ray task: one file's analysis (``analyze``), from its path, text and language."""
    return analyze(*job)


def _ray_jobs(todo: list[_Prepared], executor, on_tally=None):
    """Yield (prepared, analysis) as Ray tasks finish, biggest files submitted first. The text travels
    with the task (no shared file system needed); a task that failed after its retries is reported
    with the file, like a worker that died in the local pool."""
    from skel.executor import TaskFailed

    order = sorted(todo, key=lambda p: -len(p.text))
    jobs = [(p.cand.path, p.text, p.cand.language) for p in order]
    for index, result in executor.map(analyze_task, jobs, on_tally=on_tally):
        if isinstance(result, TaskFailed):
            result = ([], [], f"worker failed: {result.error}")
        yield order[index], result
