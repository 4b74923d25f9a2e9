"""SK010-native-gva-head-mapping: index the shared key head in the kernel instead of

Conditions (detector):
materialising repeated q/k heads on the host.

With grouped value attention (HV value heads sharing H key heads) a kernel can map value head
``i_hv`` to key head ``i_hv // (HV // H)`` and read q/k once per group. Opportunity: the
function that launches the kernel expands a tensor over heads (``repeat_interleave``,
``repeat``, ``expand``) and passes the result to the kernel, which has no head mapping.
Instance: the mapping itself, a head index divided by the group size in the kernel.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.helpers import enclosing_function as _enclosing_function, root_param
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

HEADISH = r"(?:i_h\w*|\w*head\w*|h_?idx|hq|hv|i_hq|i_hv|h|\w+_h(?:q|k|v|kv)?)"  # off_h, off_hk, pid_hq
GROUP = (
    rf"\b(?P<num>{HEADISH})\s*(?://|/)\s*(?:\(\s*\w+\s*(?://|/)\s*\w+\s*\)"
    r"|(?:G|NG|GS|n_rep|N_REP|group_size|num_groups|kv_group_num|gqa_group_size|\w*GROUP\w*|\w*group\w*|\w*_per_kv\w*|\w*ratio\w*)\b)"
)
GROUP_RE = re.compile(GROUP)
EXPAND_RE = re.compile(r"([A-Za-z_]\w*)\s*=\s*.*?\b([A-Za-z_]\w*)\s*\.\s*(repeat_interleave|repeat|expand)\s*\(|([A-Za-z_]\w*)\s*=\s*.*?\b(?:torch\.)?repeat_interleave\s*\(\s*([A-Za-z_]\w*)")
EXPAND_NEEDS = ("repeat", "expand")  # every EXPAND_RE match holds one of these


RATIO_ARG = re.compile(r"//|\b(?:G|NG|n_rep|N_REP|num_kv_groups|\w*group\w*|\w*GROUP\w*|\w*ratio\w*|\w*_per_kv\w*)\b")


def _pid_derived(ctx: Ctx) -> set[str]:
    """Program ids and what is computed from them (forward): a head index comes from the grid."""
    cache = ctx.cache.setdefault(CODE, {})
    if "pid" not in cache:
        names = set()
        for ax in ctx.p.program_axes:
            names |= {ax.var, *ax.derived, *(v for v, _ in ax.roles)}
        rhs_names = [(a, set(_NAME.findall(a.rhs))) for a in ctx.assigns]  # parsed once, not once per pass
        loops = [(lp.var, set(_NAME.findall(lp.iter_text))) for lp in ctx.p.loops if lp.var]
        for _ in range(3):  # assignments, and loop variables of persistent loops (for task in range(pid, n, step))
            before = len(names)
            for a, used in rhs_names:
                if used & names:
                    names.update(a.targets)
            for var, used in loops:
                if used & names:
                    names.add(var)
            if len(names) == before:
                break
        cache["pid"] = names
    return cache["pid"]


_NAME = re.compile(r"[A-Za-z_]\w*")


def _mapping(ctx: Ctx) -> list[tuple[int, str]]:
    """``i_h = i_hv // (HV // H)``, ``cur_kv_head = cur_head // kv_group_num``: a head index from
    the grid divided by the group size, assigned to a head index (not a loop count such as
    ``NH = H // G``, whose numerator is a shape)."""
    cache = ctx.cache.setdefault(CODE, {})
    if "map" in cache:
        return cache["map"]
    out = []
    pids = None
    for a in ctx.assigns:
        m = GROUP_RE.search(a.rhs)
        if not m or not (any(re.fullmatch(HEADISH, t, re.I) or re.search(r"head", t, re.I) for t in a.targets)
                         or _address(ctx, a)):
            continue
        pids = _pid_derived(ctx) if pids is None else pids  # only for kernels with a candidate division
        if m.group("num") in pids and not _divmod_split(ctx, m.group("num"), m.group(0)[len(m.group("num")):]):
            out.append((a.line, f"{', '.join(a.targets)} = {a.rhs}"))
    cache["map"] = out
    return out


def _address(ctx: Ctx, a) -> bool:
    """``K_ptrs = K + (off_h // num_kv_groups) * stride_kh``: the division sits inside a pointer built from a
    tensor parameter (the key head computed in the address, never named), which maps the head all the same."""
    params = {p.name for p in ctx.p.params if not p.constexpr}
    return len(a.targets) == 1 and root_param(ctx, a.targets[0], a.line + 1) in params


def _divmod_split(ctx: Ctx, num: str, division: str) -> bool:
    """``group_idx = i % n_groups; head_idx = i // n_groups``: the same index also taken modulo the
    same divisor splits one flat program-id axis into two coordinates; it maps no head to a shared one."""
    divisor = re.sub(r"^\s*//?\s*", "", division).strip()
    modulo = re.compile(rf"\b{re.escape(num)}\s*%\s*{re.escape(divisor)}(?!\w)")
    return any(modulo.search(a.rhs) for a in ctx.assigns)


def _expansions(ctx: Ctx) -> list[tuple[int, int, str, str]]:
    """(expansion line, launch line, expanded variable, text) for tensors repeated over heads
    in the function that launches the kernel and passed to the launch."""
    cache = ctx.cache.setdefault(CODE, {})
    if "exp" in cache:
        return cache["exp"]
    out = []
    for site in ctx.p.launches:
        start = _enclosing_function(ctx, site.line)
        if start is None:
            continue
        passed = " ".join(v for _, v in site.args)
        for ln, m in ctx.file.lines_matching(f"{CODE}:expand", EXPAND_RE.search, start, site.line,
                                             needs=EXPAND_NEEDS):
            t = ctx.text(ln)
            var = m.group(1) or m.group(4)
            # over heads by the ratio of two head counts (repeat_interleave(HV // H), expand(..., G, K)),
            # not a broadcast of a per-token or per-channel tensor (scale.expand(B, L, C))
            if re.search(rf"\b{re.escape(var)}\b", passed) and RATIO_ARG.search(t[m.end() - 1:] if m.group(3) else t):
                out.append((ln, site.line, var, t))
    cache["exp"] = out
    return out


def _expanded_params(ctx: Ctx) -> list[tuple[str, int]]:
    """(kernel parameter, expansion line) receiving a head-expanded tensor."""
    out = []
    for ln, ll, var, _ in _expansions(ctx):
        for site in ctx.p.launches:
            if site.line == ll:
                out += [(p, ln) for p, v in site.args if re.search(rf"\b{re.escape(var)}\b", v)]
    return out


def _written(ctx: Ctx, param: str) -> str | None:

    for m in ctx.p.memops:
        if m.kind in ("store", "atomic") and root_param(ctx, m.pointer, m.line) == param:
            return f"line {m.line}: {m.kind} through {m.pointer}"
    return None


def host_expands_heads(ctx: Ctx) -> Check:
    rows = _expansions(ctx)
    if not rows:
        return no("no input is expanded over heads by a group ratio before the launch")
    return yes("; ".join(f"line {ln}: {t} (passed to the launch at line {ll})" for ln, ll, _, t in rows[:3]))


def kernel_indexes_expanded_head(ctx: Ctx) -> Check:
    rows = _mapping(ctx)
    if rows:
        return no(f"the kernel already maps the head index down: line {rows[0][0]}: {rows[0][1]}")
    return yes("the kernel indexes every tensor with one head index, so each group of programs reads identical rows")


def expanded_tensor_read_only(ctx: Ctx) -> Check:
    params = _expanded_params(ctx)
    if not params:
        return no("no kernel parameter receives an expanded tensor")
    written = [(p, w) for p, _ in params if (w := _written(ctx, p))]
    if written:
        return no(f"the kernel writes the expanded tensor {written[0][0]} ({written[0][1]})")
    return yes(f"{', '.join(p for p, _ in params)} only loaded by the kernel")


CONDITIONS = {
    "host-expands-heads": host_expands_heads,
    "kernel-indexes-expanded-head": kernel_indexes_expanded_head,
    "expanded-tensor-read-only": expanded_tensor_read_only,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(ln, ln, expanded=var, expansion=t, launch_line=ll) for ln, ll, var, t in _expansions(ctx)]


def instances(ctx: Ctx) -> list[Hit]:
    return [Hit.at(ln, ln, mapping=t) for ln, t in _mapping(ctx)]


class NativeGvaHeadMapping(Rule):
    """Map each value head to its key head in the kernel instead of expanding q/k on the host."""

    SAFETY = "safe"  # of the method docs.md describes (no automatic rewrite)
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)
