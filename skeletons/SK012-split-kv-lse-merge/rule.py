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
from skel.miner.detectors.helpers import terms as _terms
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

LANGUAGES = ("triton", "cuda")  # as skeleton.toml's targets say
SPLIT_VAR = re.compile(r"split|partition|\bi_kv\b|\bkv_block\b|\bpart\b", re.I)
SPLIT_PARAM = re.compile(r"^(NUM_)?(KV_)?SPLITS?(_SIZE)?$|^num_(kv_)?splits$|^split_(size|len)$|^(NUM_)?PARTITIONS?(_SIZE)?$|^partition_size$", re.I)
QUERY_TILE = re.compile(r"^(i_t|i_m|start_m|pid_m|i_q|q_block|i_bq|m_block|i_tq|block_m)$")
LSE_NAME = re.compile(r"lse|logsumexp", re.I)
NAME = re.compile(r"[A-Za-z_]\w*")
EXP_CALL = re.compile(r"(?<![\w.])(?:tl\.|tl\.math\.|math::|)(?:exp2?|expf|exp2f|__expf|ptx_exp2)\s*\(")
MAX_CALL = re.compile(r"(?:tl\.)?maximum\s*\(|(?<![\w.])(?:fmaxf|max)\s*\(")
CONTRACTION = re.compile(r"(?:tl\.)?dot\s*\(|(?:tl\.)?sum\s*\(")


def _pid_names(ctx: Ctx) -> set[str]:
    names = set()
    for ax in ctx.p.program_axes:
        names |= {ax.var, *ax.derived, *(v for v, _ in ax.roles)}
    return names


def _loaded(ctx: Ctx, lo: int, hi: int) -> set[str]:
    """Variables assigned from a memory read between lines lo and hi (``tl.load``, ``x = ptr[i]``)."""
    out = {m.target for m in ctx.p.memops if m.kind == "load" and m.target and lo <= m.line <= hi}
    for a in ctx.assigns:
        if lo <= a.line <= hi and re.search(r"tl\.load\s*\(|\w\s*\[[^\]]+\]\s*;?\s*$", a.rhs):
            out |= set(a.targets)
    return out


def _derived(ctx: Ctx, seeds: set[str], lo: int, hi: int) -> set[str]:
    """``seeds`` and every variable assigned from them between lo and hi (forward, to a fixpoint)."""
    names = set(seeds)
    changed = True
    while changed:
        changed = False
        for a in ctx.assigns:
            if lo <= a.line <= hi and not set(a.targets) <= names and names & set(NAME.findall(a.rhs)):
                names |= set(a.targets)
                changed = True
    return names


def _softmax_loops(ctx: Ctx) -> list[dict]:
    """Loops that keep a running max and rescale by exp: what they compute it from.

    For each: ``line``, ``max`` (the running-max statement), ``scores_loaded`` (the maximised
    values are read from memory, i.e. partial results merged, rather than computed from a
    contraction of a query with loaded keys) and ``weighted`` (an accumulator takes a contraction
    or product of the exp weights with values loaded in the loop: the output of attention, which
    a loss or a plain softmax does not have).
    """
    cache = ctx.cache.setdefault(CODE, {})
    if "loops" in cache:
        return cache["loops"]
    out = []
    exp_lines = {m.line for m in ctx.p.math if m.op in ("exp", "exp2")}
    for lp in ctx.p.loops:
        inside = [a for a in ctx.assigns if lp.line < a.line <= lp.end_line]
        if not any(lp.line < e <= lp.end_line for e in exp_lines) and not any(EXP_CALL.search(a.rhs) for a in inside):
            continue
        run = next((a for a in inside if MAX_CALL.search(a.rhs) and _running(a, inside)), None)
        if run is None:
            continue
        loaded = _loaded(ctx, lp.line, lp.end_line)
        maxed = set(NAME.findall(run.rhs)) - set(run.targets) - {"tl", "maximum", "max", "fmaxf", "axis"}
        # partial maxima are loaded scalars maximised as they are (tl.maximum(lse_i, m)); a block
        # reduction inside the max (tl.max(logits)) is a softmax over loaded data, not a merge
        reduced = bool(re.search(r"(?:tl\.)?max\s*\(", run.rhs[MAX_CALL.search(run.rhs).end():])) or any(
            set(a.targets) & maxed and re.search(r"(?:tl\.)?max\s*\(", a.rhs) for a in inside)
        from_loads = _derived(ctx, loaded, lp.line, lp.end_line)
        contracted = any(CONTRACTION.search(a.rhs) and set(a.targets) & maxed for a in inside) or any(
            CONTRACTION.search(a.rhs) and set(a.targets) & _sources(ctx, maxed, lp) for a in inside)
        weights = _derived(ctx, {t for a in inside if EXP_CALL.search(a.rhs) for t in a.targets}, lp.line, lp.end_line)
        weighted = any(_accumulates(a, weights, loaded) for a in inside)
        out.append({
            "line": lp.line,
            "max": f"line {run.line}: {', '.join(run.targets)} = {run.rhs}",
            "scores_loaded": bool(maxed & from_loads) and not contracted and not reduced,
            "contracted": contracted,
            "weighted": weighted,
        })
    cache["loops"] = out
    return out


def _running(a, inside) -> bool:
    """``m = tl.maximum(m, ...)``, or ``m_new = tl.maximum(x, m)`` followed by ``m = m_new`` in the
    same loop: the maximum carries across iterations (not an elementwise clamp of data)."""
    names = set(NAME.findall(a.rhs))
    if set(a.targets) & names:
        return True
    return any(set(b.targets) & names and set(a.targets) & set(NAME.findall(b.rhs)) for b in inside if b.line > a.line)


def _accumulates(a, weights: set[str], loaded: set[str]) -> bool:
    """``acc = acc * r + tl.sum(p[:, None] * v, 0)``, ``acc += tl.dot(p, v)``, ``acc += w * tv``:
    an accumulator that takes the exp weights times values loaded in the loop (the arguments of
    the exp calls themselves do not count: ``tl.sum(tl.exp(x - m))`` is a normaliser)."""
    rhs = _without_exp_args(a.rhs)
    used = set(NAME.findall(rhs))
    if not (CONTRACTION.search(rhs) or "*" in rhs) or not weights & used or not (loaded - weights) & used:
        return False
    return bool(set(a.targets) & used) or a.op == "+="


def _without_exp_args(rhs: str) -> str:
    from skel.miner.detectors.text import call_args

    out, pos = [], 0
    for call in EXP_CALL.finditer(rhs):
        if call.start() < pos:
            continue
        out.append(rhs[pos:call.start()])
        arg = call_args(rhs, call.end() - 1)
        pos = call.end() + len(arg) + 1
        out.append("EXP()")
    out.append(rhs[pos:])
    return "".join(out)


def _sources(ctx: Ctx, names: set[str], lp) -> set[str]:
    """Variables the running max is computed from inside the loop (one step back)."""
    out = set()
    for a in ctx.assigns:
        if lp.line < a.line <= lp.end_line and set(a.targets) & names:
            out |= set(NAME.findall(a.rhs))
    return out


def _attention_loops(ctx: Ctx) -> list[dict]:
    """Scores from a contraction of loaded operands (q . k), exp weights accumulating other loaded
    values (v): attention. Scores read from memory and weighted by themselves (an entropy or a
    loss over logits) are not."""
    return [r for r in _softmax_loops(ctx) if r["weighted"] and r["contracted"] and not r["scores_loaded"]]


def _merge_loops(ctx: Ctx) -> list[dict]:
    return [r for r in _softmax_loops(ctx) if r["weighted"] and r["scores_loaded"]]


def _split(ctx: Ctx) -> str | None:
    for name in sorted(_pid_names(ctx)):
        if SPLIT_VAR.search(name):
            return f"program id {name} selects a KV split"
    for p in ctx.p.params:
        if SPLIT_PARAM.match(p.name):
            return f"parameter {p.name} splits the KV range"
    merge = _merge_loops(ctx)
    if merge:
        return f"the kernel merges partial results by their stored maxima ({merge[0]['max']})"
    for r in _attention_loops(ctx):
        bound = _pid_bound(ctx, r["line"])
        if bound:
            return f"the KV loop at line {r['line']} runs over a range chosen by the program id ({bound})"
    return None


NOT_SPLIT_ROLES = {"batch", "sequence", "head", "batch-head", "sequence-head", "v-tile", "k-tile", "t-tile", "m-tile", "n-tile"}


def _split_ids(ctx: Ctx) -> tuple[set[str], set[str]]:
    """(ids, stops): the raw program ids and the variables the frontend names a split or chunk
    selector, which a KV range chosen by them splits; and the batch, sequence, head, V/K-tile
    and query-tile variables, where a trace stops (a causal bound i_t * BT limits KV, it does not
    split it)."""
    ids, stops = set(), set()
    for ax in ctx.p.program_axes:
        roles = dict(ax.roles)
        for n in {ax.var, *ax.derived}:
            if roles.get(n) in NOT_SPLIT_ROLES or QUERY_TILE.match(n):
                stops.add(n)
            elif n == ax.var or roles.get(n) in ("split", "chunk"):
                ids.add(n)
    return ids, stops


def _pid_bound(ctx: Ctx, line: int) -> str | None:
    """A split-selecting program id among what the loop's range is computed from, followed back
    through plain arithmetic only (a value read from memory, such as a sequence length at
    ``cu_seqlens + i_b``, ends the trace: it depends on the batch, not on a KV split)."""
    lp = ctx.loop_at(line)
    if lp is None:
        return None
    ids, stops = _split_ids(ctx)
    head = re.sub(r"^\s*for\s+\w+\s+in\s+", "", lp.iter_text)
    frontier, seen = [(n, lp.line) for n in NAME.findall(head)], set()
    while frontier:
        name, at = frontier.pop()
        if (name, at) in seen or len(seen) > 64:
            continue
        seen.add((name, at))
        if name in stops:
            continue
        if name in ids:
            return f"{name} (in {head.strip()[:60]})"
        d = ctx.last_def(name, at - 1)
        if d is None or re.search(r"tl\.load\s*\(|\[", d.rhs):
            continue
        rhs = d.rhs
        if len(d.targets) > 1:  # i_v, i_t, i_bh = a, b, c: follow only this name's element
            parts = _terms(rhs, ",") if "," in rhs else [rhs]
            idx = d.targets.index(name) if name in d.targets else -1
            rhs = parts[idx] if 0 <= idx < len(parts) else ""
        frontier += [(n, d.line) for n in NAME.findall(rhs)]
    return None


def _from_lse(ctx: Ctx, name: str, line: int, lse_vars: set[str]) -> bool:
    if name in lse_vars:
        return True
    return any(set(a.targets) & lse_vars or lse_vars & set(NAME.findall(a.rhs)) for a in ctx.closure(name, line, depth=2))


def kv_loop_online_softmax(ctx: Ctx) -> Check:
    rows = _softmax_loops(ctx)
    if not rows:
        return no("no loop keeps a running max and rescales by exp (no online softmax over KV)")
    att = _attention_loops(ctx)
    if not att:
        r = rows[0]
        why = ("its maxima are loaded partial results (a merge pass, not a KV walk)" if r["scores_loaded"] else
               "its scores are read from memory, not computed from a query and loaded keys: a softmax or a "
               "loss over logits, not attention over a KV sequence" if not r["contracted"] else
               "no accumulator takes the exp weights times values loaded in the loop: a softmax, loss or "
               "normaliser over one row, not attention over a KV sequence")
        return no(f"loop at line {r['line']} keeps a running max ({r['max']}) but {why}")
    return yes(f"loop at line {att[0]['line']}: {att[0]['max']}, exp weights accumulate loaded values")


def _query_rows(ctx: Ctx) -> str | None:
    """A program id that picks a block of query rows (``rows = pid_c * BLOCK_C + tl.arange(...)``
    feeding a load made before the KV loop): prefill, whatever the variable is called."""
    pids = {ax.var for ax in ctx.p.program_axes} | {n for ax in ctx.p.program_axes for n in ax.derived}
    loops = [ctx.loop_at(r["line"]) for r in _attention_loops(ctx)]
    first = min((lp.line for lp in loops if lp), default=None)
    if first is None:
        return None
    rows = {}
    for a in ctx.assigns:
        if a.line < first and "arange" in a.rhs:
            m = re.search(r"\b([A-Za-z_]\w*)\s*\*\s*[A-Za-z_]\w*", a.rhs)
            if m and m.group(1) in pids:
                rows.update({t: m.group(1) for t in a.targets})
    if not rows:
        return None
    ptrs = {t: a.rhs for a in ctx.assigns if a.line < first for t in a.targets}
    for mo in ctx.p.memops:
        if mo.kind == "load" and mo.line < first:
            text = mo.pointer + " " + " ".join(ptrs.get(n, "") for n in NAME.findall(mo.pointer))
            hit = set(NAME.findall(text)) & set(rows)
            if hit:
                return rows[sorted(hit)[0]]
    return None


def too_few_programs_for_sms(ctx: Ctx) -> Check:
    q = sorted(n for n in _pid_names(ctx) if QUERY_TILE.match(n))
    rows = _query_rows(ctx)
    if rows and not q:
        return no(f"program id {rows} picks a block of query rows (prefill), so the grid grows with the sequence "
                  "and fills the SMs")
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
    out = []
    for r in _attention_loops(ctx):
        lp = ctx.loop_at(r["line"])
        out.append(Hit.at(r["line"], lp.end_line if lp else r["line"], running_max=r["max"]))
    return out


def _lse_merge(ctx: Ctx) -> Hit | None:
    """A merge of partial states by their log-sum-exp: exp(lse_i - max) with both terms loaded."""
    lse_loads = [m for m in ctx.p.memops if m.kind == "load" and m.target and LSE_NAME.search(m.pointer + " " + m.target)]
    loaded = _loaded(ctx, ctx.p.line, ctx.p.end_line)
    for a in ctx.assigns:
        for call in EXP_CALL.finditer(a.rhs):
            from skel.miner.detectors.text import call_args

            arg = call_args(a.rhs, call.end() - 1)
            names = [n for n in NAME.findall(arg) if n not in ("tl", "None", "math", "inf", "max", "fmaxf")]
            if len(names) < 2:
                continue
            lse_vars = {m.target for m in lse_loads}
            if lse_vars and all(_from_lse(ctx, n, a.line, lse_vars) for n in names):
                return Hit.at(a.line, a.line, merge=f"{', '.join(a.targets)} = {a.rhs}", lse_load=lse_loads[0].line)
            if ctx.p.language == "cuda" and _pairwise_lse(ctx, names, a.line, loaded):
                return Hit.at(a.line, a.line, merge=f"{', '.join(a.targets)} = {a.rhs}")
    return None


def _pairwise_lse(ctx: Ctx, names: list[str], line: int, loaded: set[str]) -> bool:
    """CUDA's two-state merge: exp2(s_a - max(s_a, s_b)) with s_a, s_b read from score arrays."""
    def root(n: str) -> bool:
        if n in loaded:
            return True
        return any(set(NAME.findall(a.rhs)) & loaded and MAX_CALL.search(a.rhs) for a in ctx.defs_of(n, line))
    return all(root(n) for n in names)


def _helper_inputs(ctx: Ctx) -> set[str]:
    """A helper's stand-ins for loaded values: what its caller passes in (its parameters) and the
    state of the object it is a member of (names read before the helper assigns or declares them),
    followed through plain copies (``m_prev = m``). Loop counters are not inputs."""
    counters = {lp.var for lp in ctx.p.loops if lp.var}
    names = {p.name for p in ctx.p.params}
    assigned: set[str] = set()
    for a in ctx.assigns:
        if not a.decl:
            names |= {n for n in NAME.findall(a.rhs) if n not in assigned} - {"max", "math", "inf", "min"}
        assigned |= set(a.targets)
        if re.fullmatch(r"[A-Za-z_]\w*", a.rhs.strip()) and a.rhs.strip() in names:
            names |= set(a.targets)
    return names - counters


def _state_merge(ctx: Ctx) -> Hit | None:
    """A helper that merges a partial attention state into another: a pairwise LSE rescale
    (exp(m_a - max(m_a, m_b)) of two scalar maxima, passed in or members, no score array) whose
    weights combine the own and the incoming vector of partial outputs element by element
    (``o[i] = o[i] * f1 + other_o[i] * f2`` in a loop): the second pass of a KV split, called from
    the merge kernel's loop. Rescaling the own output only (``o[i] *= scale``, an online softmax
    step) or merging softmax statistics without an output vector is not such a merge."""
    from skel.miner.detectors.text import call_args

    inputs = _helper_inputs(ctx)
    counters = {lp.var for lp in ctx.p.loops if lp.var}
    hit = None
    for a in ctx.assigns:
        for call in EXP_CALL.finditer(a.rhs):
            arg = call_args(a.rhs, call.end() - 1)
            names = [n for n in NAME.findall(arg) if n not in ("None", "math", "inf", "max", "fmaxf")]
            if "[" not in arg and len(names) >= 2 and _pairwise_lse(ctx, names, a.line, inputs):
                hit = hit or Hit.at(a.line, a.line, merge=f"{', '.join(a.targets)} = {a.rhs}")
    if hit is None:
        return None
    weights = _derived(ctx, {t for a in ctx.assigns if EXP_CALL.search(a.rhs) for t in a.targets},
                       ctx.p.line, ctx.p.end_line)
    for a in ctx.assigns:
        if not any(lp.line < a.line <= lp.end_line for lp in ctx.p.loops) or "[" not in a.rhs:
            continue
        own = {n for t in a.targets for n in NAME.findall(t)}
        terms = _terms(a.rhs, "+")
        weighted = [set(NAME.findall(t)) for t in terms if "*" in t and set(NAME.findall(t)) & weights]
        incoming = [w for w in weighted if (w & inputs) - own - weights - counters]
        if len(weighted) >= 2 and incoming and any(w & own for w in weighted):
            return hit
    return None


def instances(ctx: Ctx) -> list[Hit]:
    if ctx.p.kind == "device-function":  # no grid of its own: only the merge it performs
        hit = _state_merge(ctx) if ctx.p.language == "cuda" else None
        return [hit] if hit else []
    out = []
    split = _split(ctx)
    lse_stores = [m for m in ctx.p.memops if m.kind == "store" and LSE_NAME.search(m.pointer + " " + ctx.statement(m.line))]
    if split and lse_stores and _attention_loops(ctx) and not _merge_loops(ctx):  # a loss's per-block LSE is no KV split
        m = lse_stores[0]
        out.append(Hit.at(m.line, m.line, split=split, lse_store=ctx.text(m.line)))
    merge = _merge_loops(ctx)
    if merge:
        lp = ctx.loop_at(merge[0]["line"])
        out.append(Hit.at(merge[0]["line"], lp.end_line if lp else merge[0]["line"], merge=merge[0]["max"]))
    elif not lse_stores:
        hit = _lse_merge(ctx)
        if hit:
            out.append(hit)
    return out


class SplitKvLseMerge(Rule):
    """Split a long KV sequence across programs with partial outputs and log-sum-exp, merged in a second pass."""

    LANGUAGES = LANGUAGES
    SAFETY = "unsafe"  # of the method docs.md describes (no automatic rewrite)
    KIND = "template"
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher
    HELPER_INSTANCES = True  # a helper's state merge (``_state_merge``) counts for the kernels calling it

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)
