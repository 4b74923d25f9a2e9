"""SK005-launch-config-search: search tile size, warps and stages instead of fixing them.

Conditions (detector):
Opportunity: the kernel is launched in the file with a fixed launch configuration (a literal
num_warps / num_stages, or a literal tile size such as BV = 32), is not autotuned, and the file's
launches were not already chosen by this search (its ``# skel SK005`` marker).
Instance: ``@triton.autotune`` with two or more configs, or a launch under the search's marker.
"""
from __future__ import annotations

import bisect
import heapq
import re

from skel.miner.detectors.base import Check, Ctx, Hit, no, yes
from skel.miner.detectors.helpers import decorator_line, enclosing_function as _enclosing_function, indirect_launch, root_param
from skel.miner.triton_launch import sizes_lanes
from skel.rewriter.launch_search import MARKER
from skel.rewriter.launch_search import rewrite as _launch_rewrite
from skel.skeletons.rule import Rule, folder_code

CODE = folder_code(__file__)


# ---------------------------------------------------------------- conditions

LANGUAGES = ("triton",)
ALLOC = re.compile(r"\b(?:torch\.(?:empty|zeros|ones|full)|new_(?:empty|zeros|ones|full)|empty_like|zeros_like)\s*\(")
# substrings one of which every match of the pattern holds (a cheap test before the regex)
NEEDS = {"alloc": ("torch.", "new_", "_like"), "assign": ("=",)}
ASSIGN_LINE = re.compile(r"^[A-Za-z_][\w, ]*=[^=]")
WORDS = re.compile(r"\w+")
HELPER_CALL = re.compile(r"(?<![\w.])([A-Za-z_]\w*)\s*\(")  # a bare call: a jit helper (tl.* calls are attributes)
BUILTINS = {"min", "max", "int", "float", "len", "range", "abs", "bool", "print", "isinstance"}
TILE = re.compile(r"^(B[A-Z]{1,2}|BLOCK\w*|\w*_BLOCK\w*|TILE\w*|BLOCK_SIZE\w*)$")


def _int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\d+", v.strip()):
        return int(v)
    return None


def _fixed(ctx: Ctx, site) -> dict:
    """The tunable launch choices at one site: warps, stages and tile sizes (literals or shape
    expressions such as ``triton.next_power_of_2(K)``). A tile is a constexpr named as one, or one
    the grid divides a size by that also sizes a lane range (``SPLIT_SIZE``: ``sizes_lanes``)."""
    out = {}
    for key in ("num_warps", "num_stages"):
        v = getattr(site, key)
        if _int(v) is not None:
            out[key] = _int(v)
    for name, value in site.constexpr_values:
        if not (TILE.match(name) or (name in site.grid_divisors and _sizes_lanes(ctx, name))):
            continue
        if _int(value) is not None:
            out[name] = _int(value)
        elif isinstance(value, str) and re.fullmatch(r"[\w\.\(\), *+/-]+", value) and "|" not in value:
            out[name] = value
    return out


def _sizes_lanes(ctx: Ctx, name: str) -> bool:
    key = f"{CODE}:lanes"
    if key not in ctx.cache:
        ctx.cache[key] = "\n".join(ctx.text(ln) for ln in ctx.body)
    return sizes_lanes(ctx.cache[key], name)


def _layout_tiles(ctx: Ctx, site) -> dict[str, str]:
    """Tile names that size a caller-side buffer (directly or through e.g. NT = cdiv(T, BT)).

    In the launching function before the launch: the names computed from the tile (one pass in
    line order, through an index of the file's assignments by the words on their right) and the
    first allocation that mentions one of them (an index of allocation lines by word): a function
    launching thousands of kernels is not re-read for each.
    """

    out = {}
    start = _enclosing_function(ctx, site.line)
    given = dict(site.constexpr_values)
    for name in [k for k in _fixed(ctx, site) if k not in ("num_warps", "num_stages")]:
        names = _derived(ctx, name, start or site.line, site.line)
        value = given.get(name)
        passed = dict(site.args).get(name, "").strip()  # the text at the launch (a resolved local is a number)
        for text in {value, passed}:
            if isinstance(text, str) and text.isidentifier() and text != name:  # BLOCK_SIZE=block_size
                names |= _derived(ctx, text, start or site.line, site.line)
        hit = _first_allocation(ctx, names, start, site.line) if start is not None else None
        if hit:
            out[name] = f"line {hit}: {ctx.text(hit)}"
        elif (per_tile := _per_tile_access(ctx, name)) is not None:
            out[name] = per_tile
    return out


def _per_tile_access(ctx: Ctx, tile: str) -> str | None:
    """``n = tl.cdiv(N, BLOCK_SIZE); tl.load(s_ptr + pid_m * n + pid_n)``: the kernel reads or writes a
    tensor with one element per tile (its address counts tiles, and no lane offset enters it), so the
    tile size is that tensor's layout, whoever allocates it. The count may reach the address through
    offset and pointer variables that no lane offset enters (``S_ptr = S + s_offset + start_m``)."""
    count = re.compile(rf"\bcdiv\s*\([^()]*,\s*{re.escape(tile)}\s*\)")
    counts = {t for a in ctx.assigns if count.search(a.rhs) for t in a.targets}
    if not counts:
        return None
    lanes: set[str] = set()  # what lane offsets (tl.arange) flow into, through assignments
    for _ in range(4):
        grown = {t for a in ctx.assigns if "arange" in a.rhs or set(WORDS.findall(a.rhs)) & lanes for t in a.targets}
        if grown <= lanes:
            break
        lanes |= grown
    # a pointer built from a tile count alone (S_ptr = S + s_offset + start_m) counts tiles too; a count used as
    # a divisor or modulus (i_v, i_nh = pid % NV, pid // NV) decomposes a flat program id into coordinates instead
    for _ in range(4):
        grown = {t for a in ctx.assigns
                 if set(WORDS.findall(a.rhs)) & counts and not set(WORDS.findall(a.rhs)) & lanes
                 and not any(x in a.rhs for x in ("arange", "load(", "/", "%"))
                 for t in a.targets if t not in lanes}
        if grown <= counts:
            break
        counts |= grown
    for m in ctx.p.memops:
        words = set(WORDS.findall(m.pointer))
        if words & counts and not words & lanes and "arange" not in m.pointer:
            return f"line {m.line}: {m.kind} {m.pointer} has one element per {tile} tile"
    params = {p.name for p in ctx.p.params if not p.constexpr}
    for ln in range(ctx.p.line + 1, ctx.p.end_line + 1):  # such a pointer handed to a jit helper, which reads it
        text = ctx.statement(ln)                            # (K_scale_ptr in sageattention's _attn_fwd_inner)
        if not set(WORDS.findall(text)) & counts:
            continue
        for call in HELPER_CALL.finditer(text):
            if call.group(1) in BUILTINS or call.group(1) == "def":
                continue
            for word in set(WORDS.findall(text[call.end():])) & counts:
                if re.search(rf"[(,]\s*{re.escape(word)}\s*[,)]", text[call.end() - 1:]) and \
                        root_param(ctx, word, ln) in params:
                    return f"line {ln}: {word}, one element per {tile} tile, is passed to {call.group(1)}"
    return None


def _index(ctx: Ctx, what: str, pattern: re.Pattern, right_only: bool) -> dict[str, list[int]]:
    """word -> ascending lines (stripped text matching ``pattern``) where the word stands whole."""
    key = f"{CODE}:{what}"
    index = ctx.file.cache.get(key)
    if index is None:
        index = {}
        for ln, _ in ctx.file.lines_matching(f"{CODE}:{what}:lines", pattern.match if right_only else pattern.search,
                                             1, len(ctx.file.lines) + 1, needs=NEEDS[what]):
            t = ctx.text(ln)
            for w in set(WORDS.findall(t.split("=", 1)[1] if right_only else t)):
                index.setdefault(w, []).append(ln)
        ctx.file.cache[key] = index
    return index


def _derived(ctx: Ctx, name: str, lo: int, hi: int) -> set[str]:
    """``name`` and every assignment target computed from it on lines [lo, hi), in one pass in line
    order (a target counts from its own line on)."""
    index = _index(ctx, "assign", ASSIGN_LINE, True)
    names, done, heap = {name}, set(), []

    def follow(word: str, after: int) -> None:
        rows = index.get(word, ())
        i = bisect.bisect_right(rows, max(after, lo - 1))
        if i < len(rows) and rows[i] < hi:
            heapq.heappush(heap, (rows[i], i, word))

    follow(name, lo - 1)
    while heap:
        ln, i, word = heapq.heappop(heap)
        rows = index[word]
        if i + 1 < len(rows) and rows[i + 1] < hi:
            heapq.heappush(heap, (rows[i + 1], i + 1, word))
        if ln in done:
            continue
        done.add(ln)
        target = ctx.text(ln).split("=", 1)[0].strip().split(",")[0].strip()
        if target not in names:
            names.add(target)
            follow(target, ln)
    return names


def _first_allocation(ctx: Ctx, names: set[str], lo: int, hi: int) -> int | None:
    """The first allocation line in [lo, hi) that mentions one of ``names`` as a whole word."""
    index = _index(ctx, "alloc", ALLOC, False)
    best = None
    for w in names:
        rows = index.get(w, ())
        i = bisect.bisect_left(rows, lo)
        if i < len(rows) and rows[i] < hi and (best is None or rows[i] < best):
            best = rows[i]
    return best


def _caller_tiles(ctx: Ctx, site) -> dict[str, str]:
    """Tiles the launch passes straight from a parameter of the launching function
    (``QUANT_BLOCK=blocksize`` in ``def dequantize(A, blocksize, ...)``): the caller decides them, and
    a search that replaced the value would silently ignore the caller's argument (the rewrite keeps
    them for the same reason)."""
    start = _enclosing_function(ctx, site.line)
    if start is None:
        return {}
    m = re.match(r"\s*(?:async\s+)?def\s+(\w+)\s*\((.*)\)", ctx.statement(start))
    if not m:
        return {}
    params = set(re.findall(r"(?:^|,)\s*\**([A-Za-z_]\w*)", re.sub(r"\[[^\]]*\]|\([^()]*\)|=[^,]*", "", m.group(2))))
    given = dict(site.constexpr_values)
    args = dict(site.args)
    body = range(start + 1, site.line)
    out = {}
    for name in _fixed(ctx, site):
        text = str(args.get(name, given.get(name, ""))).strip()
        chain = [text]
        for _ in range(3):  # through plain aliases: CHUNK_LEN = chunk_size
            if chain[-1] in params or not chain[-1].isidentifier():
                break
            alias = re.compile(rf"\s*{re.escape(chain[-1])}\s*=\s*([A-Za-z_]\w*)\s*(?:#.*)?$")
            hits = [a.group(1) for ln in body if (a := alias.match(ctx.file.lines[ln - 1]))]
            if len(hits) != 1:
                break
            chain.append(hits[0])
        if chain[-1] in params:
            via = f" through {' = '.join(chain[:-1])}" if len(chain) > 1 else ""
            out[name] = f"{name}={text} is the caller's ({chain[-1]} is a parameter of {m.group(1)}, line {start}{via})"
    return out


def _free(ctx: Ctx, site) -> dict:
    cache = ctx.cache.setdefault(f"{CODE}:free", {})  # asked by a condition and by candidates
    if id(site) not in cache:  # the profile's own site objects: alive as long as the context
        held = {**_caller_tiles(ctx, site), **_layout_tiles(ctx, site)}
        cache[id(site)] = {k: v for k, v in _fixed(ctx, site).items() if k not in held}
    return dict(cache[id(site)])


def launch_has_tunable_constexpr(ctx: Ctx) -> Check:
    if not ctx.p.launches:
        return no("the kernel is not launched in this file, so its launch configuration is not visible")
    rows = [(s, _fixed(ctx, s)) for s in ctx.p.launches if _fixed(ctx, s)]
    if not rows:
        return no("the launch passes no tile constexpr and no num_warps / num_stages")
    s, f = rows[0]
    return yes(f"line {s.line}: " + ", ".join(f"{k}={v}" for k, v in f.items()))


def _run_time_configs(ctx: Ctx) -> str | None:
    """The source of an autotune config list built when the module runs (a function call, a
    comprehension over values not known statically), or None."""
    return next((dict(c).get("text", "") for c in ctx.p.tune.autotune if dict(c).get("built_at_run_time")), None)


def not_autotuned(ctx: Ctx) -> Check:
    n = len(ctx.p.tune.autotune)
    built = _run_time_configs(ctx)
    if built is not None:
        return no(f"already autotuned over configs built at run time ({built[:80]}; keys: "
                  f"{', '.join(ctx.p.tune.autotune_keys) or 'none'})")
    if n > 1:
        return no(f"already autotuned over {n} configs (keys: {', '.join(ctx.p.tune.autotune_keys) or 'none'})")
    return yes("no @triton.autotune on the kernel" if not n else "@triton.autotune has a single config")


def tile_param_free_of_correctness_role(ctx: Ctx) -> Check:
    rows = [(s, _free(ctx, s)) for s in ctx.p.launches if _fixed(ctx, s)]
    good = [(s, f) for s, f in rows if f]
    if not good:
        if rows:
            s = rows[0][0]
            layout = _layout_tiles(ctx, s)
            if layout:
                name, where = next(iter(layout.items()))
                return no(f"{name} sizes a buffer the caller allocates ({where})")
            return no("; ".join(_caller_tiles(ctx, s).values()) + ": the caller decides them")
        return no("no tunable launch parameter")
    s, f = good[0]
    return yes(f"line {s.line}: {', '.join(f)} only partition work")


def _marked(ctx: Ctx) -> list[int]:
    """Lines of the file carrying the search's own marker (``# skel SK005: launch config ...``)."""
    key = f"{CODE}:marked"
    if key not in ctx.file.cache:
        ctx.file.cache[key] = ([i for i, ln in enumerate(ctx.file.lines, 1) if MARKER in ln]
                               if MARKER in ctx.source else [])
    return ctx.file.cache[key]


def not_already_searched(ctx: Ctx) -> Check:
    marked = _marked(ctx)
    if marked:
        return no(f"line {marked[0]}: the file's launch config was already chosen by a search "
                  f"({ctx.text(marked[0]).strip()})")
    return yes(f"no '# {MARKER}' marker in the file")


def launched_directly(ctx: Ctx) -> Check:
    lines = [s.line for s in ctx.p.launches if _free(ctx, s)]
    if not lines:
        return no("no tunable launch parameter")
    why = indirect_launch(ctx, lines)
    return no(why) if why else yes(f"line {lines[0]}: a direct launch the search can rewrite")


CONDITIONS = {
    "launch-has-tunable-constexpr": launch_has_tunable_constexpr,
    "not-autotuned": not_autotuned,
    "not-already-searched": not_already_searched,
    "tile-param-free-of-correctness-role": tile_param_free_of_correctness_role,
    "launched-directly": launched_directly,
}


def candidates(ctx: Ctx) -> list[Hit]:
    return [Hit.at(s.line, s.line, **_free(ctx, s)) for s in ctx.p.launches if _free(ctx, s) and not s.via]


def instances(ctx: Ctx) -> list[Hit]:
    """An autotuned kernel, or a launch of it marked as chosen by this search."""
    out = [Hit.at(s.line, s.line, searched=ctx.text(m).strip()) for s in ctx.p.launches
           for m in _marked(ctx) if m < s.line and all(ctx.text(x).strip().startswith("#") for x in range(m, s.line))]
    configs = ctx.p.tune.autotune
    if len(configs) < 2 and _run_time_configs(ctx) is None:
        return out
    line = decorator_line(ctx, "triton.autotune") or ctx.p.line
    return [Hit.at(line, ctx.p.line, configs=len(configs), keys=list(ctx.p.tune.autotune_keys)), *out]


class LaunchConfigSearch(Rule):
    """Search tile sizes, warps and stages under resource constraints instead of hand-picked launch constants."""

    SAFETY = "unsafe"
    KIND = "launch-search"
    LANGUAGES = LANGUAGES
    CONDITIONS = CONDITIONS
    HELPERS = False  # needs the kernel's grid, launch or launcher

    def instances(self, ctx):
        return instances(ctx)

    def sites(self, ctx):
        return candidates(ctx)

    rewrite = staticmethod(_launch_rewrite)
