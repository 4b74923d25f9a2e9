"""SK012-split-kv-lse-merge: split a long KV loop across programs and merge partial results

Conditions (detector):
by their log-sum-exp.

A decode attention program (one query row per head) walks the whole KV sequence alone; with
few heads and a small batch most SMs idle. Opportunity: a loop with an online-softmax update
(a running max through ``tl.maximum`` and an exp rescale), no program axis over query
blocks (decode), and no split of the KV range across programs. Instance: a program axis
(or parameter) that splits KV together with a stored per-split LSE, or a merge kernel that
combines partial outputs by ``exp(lse_i - lse_max)``.
"""
from __future__ import annotations

import re

from skel.device import device_profile
from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

LANGUAGES = ("triton",)
SPLIT_VAR = re.compile(r"split|partition|\bi_kv\b|\bkv_block\b|\bpart\b", re.I)
SPLIT_PARAM = re.compile(r"^(NUM_)?(KV_)?SPLITS?(_SIZE)?$|^num_(kv_)?splits$|^split_(size|len)$|^(NUM_)?PARTITIONS?(_SIZE)?$|^partition_size$", re.I)
QUERY_TILE = re.compile(r"^(i_t|i_m|start_m|pid_m|i_q|q_block|i_bq|m_block|i_tq|block_m)$")
LSE_NAME = re.compile(r"lse|logsumexp", re.I)


def _pid_names(ctx: Ctx) -> set[str]:
    names = set()
    for ax in ctx.p.program_axes:
        names |= {ax.var, *ax.derived, *(v for v, _ in ax.roles)}
    return names


def _online_softmax(ctx: Ctx) -> list[tuple[int, str]]:
    """(loop line, running-max statement) for loops that keep a running max and rescale by exp."""
    out = []
    exp_lines = {m.line for m in ctx.p.math if m.op in ("exp", "exp2")}
    for lp in ctx.p.loops:
        for a in ctx.assigns:
            if not (lp.line < a.line <= lp.end_line) or "maximum" not in a.rhs:
                continue
            if any(re.search(rf"\b{re.escape(t)}\b", a.rhs) for t in a.targets) or re.search(r"tl\.maximum\(\s*(\w+)\s*,", a.rhs):
                if any(lp.line < e <= lp.end_line for e in exp_lines):
                    out.append((lp.line, f"line {a.line}: {', '.join(a.targets)} = {a.rhs}"))
                    break
    return out


def _split(ctx: Ctx) -> str | None:
    for name in sorted(_pid_names(ctx)):
        if SPLIT_VAR.search(name):
            return f"program id {name} selects a KV split"
    for p in ctx.p.params:
        if SPLIT_PARAM.match(p.name):
            return f"parameter {p.name} splits the KV range"
    return None


def _from_lse(ctx: Ctx, name: str, line: int, lse_vars: set[str]) -> bool:
    if name in lse_vars:
        return True
    return any(set(a.targets) & lse_vars or lse_vars & set(re.findall(r"[A-Za-z_]\w*", a.rhs)) for a in ctx.closure(name, line, depth=2))


def kv_loop_online_softmax(ctx: Ctx) -> Check:
    rows = _online_softmax(ctx)
    if not rows:
        return no("no loop keeps a running max and rescales by exp (no online softmax over KV)")
    return yes(f"loop at line {rows[0][0]}: {rows[0][1]}")


def too_few_programs_for_sms(ctx: Ctx) -> Check:
    q = sorted(n for n in _pid_names(ctx) if QUERY_TILE.match(n))
    if q:
        return no(f"program id {q[0]} spreads query blocks across programs (prefill), so the grid grows with the sequence and fills the SMs")
    device = device_profile()
    return yes(
        f"the grid has only batch/head axes ({', '.join(sorted(_pid_names(ctx))) or 'none'}): at decode batch sizes "
        f"batch * heads stays below the {device.sm_count} SMs of the {device.name}"
        f"{' (assumed)' if device.source == 'assumed' else ''} (e.g. 2 x 32 = 64)"
    )


def no_kv_split(ctx: Ctx) -> Check:
    s = _split(ctx)
    if s:
        return no(f"KV is already split: {s}")
    return yes("no program id or parameter splits the KV range")


CONDITIONS = {
    "program-loops-over-kv": kv_loop_online_softmax,
    "grid-lacks-kv-axis": no_kv_split,
    "too-few-programs-for-sms": too_few_programs_for_sms,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(ln, ctx.loop_at(ln).end_line if ctx.loop_at(ln) else ln, running_max=t) for ln, t in _online_softmax(ctx)]


def instances(ctx: Ctx) -> list[Hit]:
    out = []
    split = _split(ctx)
    lse_stores = [m for m in ctx.p.memops if m.kind == "store" and LSE_NAME.search(m.pointer + " " + ctx.statement(m.line))]
    if split and lse_stores:
        m = lse_stores[0]
        out.append(Hit.at(m.line, m.line, split=split, lse_store=ctx.text(m.line)))
    lse_loads = [m for m in ctx.p.memops if m.kind == "load" and m.target and LSE_NAME.search(m.pointer + " " + m.target)]
    if lse_loads and not lse_stores:
        # a merge rescales each split by exp(lse_i - max_j lse_j): both terms come from LSE loads
        lse_vars = {m.target for m in lse_loads}
        for a in ctx.assigns:
            for call in re.finditer(r"exp2?\s*\(", a.rhs):
                from skel.miner.detectors.text import call_args

                arg = call_args(a.rhs, call.end() - 1)
                names = [n for n in re.findall(r"[A-Za-z_]\w*", arg) if n not in ("tl", "None")]
                if len(names) >= 2 and all(_from_lse(ctx, n, a.line, lse_vars) for n in names):
                    out.append(Hit.at(a.line, a.line, merge=f"{', '.join(a.targets)} = {a.rhs}", lse_load=lse_loads[0].line))
                    break
            if out and out[-1].line == a.line:
                break
    return out


class SplitKvLseMerge(Rule):
    """Split a long KV sequence across programs with partial outputs and log-sum-exp, merged in a second pass."""

    LANGUAGES = LANGUAGES
    SAFETY = "unsafe"  # of the method docs.md describes (no automatic rewrite)
    KIND = "template"
    CONDITIONS = CONDITIONS

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)
