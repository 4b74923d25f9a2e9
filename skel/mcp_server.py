"""The skel MCP server (stdio): the catalog and the gate as tools a coding agent can call.

Built on the official ``mcp`` SDK (``mcp.server.mcpserver.MCPServer``, mcp >= 2). This module
imports ``mcp`` at the top, so only ``skel mcp`` imports it (the GPU machine has no ``mcp``).

Tools: every parameter described and typed, enumerated where its values are a fixed set (category, target,
lifecycle, family, require) and checked (a code's pattern, a budget >= 1): a value outside is an error, never
an empty answer. Every tool declares annotations (read-only or not; none destructive) and an output schema,
and returns structured content (``catalog_prompt``: {"result": Markdown}); the two long tools
(validate_candidate, apply_skeleton) send progress notifications from the child's progress lines.
  list_skeletons(category, target, lifecycle, family)   the library, filtered (AND)
  show_skeleton(code)                                    metadata, docs, examples, evidence
  search_skeletons(text)                                 ranked by hits, all words must match
  match_kernel(path)                                     every skeleton's conditions on every kernel
  validate_candidate(target, candidate, shapes, spec, require)   runs `skel validate --json`
  apply_skeleton(target, skeleton, dry_run=True, unsafe=False)  runs `skel apply --skeleton CODE --json`
  catalog_prompt(path, budget)                           the agent brief (`skel catalog prompt`)
Resources: ``skel://skeleton/SK001`` ... the text `skel catalog show CODE` prints.

Trust: validate_candidate and apply_skeleton (when not a dry run) execute Python code: the target, its
spec and the candidate. They take paths only under the server's workspace root (``skel mcp
--workspace DIR``, default the directory it was started in; symlinks are resolved first), and the
code runs in the gate's contained workers (see the README's trust model). The other tools read
files statically and never execute them.

Errors: a tool that cannot do what it was asked raises ``ToolError`` with what and where (unknown
code, missing file, bad budget...); the SDK returns it as a result with ``isError`` set and the
server keeps serving. Validation and apply run in a child process (``python -m skel``), so
whatever the candidate kernel does (crash, hang, print) cannot take the server or its stdout
down; they keep the CLI's exit codes in the result (1 = rejected is an answer, not an error).
"""
# no `from __future__ import annotations`: the tools' signatures use types built at run time (the library's families)

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from skel.skeletons.library import (CATEGORIES, LIFECYCLES, TARGETS, Library, LibraryError, Skeleton, default_root,
                                    load_library)
from skel.errors import UsageError
from skel.procs import child_env

INSTRUCTIONS = """\
skel matches optimization skeletons (named, machine-checked GPU kernel transformations) to a
Triton or CUDA kernel file and judges candidate rewrites. Start with catalog_prompt(path) for a
brief of what applies and why, change the kernel, then validate_candidate(target, candidate):
numerics always, speed only on a GPU. Skeleton docs are resources skel://skeleton/CODE."""

CHILD_TIMEOUT_S = 900.0


class SkelTools:
    """The tools' logic, independent of the MCP plumbing (testable as plain calls)."""

    def __init__(self, library_root: Path | None = None, catalog: Path | None = None, cwd: Path | None = None,
                 workspace: Path | None = None):
        self.library_root = library_root
        self.catalog = catalog
        self.cwd = cwd
        self.workspace = Path(workspace or cwd or ".").resolve()

    # ------------------------------------------------------------------ library
    def library(self) -> Library:
        extra = tuple(self.library_root) if isinstance(self.library_root, (tuple, list)) else ()
        root = None if extra else (self.library_root or default_root())
        try:
            return load_library(root, extra)  # per call (cached by mtimes): a skeleton edited on disk shows up at once
        except LibraryError as exc:
            raise ToolError(f"the skeleton library at {root} has problems (run `skel catalog check`):\n{exc}") from None

    def skeleton(self, code: str) -> Skeleton:
        lib = self.library()
        sk = lib.get(code or "")
        if sk is None:
            raise ToolError(f"no skeleton {code!r} in {lib.root} (codes: {', '.join(s.code for s in lib)})")
        return sk

    def evidence(self, codes: list[str]) -> dict[str, dict]:
        from skel.catalog import store

        path = store.resolve_catalog_path(self.catalog)
        if not path.exists():
            return {c: store.Evidence.empty(c).to_json() for c in codes}
        with store.open_catalog(path) as cat:
            return {c: cat.evidence(c).to_json() for c in codes}

    def list_skeletons(self, category: str | None, target: str | None, lifecycle: str | None,
                       family: str | None) -> dict:
        chosen = [s for s in self.library()
                  if (not category or s.category == category) and (not target or target in s.targets)
                  and (not lifecycle or s.lifecycle == lifecycle) and (not family or family in s.families)]
        ev = self.evidence([s.code for s in chosen])
        return {"skeletons": [
            {"code": s.code, "name": s.name, "title": s.title, "category": s.category, "lifecycle": s.lifecycle,
             "safety": s.safety, "availability": s.availability, "targets": list(s.targets),
             "families": list(s.families),
             "evidence_summary": {k: v for k, v in ev[s.code].items() if k != "items"}}
            for s in chosen]}

    def show_skeleton(self, code: str) -> dict:
        sk = self.skeleton(code)
        ev = self.evidence([sk.code])[sk.code]
        data = sk.to_json()
        data.pop("folder", None)  # where the library lies on this machine says nothing to an agent
        data.update(docs=dict(sk.docs), before=sk.before, after=sk.after, evidence=ev)
        return data

    def skeleton_markdown(self, code: str) -> str:
        from skel.commands.catalog import render_show

        sk = self.skeleton(code)
        return render_show(sk, self.evidence([sk.code])[sk.code]) + "\n"

    def search_skeletons(self, text: str) -> dict:
        from skel.commands.catalog import _haystack

        words = [w.lower() for w in (text or "").split()]
        if not words:
            raise ToolError("search_skeletons: give at least one word to search for")
        scored = []
        for sk in self.library():
            hay = _haystack(sk)
            counts = [hay.count(w) for w in words]
            if all(counts):
                bonus = sum(10 for w in words if w in f"{sk.name} {sk.title} {sk.code}".lower())
                scored.append((sum(counts) + bonus, sk))
        scored.sort(key=lambda t: (-t[0], t[1].code))
        return {"query": text, "results": [{"code": s.code, "name": s.name, "title": s.title, "score": n}
                                           for n, s in scored]}

    # ------------------------------------------------------------------ kernels
    def match_kernel(self, path: str) -> dict:
        """`skel match PATH --json`, computed in this process (static: nothing is imported or run)."""
        from skel.miner.match import match_file

        report = match_file(self._path(path), library=self.library())
        return {"path": path, "applicable": sorted({a.skeleton for k in report.kernels for a in k.applicable}),
                **report.to_json()}

    def catalog_prompt(self, path: str, budget: int | None) -> str:
        from skel.pipeline.prompt import build_brief, render_markdown
        from skel.pipeline.prompt_budget import BudgetError, fit_budget

        if budget is not None and budget < 1:
            raise ToolError(f"budget must be a positive number of tokens, got {budget}")
        brief = build_brief(path, self.library(), self.catalog)
        try:
            return render_markdown(fit_budget(brief, budget))
        except BudgetError as exc:
            raise ToolError(str(exc)) from None

    def validate_candidate(self, target: str, candidate: str, shapes: str | None, spec: str | None,
                           require: str, on_line=None) -> dict:
        self._runnable(candidate, "candidate")
        self._runnable(target, "target", family_ok=True)
        if spec:
            self._runnable(spec, "spec", family_ok=True)
        argv = ["validate", target, candidate, "--json", "--require", require]
        if shapes:
            argv += ["--shapes", shapes]
        if spec:
            argv += ["--spec", spec]
        return self._child(argv, "validate", on_line)

    def apply_skeleton(self, target: str, skeleton: str, dry_run: bool, unsafe: bool, on_line=None) -> dict:
        self._runnable(target, "target")
        code = self.skeleton(skeleton).code
        argv = ["apply", target, "--skeleton", code, "--json"]
        if dry_run:  # writes nothing: the diffs come back in the result
            argv.append("--dry-run")
        else:  # the report and candidate files go to a fresh temporary folder (named in the result), not
            # into the working tree the server was started in
            argv += ["--report-dir", tempfile.mkdtemp(prefix=f"skel-mcp-apply-{Path(target).stem}-")]
        argv += ["--unsafe"] if unsafe else []
        return self._child(argv, "apply", on_line)

    # ------------------------------------------------------------------ helpers
    def _path(self, path: str) -> str:
        full = Path(self.cwd or ".") / path
        if not path or not full.is_file():
            raise ToolError(f"{path or '(empty path)'}: no such file (paths are relative to {Path(self.cwd or '.').resolve()})")
        return path

    def _runnable(self, path: str, what: str, family_ok: bool = False) -> None:
        """A file the tool will execute must exist and lie under the workspace root (a kernel family
        name, which names skel's own files, is allowed where ``family_ok``)."""
        if family_ok and path and "/" not in path and not path.endswith(".py"):
            from skel.validate.load import families

            if path in families():
                return
        self._path(path)
        full = (Path(self.cwd or ".") / path).resolve()
        if not full.is_relative_to(self.workspace):
            raise ToolError(f"{what} {path} resolves to {full}, outside the workspace root {self.workspace}: tools"
                            f" that execute code take only files under it (start the server with"
                            f" `skel mcp --workspace DIR` to choose another)")

    def _child(self, argv: list[str], verb: str, on_line: Callable[[str], None] | None = None) -> dict:
        """Run ``python -m skel ARGV`` and return its JSON verdict with the exit code; each line the child
        writes on stderr (its progress) goes to ``on_line`` as it comes."""
        import threading

        cmd = [sys.executable, "-m", "skel", *argv]
        env = child_env()  # the child (and its workers) die with this server, even on SIGKILL
        if self.catalog:
            env["SKEL_CATALOG"] = str(self.catalog)  # the child records into the catalog this server reads
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.cwd,
                                stdin=subprocess.DEVNULL, env=env)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
        reader.start()
        timer = threading.Timer(CHILD_TIMEOUT_S, proc.kill)
        timer.start()
        err_lines = []
        try:
            for line in proc.stderr:
                err_lines.append(line)
                if on_line is not None:
                    try:
                        on_line(line.rstrip("\n"))
                    except Exception:  # a client that went away must not stop the child's verdict
                        on_line = None
            proc.wait()
            reader.join()
        finally:
            timed_out = not timer.is_alive() and proc.returncode is not None and proc.returncode < 0
            timer.cancel()
        if timed_out:
            raise ToolError(f"`skel {' '.join(argv)}` ran over {CHILD_TIMEOUT_S:.0f} s and was stopped")
        stdout, stderr = "".join(out), "".join(err_lines).strip()
        try:
            data = json.loads(stdout) if stdout.strip() else None
        except json.JSONDecodeError:
            data = None
        if proc.returncode == 2 or data is None or (isinstance(data, dict) and "error" in data and len(data) == 1):
            why = (data or {}).get("error") if isinstance(data, dict) else None
            raise ToolError(f"`skel {' '.join(argv)}` failed (exit {proc.returncode}): "
                            f"{why or stderr[-1500:] or stdout.strip()[-1500:] or 'no output'}")
        meaning = {0: "accepted", 1: "rejected" if verb == "validate" else "nothing accepted"}.get(proc.returncode, "error")
        return {"command": "skel " + " ".join(argv), "exit_code": proc.returncode, "outcome": meaning,
                "result": data, "stderr": stderr[-2000:]}


def _guard(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn every failure into a ToolError carrying what and where, so the server never falls over."""
    import functools

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except ToolError:
            raise
        except (UsageError, OSError, ValueError, KeyError) as exc:
            raise ToolError(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)) from None
        except Exception as exc:  # a bug in skel: report it to the caller rather than hiding it
            raise ToolError(f"internal error in {fn.__name__}: {type(exc).__name__}: {exc}") from None
    return wrapper


def _guard_async(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``_guard`` for a coroutine tool."""
    import functools

    @functools.wraps(fn)
    async def wrapper(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except ToolError:
            raise
        except (UsageError, OSError, ValueError, KeyError) as exc:
            raise ToolError(str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)) from None
        except Exception as exc:
            raise ToolError(f"internal error in {fn.__name__}: {type(exc).__name__}: {exc}") from None
    return wrapper


# ------------------------------------------------------------------ typed results (the tools' output schemas)
class SkeletonSummary(TypedDict):
    code: str
    name: str
    title: str
    category: str
    lifecycle: str
    safety: str
    availability: str
    targets: list[str]
    families: list[str]
    evidence_summary: dict[str, Any]


class SkeletonList(TypedDict):
    skeletons: list[SkeletonSummary]


class SearchHit(TypedDict):
    code: str
    name: str
    title: str
    score: int


class SearchResult(TypedDict):
    query: str
    results: list[SearchHit]


class MatchResult(TypedDict):
    path: str
    applicable: list[str]
    kernels: list[dict[str, Any]]
    notes: list[str]


class ChildResult(TypedDict):
    command: str
    exit_code: int
    outcome: Literal["accepted", "rejected", "nothing accepted", "error"]
    result: dict[str, Any] | None
    stderr: str


READ_ONLY = ToolAnnotations(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
# validate: executes the files (in contained workers) and records its verdict in the catalog; never edits a file
RUNS_CODE = ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)
STEP = re.compile(r"\[(?:second round )?(\d+)/(\d+)\]")


def build_server(tools: SkelTools) -> MCPServer:
    server = MCPServer("skel", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    try:
        library = tools.library()
        families = sorted({f for sk in library for f in sk.families}) or ["any"]
    except ToolError:
        families = ["any"]  # a broken library: the tools say why when called
    Family = Literal[tuple(families)]  # noqa: N806 (a type built from the library)

    Code = Annotated[str, Field(pattern=r"^[Ss][Kk][0-9A-Za-z]+$",
                                description="a skeleton code, e.g. SK001 (case does not matter)")]
    KernelPath = Annotated[str, Field(min_length=1, description="a Triton .py or CUDA (.cu/.cuh) kernel file, relative "
                                                                "to the server's working directory")]

    @server.tool(description="List the library's skeletons, optionally filtered (AND). Reads only.",
                 annotations=READ_ONLY, structured_output=True)
    @_guard
    def list_skeletons(
        category: Annotated[Literal[CATEGORIES] | None, Field(description="what the skeleton optimises")] = None,
        target: Annotated[Literal[TARGETS] | None, Field(description="kernel language it applies to")] = None,
        lifecycle: Annotated[Literal[LIFECYCLES] | None, Field(description="maturity in the library")] = None,
        family: Annotated[Family | None, Field(description="kernel family tag, spelt as kernels/ names its "
                                                           "targets (kda_decode, gdn_decode, ...)")] = None,
    ) -> SkeletonList:
        return tools.list_skeletons(category, target, lifecycle, family)

    @server.tool(description="One skeleton in full: metadata, conditions, transformation, resource constraints, "
                             "provenance, docs, before/after example kernels, and its evidence from the catalog. "
                             "Reads only.", annotations=READ_ONLY, structured_output=True)
    @_guard
    def show_skeleton(code: Code) -> dict[str, Any]:
        return tools.show_skeleton(code)

    @server.tool(description="Search skeleton names, titles, docs, conditions and methods; every word must match; "
                             "results ranked by hits. Reads only.", annotations=READ_ONLY, structured_output=True)
    @_guard
    def search_skeletons(text: Annotated[str, Field(min_length=1, description="words to search for")]) -> SearchResult:
        return tools.search_skeletons(text)

    @server.tool(description="Profile a Triton (.py) or CUDA kernel file statically (never imported) and evaluate "
                             "every skeleton's conditions on each kernel, with the lines that make them hold or fail; "
                             "suppression comments (# skel: ignore[SK001] reason) are honoured. Reads only.",
                 annotations=READ_ONLY, structured_output=True)
    @_guard
    def match_kernel(path: KernelPath) -> MatchResult:
        return tools.match_kernel(path)

    @server.tool(description="Judge a candidate kernel file against a target with `skel validate`. EXECUTES the "
                             "target, spec and candidate Python files (in the gate's contained worker processes); "
                             "every path must lie under the server's workspace root. Numerics against the float64 "
                             "reference and the original on every shape; timing only on a GPU. Without a spec, a "
                             "kernel skel does not know is judged against the harness inferred from its launcher "
                             "(the original as the oracle). exit_code 1 means rejected (see result.reasons). "
                             "Reports progress while it runs.", annotations=RUNS_CODE, structured_output=True)
    @_guard_async
    async def validate_candidate(
        target: Annotated[str, Field(min_length=1, description="a kernels/ family (kda_decode, ...) or a kernel file")],
        candidate: Annotated[str, Field(min_length=1, description="the candidate .py file")],
        ctx: Context,
        shapes: Annotated[str | None, Field(description="a shape-set name (ci, decode) or comma-separated "
                                                        "labels such as N64-T1")] = None,
        spec: Annotated[str | None, Field(description="a family or a spec .py file (SPEC = TargetSpec(...))")] = None,
        require: Annotated[Literal["correct", "not-slower", "faster"],
                           Field(description="what acceptance needs")] = "correct",
    ) -> ChildResult:
        return await _reporting(ctx, lambda line: tools.validate_candidate(target, candidate, shapes, spec, require,
                                                                           on_line=line))

    @server.tool(description="Apply one skeleton to a target kernel file with `skel apply TARGET --skeleton CODE`. "
                             "dry_run (default true) runs and writes nothing: the result holds each candidate's diff "
                             "(paths from the repository root, for git apply). Otherwise EXECUTES the target and its "
                             "rewrites (in the gate's contained worker processes; the target must lie under the "
                             "server's workspace root) and writes TARGET.skel.py when a rewrite is accepted (never "
                             "the target itself). unsafe must be true for skeletons whose rewrite is unsafe. "
                             "exit_code 1: nothing accepted. Reports progress (candidates judged) while it runs.",
                 annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False, idempotentHint=False,
                                             openWorldHint=False), structured_output=True)
    @_guard_async
    async def apply_skeleton(
        target: KernelPath, skeleton: Code, ctx: Context,
        dry_run: Annotated[bool, Field(description="show the candidate diffs only; run and write nothing")] = True,
        unsafe: Annotated[bool, Field(description="allow a rewrite whose skeleton is marked unsafe")] = False,
    ) -> ChildResult:
        return await _reporting(ctx, lambda line: tools.apply_skeleton(target, skeleton, dry_run, unsafe, on_line=line))

    @server.tool(description="The Markdown brief for an agent optimising a kernel file: profile, roofline standing "
                             "if measured, applicable skeletons ranked by evidence with conditions, constraints, "
                             "examples and the commands to check a change. Reads only.",
                 annotations=READ_ONLY, structured_output=True)
    @_guard
    def catalog_prompt(path: KernelPath,
                       budget: Annotated[int | None, Field(ge=1, description="most tokens (ceil(chars / 4)) the brief "
                                                                              "may take; it is trimmed to fit")] = None,
                       ) -> str:
        return tools.catalog_prompt(path, budget)

    _add_resources(server, tools)
    return server


async def _reporting(ctx: Context, work: Callable[[Callable[[str], None]], dict]) -> dict:
    """Run ``work(on_line)`` in a worker thread; each progress line the child prints becomes an MCP progress
    notification (done/total where the line says "[i/n]", else a count of lines), so a client sees a long
    validation or apply advance."""
    import anyio

    seen = [0]

    def on_line(line: str) -> None:
        seen[0] += 1
        m = STEP.search(line)
        done, total = (float(m.group(1)), float(m.group(2))) if m else (float(seen[0]), None)
        anyio.from_thread.run(ctx.report_progress, done, total, line[-300:])

    return await anyio.to_thread.run_sync(lambda: work(on_line))


def _add_resources(server: MCPServer, tools: SkelTools) -> None:
    try:
        codes = [s.code for s in tools.library()]
    except ToolError:
        codes = []  # a broken library: the tools say why when called
    for code in codes:  # listed one by one so that resources/list shows them; the template serves the rest
        server.resource(f"skel://skeleton/{code}", name=code, mime_type="text/markdown",
                        description=f"skeleton {code}: docs, conditions, constraints, evidence")(_reader(tools, code))

    @server.resource("skel://skeleton/{code}", mime_type="text/markdown")
    def skeleton_doc(code: str) -> str:
        try:
            return tools.skeleton_markdown(code)
        except ToolError as exc:
            raise ResourceNotFoundError(str(exc)) from None


def _reader(tools: SkelTools, code: str) -> Callable[[], str]:
    def read() -> str:
        return tools.skeleton_markdown(code)
    return read


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("skel")
    except PackageNotFoundError:
        return "unknown"


def serve(library_root: Path | tuple[Path, ...] | None = None, catalog: Path | None = None, workspace: Path | None = None) -> None:
    """Run the server on stdin/stdout until the client closes the connection."""
    build_server(SkelTools(library_root, catalog, workspace=workspace)).run("stdio")
