"""Mine a kernel repository's history; report rediscovered library skeletons and the top new candidates.

    python benchmarks/history_fla.py REPO --under fla/ops [--max-commits N] [--catalog PATH] > out.md

REPO is a checkout or a bare repository (e.g. the fla-org/flash-linear-attention mirror).
Matching a candidate to a library skeleton is by its edits, not by name: each library
skeleton's before.py/after.py pair is diffed with the same machinery as history, and a
candidate matches when one of its edits adds a specific API token (a function or dtype
name, a keyword, a string constant, a long constant) that one of the skeleton's edits
adds, and removes one that the skeleton's edit removes (or the skeleton's edit removes
none). A statement moved into or out of a block counts as adding "move:<its API tokens>".
"""
from __future__ import annotations

import argparse
import ast
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

from skel.skeletons.library import load_library
from skel.catalog.store import open_catalog
from skel.miner.history import mine_history
from skel.miner.history_cluster import distill
from skel.miner.history_edits import diff_files
from skel.miner.history_patterns import compound, numbered

NAME = "fla-org/flash-linear-attention"
# Tokens too common to identify a skeleton on their own (masks, casts, index arithmetic).
GENERIC = {"to", "tl", "triton", "torch", "load", "store", "program_id", "sum", "float32", "cdiv", "jit",
           "arange", "zeros", "where", "op:*", "op:+", "op:-", "op://", "op:%", "op:/", "mask=", "other=", "dtype=",
           "axis=", "dtype", "element_ty", "boundary_check=", "padding_option=", "'zero'", "make_block_ptr"}


def tokens(text: str) -> set[str]:
    text = re.sub(r"\$\d+", "_", text)
    out = {m.split(".")[-1] for m in re.findall(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?=\s*\()", text)}
    out |= {m.split(".")[-1] for m in re.findall(r"\btl\.[A-Za-z_][\w.]*", text)}
    out |= {k + "=" for k in re.findall(r"\b([A-Za-z_]\w*)=(?!=)", text)}
    out |= set(re.findall(r"'[^']*'|\"[^\"]*\"", text))
    out |= set(re.findall(r"\b\d+\.\d{4,}\b", text))
    out |= {"op:" + o for o in re.findall(r"(?<![*/])(//|/|\*)(?![*/=])", text)}
    return {t for t in out if t != "_"}


def signature(edits) -> list[tuple[set[str], set[str]]]:
    """(removed, added) API tokens per edit; a delete+insert of one statement is a move."""
    sig = []
    deleted = {e.before for e in edits if e.kind == "delete"}
    for e in edits:
        if e.kind == "insert" and e.after in deleted:
            sig.append((set(), {"move:" + t for t in tokens(e.after)}))
        elif e.kind == "delete" and any(x.kind == "insert" and x.after == e.before for x in edits):
            continue
        else:
            b, a = tokens(e.before), tokens(e.after)
            sig.append((b - a, a - b))
    return sig


def library_signatures():
    out = {}
    for sk in load_library():
        edits = []
        for ke in diff_files("example.py", ast.parse(sk.before), ast.parse(sk.after)):
            pe, _ = numbered(compound(ke).texts)
            edits += pe
        out[sk.code] = (sk.name, signature(edits))
    return out


def matches(cand_sig, lib_sig) -> bool:
    for rc, ac in cand_sig:
        for rl, al in lib_sig:
            if (ac & al) - GENERIC and (not rl or (rc & rl)):
                return True
    return False


def git_head(repo: str) -> str:
    return subprocess.run(["git", "-C", repo, "log", "-1", "--format=%H %cI"], capture_output=True, text=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("repo")
    ap.add_argument("--under", action="append", default=[])
    ap.add_argument("--max-commits", type=int)
    ap.add_argument("--catalog", default="/tmp/skel-history-bench.sqlite")
    ap.add_argument("--name", default=NAME, help="how the repository is named in the report")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()

    t0 = time.perf_counter()
    first = mine_history(args.repo, catalog=args.catalog, paths=tuple(args.under), max_commits=args.max_commits,
                         repo_name=args.name, force=True)
    t_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = mine_history(args.repo, catalog=args.catalog, paths=tuple(args.under), repo_name=args.name)
    t_again = time.perf_counter() - t0
    with open_catalog(args.catalog) as cat:
        patterns = distill(cat.history_edits())

    libsig = library_signatures()
    rediscovered: dict[str, list] = {}
    for p in patterns:
        sig = signature(p.edits)
        for code, (_, ls) in libsig.items():
            if matches(sig, ls):
                rediscovered.setdefault(code, []).append(p)

    print(f"# History mining: {args.name}\n")
    print(f"- date: {datetime.now(timezone.utc).isoformat(timespec='seconds')}")
    print(f"- command: `python benchmarks/history_fla.py {args.repo} {' '.join('--under ' + u for u in args.under)}"
          f"{' --max-commits ' + str(args.max_commits) if args.max_commits else ''}"
          f"{' --name ' + args.name if args.name != NAME else ''}`")
    print(f"- machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
          f"2 cores (single process), no GPU")
    print(f"- repository head: {git_head(args.repo)}")
    print(f"- first run (full): {first.commits} commits walked, {first.kernel_commits} changed a kernel function, "
          f"{first.files} file versions diffed, {first.kernel_edits} kernel edits, {first.blobs} blobs read, "
          f"{len(first.errors)} unparsable versions, **{t_first:.1f} s**")
    print(f"- second run (incremental, nothing new): {again.commits} commits walked, {again.blobs} blobs read, "
          f"**{t_again:.2f} s**")
    print(f"- candidates (support >= 2 distinct (commit, kernel)): {len(patterns)}; "
          f"with >= 2 distinct commits: {sum(p.commits >= 2 for p in patterns)}\n")

    print("## Library skeletons rediscovered from history alone\n")
    print(f"{len(rediscovered)} of {len(libsig)}: {', '.join(sorted(rediscovered)) or 'none'}\n")
    print("| skeleton | best matching candidate | support | its pattern | first occurrence |")
    print("|---|---|---|---|---|")
    for code, (name, _) in libsig.items():
        ps = sorted(rediscovered.get(code, []), key=lambda p: (-p.commits, -p.score, p.code))
        if not ps:
            print(f"| {code} {name} | not found | | | |")
            continue
        p = ps[0]
        o = p.occurrences[0]
        print(f"| {code} {name} | {p.code} ({len(ps)} candidates) | {p.kernels} kernels, {p.commits} commits | "
              f"{_pat(p)} | {o.commit[:10]} {o.path}:{o.line} \"{_md(o.message)}\" |")

    print(f"\n## Top {args.top} new candidates (no library match; >= 2 distinct commits, by score)\n")
    matched = {p.code for ps in rediscovered.values() for p in ps}
    new = [p for p in patterns if p.code not in matched and p.commits >= 2][: args.top]
    print("| code | score | support | pattern | conditions | provenance (first 2) |")
    print("|---|---|---|---|---|---|")
    for p in new:
        prov = "<br>".join(f"{o.commit[:10]} {o.path}:{o.line} {o.kernel} \"{_md(o.message)}\"" for o in p.occurrences[:2])
        conds = "; ".join(c.id for c in p.conditions)
        print(f"| {p.code} | {p.score:g} | {p.kernels} kernels, {p.commits} commits ({p.perf_commits} perf) | "
              f"{_pat(p)} | {conds} | {prov} |")
    print("\n## Gate confirmation\n")
    print("Not part of this run (CPU only): `bash benchmarks/preview_h200.sh` judges the catalog's candidates on the "
          "`kernels/` targets on a GPU; until then every candidate above is unconfirmed preview evidence.")
    return 0


def _pat(p) -> str:
    text = " ; ".join(f"{e.kind}: `{e.before or '-'}` => `{e.after or '-'}`" for e in p.edits)
    return _md(text if len(text) < 220 else text[:217] + "...")


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


if __name__ == "__main__":
    sys.exit(main())
