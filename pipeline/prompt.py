"""The agent brief: which skeletons apply to one kernel file, why, and how to check a change.

    build_brief(target, library, catalog=None) -> Brief       (frozen dataclasses, JSON via to_json)
    render_markdown(brief) -> str                              (templates/prompt.md.j2, deterministic)
    fit_budget(brief, budget) -> Brief                         (drops the least useful parts first)

Analysis is static and local: the target file is profiled by the miner's frontend (never
imported), every skeleton's conditions are evaluated on every kernel with the detectors, and
evidence (mined instances, measured verdicts) comes from the catalog when one exists. A missing
catalog file means "no evidence yet"; it is never created here.

Ranking of applicable skeletons (also in `skel catalog prompt --help`): measured
wins first, then mined instances, then none; inside a tier more wins, then more instances, then
the code. A run is a *measured win* when it has a median (it was timed on a GPU) and its verdict
is one of WIN_VERDICTS; a loss likewise with LOSS_VERDICTS.

Tokens are estimated as ceil(characters / 4) of the rendered Markdown (`estimate_tokens`);
the budget is always measured on the Markdown, also when the brief is printed as JSON.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePath

from skel.skeletons.library import CONSTRAINT_KEYS, Library, Skeleton
from skel.catalog.records import reported
from skel.errors import UsageError

WIN_VERDICTS = ("faster", "accepted", "win")
LOSS_VERDICTS = ("slower", "rejected", "loss")
HEAD_TO_HEAD = "head-to-head speedup"  # skel apply's run-offs: one rewrite timed against another
TILE_NAME = re.compile(r"^(B[A-Z0-9_]*|BLOCK\w*|\w*_SIZE|\w*_BLOCK\w*|num_warps|num_stages)$")
LINE_REF = re.compile(r"\blines? (\d+)")
MAX_MEASUREMENTS = 4


# ----------------------------------------------------------------------------- data model
@dataclass(frozen=True)
class KernelBrief:
    """One kernel (or jit device function) in a few lines; ``detailed`` False keeps only the header."""

    name: str
    kind: str  # kernel | device-function
    language: str
    line: int
    end_line: int
    grid: str | None
    launch_line: int | None
    program_ids: tuple[str, ...]  # "axis 0 `pid`: i_v v-tile, i_hv head"
    tiles: tuple[tuple[str, str], ...]  # launch values of tile constexprs, num_warps, num_stages
    other_constexprs: tuple[str, ...]
    tuning: str  # "none", "3 autotune configs (keys: K, V)", ...
    time_loop: str | None
    counts: tuple[tuple[str, int], ...]  # (what, how many), zero counts included for the main ones
    dtypes: tuple[str, ...]
    detailed: bool = True


@dataclass(frozen=True)
class Measurement:
    """A timed validation run recorded for this target: where the original stands, what the candidate did.

    ``roofline_pct`` is the original kernel's share of the roofline, read from the run's extra
    field ``baseline_roofline_pct`` (as the gate's PerfResult names it) or ``roofline_pct``;
    None when the run did not record it. ``median``/``unit`` are the run's own (the candidate's).
    """

    shape: str
    dtype: str
    gpu: str
    roofline_pct: float | None
    skeletons: tuple[str, ...]
    verdict: str
    median: float
    unit: str


@dataclass(frozen=True)
class ConditionView:
    id: str
    holds: bool
    detail: str  # from the detector: names the lines that make it hold (or fail)
    lines: tuple[int, ...]  # the line numbers named in ``detail``


@dataclass(frozen=True)
class KernelMatch:
    """The conditions of one skeleton on one kernel of the target."""

    kernel: str
    line: int
    conditions: tuple[ConditionView, ...]

    @property
    def applies(self) -> bool:
        return bool(self.conditions) and all(c.holds for c in self.conditions)


@dataclass(frozen=True)
class EvidenceView:
    tier: str  # measured | mined | none
    wins: int
    losses: int
    instances: int
    opportunities: int
    first_instance: str | None  # "path:line (kernel)"

    @property
    def rank_key(self) -> tuple:
        return ({"measured": 0, "mined": 1}.get(self.tier, 2), -self.wins, -self.instances)

    def line(self) -> str:
        parts = []
        if self.wins or self.losses:
            parts.append(f"measured {self.wins} win(s), {self.losses} loss(es)")
        if self.instances:
            parts.append(f"{self.instances} mined instance(s)" + (f", e.g. {self.first_instance}" if self.first_instance else ""))
        if self.opportunities:
            parts.append(f"{self.opportunities} other opportunity(ies) mined")
        return "; ".join(parts) or "none recorded yet"


@dataclass(frozen=True)
class ApplicableSkeleton:
    rank: int
    code: str
    name: str
    title: str
    category: str
    safety: str
    availability: str
    transform_kind: str
    matches: tuple[KernelMatch, ...]  # the kernels it applies to, every condition holding
    evidence: EvidenceView | None
    method: str | None
    constraints: tuple[tuple[str, str], ...]
    example: tuple[str, str] | None  # (docs "Example", docs "Rewritten")
    provenance: tuple[str, ...]
    commands: tuple[str, ...]
    unsafe_because: str = ""  # Skeleton.unsafe_because: why the rewrite is unsafe, in its docs' words


@dataclass(frozen=True)
class NotApplicable:
    code: str
    name: str
    kernel: str
    condition: str
    detail: str


@dataclass(frozen=True)
class Brief:
    target: str  # as the user gave it
    language: str
    source_sha256: str
    kernels: tuple[KernelBrief, ...]
    measurements: tuple[Measurement, ...]
    applicable: tuple[ApplicableSkeleton, ...]
    not_applicable: tuple[NotApplicable, ...]
    needs_spec: bool = False  # no spec.py beside the target: `skel validate` needs --spec
    show_measurements: bool = True
    trimmed: tuple[str, ...] = ()  # what fit_budget dropped, in order
    budget: int | None = None
    suppressed: tuple[str, ...] = ()  # "SK001 in kernel k, line 20: reason" (`# skel: ignore[...]` comments)

    def to_json(self) -> dict:
        data = dataclasses.asdict(self)
        for entry, sk in zip(data["applicable"], self.applicable):
            entry["example"] = None if sk.example is None else {"before": sk.example[0], "after": sk.example[1]}
            entry["constraints"] = dict(sk.constraints)
            for m, match in zip(entry["matches"], sk.matches):
                m["applies"] = match.applies
        for k in data["kernels"]:
            k["tiles"] = dict(k["tiles"])
            k["counts"] = dict(k["counts"])
        data["tokens"] = estimate_tokens(render_markdown(self))
        return data


# ----------------------------------------------------------------------------- analysis
def estimate_tokens(text: str) -> int:
    """ceil(characters / 4): a deliberately simple, tokenizer-free estimate."""
    return math.ceil(len(text) / 4)


def profile_target(target: str | Path) -> tuple[str, str, list]:
    """(language, text, profiles) of a Triton or CUDA file, device functions included.

    The file is read as `skel match` reads it (``miner.match.read_target``: missing, binary,
    non-UTF-8 and non-kernel files are UsageErrors naming the file).
    """
    from skel.miner.match import read_target

    text, language = read_target(str(target))
    if language == "cuda":
        from skel.miner.cuda_frontend import profile_source as frontend
    else:
        from skel.miner.triton_frontend import profile_source as frontend
    try:
        profiles = frontend(text, str(target))
    except SyntaxError as exc:
        raise UsageError(f"{target}:{exc.lineno}: does not parse as Python: {exc.msg}") from None
    except ValueError as exc:  # the CUDA frontend's "path:line: why"
        raise UsageError(str(exc)) from None
    if not profiles:
        what = "__global__ kernel" if language == "cuda" else "@triton.jit kernel"
        raise UsageError(f"{target}: no {what} found")
    return language, text, profiles


def match_skeletons(library: Library, profiles: list, text: str) -> dict[str, tuple[KernelMatch, ...]]:
    """Skeleton code -> its conditions on every kernel (in source order), from the detectors.

    A skeleton whose detector cannot evaluate a condition (library and miner out of step)
    gets one failing pseudo-condition ``detector`` naming the problem, so it shows up as not
    applicable with the reason instead of breaking the brief.
    """
    from skel.miner.detect import evaluate
    from skel.miner.detectors.base import Ctx

    ctxs = [Ctx(p, text) for p in profiles]  # shared lookups across skeletons, one per kernel
    out = {}
    for sk in library:
        rows = []
        for p, ctx in zip(profiles, ctxs):
            try:
                conds = tuple(_condition(r) for r in evaluate(sk, p, text, ctx, confirm=True))
            except KeyError as exc:
                conds = (ConditionView("detector", False, f"{exc.args[0]} (run `skel catalog check`)", ()),)
            rows.append(KernelMatch(p.name, p.line, conds))
        out[sk.code] = tuple(rows)
    return out


def _condition(r) -> ConditionView:
    return ConditionView(r.id, bool(r.holds), r.detail, tuple(sorted({int(n) for n in LINE_REF.findall(r.detail)})))


def kernel_brief(p) -> KernelBrief:
    site = p.launches[0] if p.launches else None
    constexprs = set(p.constexprs)
    tiles: list[tuple[str, str]] = []
    if site:
        tiles = [(k, str(v)) for k, v in site.constexpr_values if k in constexprs and TILE_NAME.match(k)]
        for k in ("num_warps", "num_stages"):
            v = getattr(site, k)
            if v is not None and k not in dict(tiles):
                tiles.append((k, str(v)))
    axes = tuple(
        f"axis {ax.axis} `{ax.var}`" + (": " + ", ".join(f"{v} {r}" for v, r in ax.roles) if ax.roles else "")
        for ax in p.program_axes
    )
    tune = p.tune
    tuning = []
    if tune.autotune:
        tuning.append(f"{len(tune.autotune)} autotune config(s)" + (f" (keys: {', '.join(tune.autotune_keys)})" if tune.autotune_keys else ""))
    if tune.heuristics:
        tuning.append("heuristics: " + ", ".join(tune.heuristics))
    if tune.do_not_specialize:
        tuning.append("do_not_specialize: " + ", ".join(tune.do_not_specialize))
    loop = next((lp for lp in p.loops if lp.is_time_loop), None)
    ops = Counter(m.op for m in p.math)
    counts = [("loads", sum(m.kind == "load" for m in p.memops)), ("stores", sum(m.kind == "store" for m in p.memops)),
              ("reductions", len(p.reductions)), ("dots", len(p.dots)), ("divisions", ops.pop("div", 0))]
    counts += sorted(ops.items())
    return KernelBrief(
        name=p.name, kind=p.kind, language=p.language, line=p.line, end_line=p.end_line,
        grid=site.grid if site else None, launch_line=site.line if site else None, program_ids=axes,
        tiles=tuple(tiles), other_constexprs=tuple(c for c in p.constexprs if c not in dict(tiles)),
        tuning="; ".join(tuning) or "none", time_loop=f"line {loop.line}: for {loop.var} in {loop.iter_text}" if loop else None,
        counts=tuple(counts), dtypes=tuple(p.dtypes),
    )


# ----------------------------------------------------------------------------- evidence
def _evidence_view(ev) -> EvidenceView:
    measured = [r for r in ev.runs if r.median is not None]
    wins = sum(r.verdict in WIN_VERDICTS for r in measured)
    losses = sum(r.verdict in LOSS_VERDICTS for r in measured)
    first = ev.instances[0] if ev.instances else None
    tier = "measured" if wins else "mined" if ev.instances else "none"
    return EvidenceView(tier, wins, losses, len(ev.instances), ev.opportunities,
                        f"{first.path}:{first.line} ({first.kernel})" if first else None)


def _measurements(cat, source_sha256: str, kernel_names: list[str]) -> tuple[Measurement, ...]:
    """Timed runs of this target against its original: same source hash, or a run recorded under one of its
    kernel names (run-offs between two rewrites, metric HEAD_TO_HEAD, stay in the catalog, not here)."""
    runs = [r for r in cat.validation_runs() if r.median is not None and r.metric != HEAD_TO_HEAD
            and (r.source_hash == source_sha256 or r.kernel in kernel_names)]
    out = []
    for r in sorted(runs, key=lambda r: (r.shape, r.dtype, r.id or 0)):
        extra = dict(r.extra)
        pct = extra.get("baseline_roofline_pct", extra.get("roofline_pct"))
        pct = float(pct) if isinstance(pct, (int, float)) and not isinstance(pct, bool) else None
        out.append(Measurement(r.shape, r.dtype, r.gpu or "?", pct, tuple(r.skeletons), r.verdict, float(r.median), r.unit))
    return tuple(out[:MAX_MEASUREMENTS])


def _catalog_facts(catalog: Path | None, codes: list[str], sha: str, kernels: list[str]):
    from skel.catalog import store

    path = store.resolve_catalog_path(catalog)
    if not path.exists():
        return {c: EvidenceView("none", 0, 0, 0, 0, None) for c in codes}, ()
    with store.open_catalog(path) as cat:
        return {c: _evidence_view(cat.evidence(c)) for c in codes}, _measurements(cat, sha, kernels)


# ----------------------------------------------------------------------------- building
def build_brief(target: str, library: Library, catalog: Path | None = None) -> Brief:
    """The full (untrimmed) brief for the file ``target`` (a path as the user wrote it)."""
    language, text, profiles = profile_target(target)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    # Kernels only, as `skel match` does: a jit device function has no grid or launch of its own.
    matches = match_skeletons(library, reported(profiles), text)
    evidence, measurements = _catalog_facts(catalog, list(matches), sha, [p.name for p in profiles])
    silenced, suppressed = _suppressed(library, [p for p in profiles if p.kind == "kernel"], text, language)
    applicable, not_applicable = [], []
    for code, per_kernel in matches.items():
        sk = library.get(code)
        hits = tuple(m for m in per_kernel if m.applies and (code, m.kernel, m.line) not in silenced)
        if not hits and any(m.applies for m in per_kernel):
            continue  # applies, but every kernel it applies to silences it: listed under "suppressed"
        if hits:
            applicable.append((sk, hits))
        else:
            not_applicable.append(_closest_miss(sk, per_kernel))
    applicable.sort(key=lambda t: (*evidence[t[0].code].rank_key, t[0].code))
    return Brief(
        target=str(target), language=language, source_sha256=sha,
        kernels=tuple(kernel_brief(p) for p in profiles), measurements=measurements,
        applicable=tuple(_applicable(i, sk, hits, evidence[sk.code], target) for i, (sk, hits) in enumerate(applicable, 1)),
        not_applicable=tuple(not_applicable),
        needs_spec=not (Path(target).parent / "spec.py").is_file(),
        suppressed=suppressed,
    )


def _suppressed(library: Library, kernels: list, text: str, language: str):
    """(code, kernel, line) that suppression comments silence, and their lines for the brief; the
    decision is ``skel match``'s (``miner.match.match_kernel``), made only when the file has such comments."""
    from skel.miner import suppress as sup

    comments = sup.parse(text)
    if not comments:
        return set(), ()
    from skel.miner.match import match_kernel

    spans = sup.headers(text, language)
    silenced, lines = set(), []
    for p in kernels:
        m = match_kernel(p, text, list(library), comments, sup.header_span(spans, p.line, language))
        still = {a.skeleton for a in m.applicable}
        for s in m.suppressed:
            where = (f"line{'s' if len(s.sites) > 1 else ''} {', '.join(map(str, s.sites))}" if s.sites
                     else "the whole kernel")
            lines.append(f"{s.skeleton} in kernel `{p.name}` ({where}), by the comment at line {s.line}: "
                         f"{s.reason or 'no reason given'}")
            if s.skeleton not in still:
                silenced.add((s.skeleton, p.name, p.line))
    return silenced, tuple(lines)


def _closest_miss(sk: Skeleton, per_kernel: tuple[KernelMatch, ...]) -> NotApplicable:
    """The kernel where the most conditions hold, and its first failing condition."""
    best = max(per_kernel, key=lambda m: (sum(c.holds for c in m.conditions), -m.line))
    failed = next(c for c in best.conditions if not c.holds) if best.conditions else ConditionView("none", False, "no conditions evaluated", ())
    return NotApplicable(sk.code, sk.name, best.kernel, failed.id, failed.detail)


def candidate_path(target: str, code: str) -> str:
    """Where the brief suggests writing a candidate: next to the target, as the user wrote it."""
    p = PurePath(target)
    return str(p.with_name(f"{p.stem}_{code.lower()}{p.suffix}"))


def commands(target: str, code: str, availability: str, safety: str = "safe") -> tuple[str, ...]:
    """`skel apply` (when the skeleton has an automatic rewrite; unsafe ones need --unsafe), then the copy the
    change is made in (a file no command would otherwise create) and `skel validate` on it."""
    import shlex

    t, c = shlex.quote(target), shlex.quote(candidate_path(target, code))
    out = []
    if availability != "never":
        out.append(f"skel apply {t} --skeleton {code}" + (" --unsafe" if safety == "unsafe" else ""))
    out.append(f"cp {t} {c}  # make the change in this copy, then judge it:")
    out.append(f"skel validate {t} {c}")
    return tuple(out)


def _applicable(rank: int, sk: Skeleton, hits, evidence: EvidenceView, target: str) -> ApplicableSkeleton:
    return ApplicableSkeleton(
        rank=rank, code=sk.code, name=sk.name, title=sk.title, category=sk.category, safety=sk.safety,
        availability=sk.availability, transform_kind=sk.transformation.kind, matches=hits, evidence=evidence,
        method=sk.transformation.method,
        constraints=tuple((k, getattr(sk.constraints, k)) for k in CONSTRAINT_KEYS),
        example=(sk.docs["Example"], sk.docs["Rewritten"]),
        provenance=tuple(f"{p.repo} {p.path}:{p.line} ({p.version})" + (f": {p.note}" if p.note else "") for p in sk.provenance),
        commands=commands(target, sk.code, sk.availability, sk.safety), unsafe_because=sk.unsafe_because,
    )


# ----------------------------------------------------------------------------- rendering
def render_markdown(brief: Brief) -> str:
    from skel.catalog.render import render

    text = render(Path(__file__).parent / "templates", "prompt.md.j2", b=brief, constraint_names=_CONSTRAINT_NAMES,
                  trimmed=_group_trimmed(brief.trimmed))
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def _group_trimmed(labels: tuple[str, ...]) -> str:
    """"example of SK006", "example of SK005" -> "example of SK006, SK005" (the footer stays short)."""
    groups: list[tuple[str, list[str]]] = []
    for label in labels:
        m = re.fullmatch(r"(.+) of (SK\d{3})", label)
        if m and groups and groups[-1][0] == m.group(1) and groups[-1][1]:
            groups[-1][1].append(m.group(2))
        elif m:
            groups.append((m.group(1), [m.group(2)]))
        else:
            groups.append((label, []))
    return "; ".join(f"{what} of {', '.join(codes)}" if codes else what for what, codes in groups)


_CONSTRAINT_NAMES = {"registers": "registers", "shared_memory": "shared memory", "warps": "warps",
                     "occupancy": "occupancy", "grows_with": "grows with"}
