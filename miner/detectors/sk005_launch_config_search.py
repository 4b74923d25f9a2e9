"""SK005 launch-config-search: search tile size, warps and stages instead of fixing them.

Opportunity: the kernel is launched in the file with a fixed launch configuration (a literal
num_warps / num_stages, or a literal tile size such as BV = 32) and is not autotuned.
Instance: ``@triton.autotune`` with two or more configs.
"""
from __future__ import annotations

import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes

CODE = "SK005"
LANGUAGES = ("triton",)
ALLOC = re.compile(r"\b(?:torch\.(?:empty|zeros|ones|full)|new_(?:empty|zeros|ones|full)|empty_like|zeros_like)\s*\(")
TILE = re.compile(r"^(B[A-Z]{1,2}|BLOCK\w*|\w*_BLOCK\w*|TILE\w*|BLOCK_SIZE\w*)$")


def _int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\d+", v.strip()):
        return int(v)
    return None


def _fixed(site) -> dict:
    """The tunable launch choices at one site: warps, stages and tile sizes (literals or shape
    expressions such as ``triton.next_power_of_2(K)``)."""
    out = {}
    for key in ("num_warps", "num_stages"):
        v = getattr(site, key)
        if _int(v) is not None:
            out[key] = _int(v)
    for name, value in site.constexpr_values:
        if not TILE.match(name):
            continue
        if _int(value) is not None:
            out[name] = _int(value)
        elif isinstance(value, str) and re.fullmatch(r"[\w\.\(\), *+/-]+", value) and "|" not in value:
            out[name] = value
    return out


def _allocations(ctx: Ctx, site) -> list[tuple[int, str]]:
    """Allocation lines in the launching function (torch.empty/zeros/new_empty ...)."""
    from skel.miner.detectors.sk010_gva_head_mapping import _enclosing_function

    start = _enclosing_function(ctx, site.line)
    if start is None:
        return []
    return [(ln, ctx.text(ln)) for ln in range(start, site.line) if ALLOC.search(ctx.text(ln))]


def _layout_tiles(ctx: Ctx, site) -> dict[str, str]:
    """Tile names that size a caller-side buffer (directly or through e.g. NT = cdiv(T, BT))."""
    out = {}
    for name in [k for k in _fixed(site) if k not in ("num_warps", "num_stages")]:
        names = {name}
        for ln, t in _assignments_before(ctx, site.line):
            if re.search(rf"\b({'|'.join(map(re.escape, names))})\b", t.split("=", 1)[1]):
                names.add(t.split("=", 1)[0].strip().split(",")[0].strip())
        pat = re.compile(rf"\b({'|'.join(map(re.escape, names))})\b")
        hit = next(((ln, t) for ln, t in _allocations(ctx, site) if pat.search(t)), None)
        if hit:
            out[name] = f"line {hit[0]}: {hit[1]}"
    return out


def _assignments_before(ctx: Ctx, line: int) -> list[tuple[int, str]]:
    from skel.miner.detectors.sk010_gva_head_mapping import _enclosing_function

    start = _enclosing_function(ctx, line) or line
    return [(ln, ctx.text(ln)) for ln in range(start, line) if re.match(r"^[A-Za-z_][\w, ]*=[^=]", ctx.text(ln))]


def _free(ctx: Ctx, site) -> dict:
    cache = ctx.cache.setdefault(f"{CODE}:free", {})  # asked by a condition and by candidates
    if id(site) not in cache:  # the profile's own site objects: alive as long as the context
        layout = _layout_tiles(ctx, site)
        cache[id(site)] = {k: v for k, v in _fixed(site).items() if k not in layout}
    return dict(cache[id(site)])


def launch_has_tunable_constexpr(ctx: Ctx) -> Check:
    if not ctx.p.launches:
        return no("the kernel is not launched in this file, so its launch configuration is not visible")
    rows = [(s, _fixed(s)) for s in ctx.p.launches if _fixed(s)]
    if not rows:
        return no("the launch passes no tile constexpr and no num_warps / num_stages")
    s, f = rows[0]
    return yes(f"line {s.line}: " + ", ".join(f"{k}={v}" for k, v in f.items()))


def not_autotuned(ctx: Ctx) -> Check:
    n = len(ctx.p.tune.autotune)
    if n > 1:
        return no(f"already autotuned over {n} configs (keys: {', '.join(ctx.p.tune.autotune_keys) or 'none'})")
    return yes("no @triton.autotune on the kernel" if not n else "@triton.autotune has a single config")


def tile_param_free_of_correctness_role(ctx: Ctx) -> Check:
    rows = [(s, _free(ctx, s)) for s in ctx.p.launches if _fixed(s)]
    good = [(s, f) for s, f in rows if f]
    if not good:
        if rows:
            s = rows[0][0]
            name, where = next(iter(_layout_tiles(ctx, s).items()))
            return no(f"{name} sizes a buffer the caller allocates ({where})")
        return no("no tunable launch parameter")
    s, f = good[0]
    return yes(f"line {s.line}: {', '.join(f)} only partition work")


CONDITIONS = {
    "launch-has-tunable-constexpr": launch_has_tunable_constexpr,
    "not-autotuned": not_autotuned,
    "tile-param-free-of-correctness-role": tile_param_free_of_correctness_role,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(s.line, s.line, **_free(ctx, s)) for s in ctx.p.launches if _free(ctx, s)]


def instances(ctx: Ctx) -> list[Hit]:
    configs = ctx.p.tune.autotune
    if len(configs) < 2:
        return []
    line = decorator_line(ctx, "triton.autotune") or ctx.p.line
    return [Hit.at(line, ctx.p.line, configs=len(configs), keys=list(ctx.p.tune.autotune_keys))]


def decorator_line(ctx: Ctx, name: str) -> int | None:
    """The line of decorator ``@name`` above the kernel's ``def`` (decorators span several lines)."""
    def_line = next((ln for ln in range(ctx.p.line, ctx.p.end_line + 1) if re.match(r"\s*(async\s+)?def\b", ctx.text(ln) + " ")), ctx.p.line)
    ln = def_line - 1
    while ln >= 1 and ln > def_line - 200:
        t = ctx.text(ln)
        if t.startswith("@" + name) or t.startswith("@" + name.split(".")[-1] + "("):
            return ln
        if not t or t.startswith(("def ", "class ")) or (not t.startswith(("@", ")", "}", "]", "#")) and ctx._lines[ln - 1][:1] not in " \t"):
            return None
        ln -= 1
    return None
