"""``skel match --format text|json|sarif|github``: one ``MatchRun`` rendered for people, programs, code
scanning (SARIF 2.1.0) and GitHub workflow annotations.

A *finding* is one applicable skeleton at one site of one kernel (a skeleton that applies without
naming a site is reported at the kernel's ``def`` line). Findings silenced by a suppression comment
stay in the JSON and SARIF output (SARIF ``suppressions``, kind ``inSource``, with the comment's
reason as justification) and are left out of the text and GitHub output, where they would be noise.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from skel.commands.common import json_default

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
FORMATS = ("text", "json", "sarif", "github")


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    skeleton: str
    kernel: str
    message: str
    suppressed: str | None = None  # the suppression comment's reason ("" when it gave none)


def findings(run, titles: dict[str, str]) -> list[Finding]:
    out = []
    for r in run.reports:
        for k in r.kernels:
            for a in k.applicable:
                for line in a.sites or (k.line,):
                    out.append(Finding(r.path, line, a.skeleton, k.name, _message(a.skeleton, titles, k, a.rewrite)))
            for s in k.suppressed:
                for line in s.sites or (k.line,):
                    out.append(Finding(r.path, line, s.skeleton, k.name, _message(s.skeleton, titles, k, True),
                                       suppressed=s.reason))
    return sorted(out, key=lambda f: (f.path, f.line, f.skeleton))


def _message(code: str, titles: dict[str, str], k, rewrite: bool) -> str:
    if k.language == "cuda":
        how = f"skel rewrites Triton only: apply the method in `skel catalog show {code}` by hand"
    else:
        how = ("`skel apply` can rewrite it and keeps the rewrite only if numerics and timing confirm it" if rewrite
               else "no automatic rewrite: apply the method in `skel catalog show " + code + "` by hand")
    title = titles.get(code, "")
    return f"{title} ({code}) in kernel {k.name}; {how}" if title else f"{code} applies to kernel {k.name}; {how}"


# ------------------------------------------------------------------ text
def render_text(run, quiet: bool = False, verbose: bool = False) -> list[tuple[str, str]]:
    """Lines with a style name each ("" plain); the caller colours them on a terminal."""
    out: list[tuple[str, str]] = []
    titles = {s.code: s.title for s in run.skeletons}
    if quiet:
        for f in findings(run, titles):
            if f.suppressed is None:
                out.append((f"{f.path}:{f.line}: {f.skeleton} {titles.get(f.skeleton, '')} (kernel {f.kernel})",
                            "applies"))
        return out
    for r in run.reports:
        if not r.kernels:
            if verbose or len(run.reports) == 1:
                out.append((f"{r.path}: no kernels found", "dim"))
            continue
        for k in r.kernels:
            out.append((f"{r.path}:{k.line}: kernel {k.name} ({k.language})", "bold"))
            if not k.applicable:
                out.append(("  applies: none", "dim"))
            for a in k.applicable:
                where = f" at line{'s' if len(a.sites) > 1 else ''} {', '.join(map(str, a.sites))}" if a.sites else ""
                used = f" (already used at {', '.join(map(str, a.used_at))})" if a.used_at else ""
                manual = "" if a.rewrite else " (no automatic rewrite: apply the method in `skel catalog show` by hand)"
                out.append((f"  applies: {a.skeleton}{where}{used}{manual}", "applies"))
                for cid, detail in a.conditions:
                    out.append((f"    + {cid}: {detail}", ""))
            for s in k.suppressed:
                why = f": {s.reason}" if s.reason else " (no reason given)"
                out.append((f"  suppressed: {s.skeleton} by the comment at line {s.line}{why}", "dim"))
            for n in k.not_applicable:
                out.append((f"  not {n.skeleton}: {n.reason}", "dim"))
        for note in r.notes:
            out.append((f"{r.path}:{note}", "warn"))
    if len(run.reports) > 1 or run.errors or verbose:
        n_kernels = sum(len(r.kernels) for r in run.reports)
        fs = findings(run, titles)
        live = sum(f.suppressed is None for f in fs)
        out.append((f"{len(run.reports)} kernel files, {n_kernels} kernels: {live} findings"
                    f" ({len(fs) - live} suppressed), {len(run.errors)} errors", "bold"))
    return out


# ------------------------------------------------------------------ json
def render_json(run) -> dict:
    return run.to_json()


# ------------------------------------------------------------------ sarif
def render_sarif(run, version: str, root: Path | None = None) -> dict:
    """A SARIF 2.1.0 log: one run, the evaluated skeletons as rules, findings as results (suppressed
    ones carry ``suppressions``), unreadable inputs as tool execution notifications. Paths under
    ``root`` (default: the working directory) are relative to the ``SRCROOT`` base, as code scanning
    expects when skel runs at the repository root."""
    root = (root or Path.cwd()).resolve()
    titles = {s.code: s.title for s in run.skeletons}
    codes = [s.code for s in run.skeletons]
    rules = [_rule(s) for s in run.skeletons]
    results = []
    for f in findings(run, titles):
        result = {
            "ruleId": f.skeleton, "ruleIndex": codes.index(f.skeleton) if f.skeleton in codes else -1,
            "level": "warning", "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": _artifact(f.path, root),
                                                "region": {"startLine": f.line}},
                           "logicalLocations": [{"name": f.kernel, "kind": "function"}]}],
        }
        if result["ruleIndex"] < 0:
            del result["ruleIndex"]
        if f.suppressed is not None:
            result["suppressions"] = [{"kind": "inSource", "justification": f.suppressed or "no reason given"}]
        results.append(result)
    notifications = [{"level": "error", "message": {"text": e.reason},
                      "locations": [{"physicalLocation": {"artifactLocation": _artifact(e.path, root),
                                                          **({"region": {"startLine": e.line}} if e.line else {})}}]}
                     for e in run.errors]
    return {
        "$schema": SARIF_SCHEMA, "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "skel", "version": version, "rules": rules}},
            "originalUriBaseIds": {"SRCROOT": {"uri": root.as_uri() + "/"}},
            "invocations": [{"executionSuccessful": not run.errors, "toolExecutionNotifications": notifications}],
            "results": results,
        }],
    }


def _rule(sk) -> dict:
    what = (sk.docs or {}).get("What it does", "").strip() or sk.title
    doc = "\n\n".join(f"## {h}\n\n{t.strip()}" for h, t in (sk.docs or {}).items() if t.strip())
    return {
        "id": sk.code, "name": "".join(w.capitalize() for w in sk.name.replace("_", "-").split("-")),
        "shortDescription": {"text": sk.title}, "fullDescription": {"text": what},
        "help": {"text": what, "markdown": doc or what},
        "defaultConfiguration": {"level": "warning"},
        "properties": {"category": sk.category, "lifecycle": sk.lifecycle, "safety": sk.safety,
                       "tags": [sk.category, *sk.targets]},
    }


def _artifact(path: str, root: Path) -> dict:
    p = Path(path)
    full = (p if p.is_absolute() else Path.cwd() / p).resolve()
    try:
        return {"uri": full.relative_to(root).as_posix(), "uriBaseId": "SRCROOT"}
    except ValueError:
        return {"uri": full.as_uri()}


# ------------------------------------------------------------------ github
def render_github(run) -> list[str]:
    """GitHub workflow commands: a ``::warning`` per unsuppressed finding, an ``::error`` per input
    that could not be matched (shown as annotations on the pull request's diff)."""
    titles = {s.code: s.title for s in run.skeletons}
    out = []
    for f in findings(run, titles):
        if f.suppressed is None:
            title = f"skel {f.skeleton}"
            out.append(f"::warning file={_prop(_posix(f.path))},line={f.line},title={_prop(title)}::{_data(f.message)}")
    for e in run.errors:
        line = f",line={e.line}" if e.line else ""
        out.append(f"::error file={_prop(_posix(e.path))}{line},title=skel::{_data(e.reason)}")
    return out


def _posix(path: str) -> str:
    return path.replace(os.sep, "/")


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def dumps(data) -> str:
    return json.dumps(data, indent=2, default=json_default)

