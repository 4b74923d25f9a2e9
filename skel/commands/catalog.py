"""`skel catalog list|show|search|check|promote|prompt|repair`: browse and check the skeleton library, and keep
the catalog usable."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from skel.skeletons.library import (
    CATEGORIES,
    DOC_HEADINGS,
    LIFECYCLES,
    TARGETS,
    Library,
    LibraryError,
    Skeleton,
    check_library,
    default_root,
    load_library,
)
from skel.commands.common import add_catalog, add_json, add_library, emit_json, library_dirs, load_user_library
from skel.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UsageError


def register(sub) -> None:
    parser = sub.add_parser(
        "catalog",
        help="browse the skeleton library and its evidence",
        description="Browse the skeleton library: list, show, search and check skeletons. "
        "Evidence (mined instances, measured verdicts) comes from the catalog database.",
    )
    verbs = parser.add_subparsers(dest="catalog_verb", metavar="ACTION", parser_class=type(parser))
    parser.set_defaults(func=lambda args: _no_action(parser))

    p = verbs.add_parser("list", help="list skeletons (filters combine with AND)",
                         description="List the skeletons, one line each (or --json with every field and its evidence).")
    p.add_argument("--category", choices=CATEGORIES)
    p.add_argument("--target", choices=TARGETS, help="target language")
    p.add_argument("--lifecycle", "--status", dest="lifecycle", choices=LIFECYCLES)
    p.add_argument("--origin", choices=("library", "mined"),
                   help="library: the skeletons of the library (and --library folders) only; mined: only the "
                        "candidates `skel mine --history/--variants` distilled (SKP..., lifecycle preview); default both, "
                        "listed apart")
    p.add_argument("--family", help="kernel family, e.g. kda_decode (families are spelt as kernels/ names its targets)")
    _common(p)
    p.set_defaults(func=cmd_list)

    p = verbs.add_parser("promote", help="write a library skeleton folder from a history candidate (SKP...)",
                         description="Write skeletons/SKnnn-<name>/ (skeleton.toml, docs.md, before.py, after.py) "
                         "from a candidate distilled by `skel mine --history`, for a person to review and finish. "
                         "The folder is generated; --check proves it is still what the generator writes "
                         "(exit 1 and one line per differing file otherwise).")
    p.add_argument("code", help="candidate code, e.g. SKP3FA91")
    p.add_argument("--as", dest="as_code", metavar="SKnnn", help="library code to use (default: the next free one)")
    p.add_argument("--check", action="store_true", help="do not write: compare the promoted folder with the generator's output")
    _common(p)
    p.set_defaults(func=cmd_promote)

    p = verbs.add_parser("show", help="show one skeleton: docs, conditions, constraints, example, evidence",
                         description="Show one skeleton in full, with its evidence from the catalog.")
    p.add_argument("code", help="skeleton code, e.g. SK001, or a preview candidate, e.g. SKP3FA91")
    _common(p)
    p.set_defaults(func=cmd_show)

    p = verbs.add_parser("search", help="search names, titles and docs",
                         description="Search skeleton names, titles, docs, conditions and methods. "
                         "All words must match (case-insensitive); results are ranked by hits.")
    p.add_argument("text", nargs="+", help="words to search for")
    _common(p)
    p.set_defaults(func=cmd_search)

    p = verbs.add_parser("check", help="validate every skeleton folder (exit 2 on problems)",
                         description="Validate every skeleton folder: metadata fields, doc headings, "
                         "example kernels, cross references. Prints file:line: field: problem.")
    add_json(p)
    add_library(p)
    p.add_argument("--golden", action="store_true",
                   help="also run each folder's golden checks (fires on examples/before.py, not on after.py; "
                        "rewrite(before) == after); with --library, only the added folders' skeletons")
    add_catalog(p, used=False)
    p.set_defaults(func=cmd_check)

    # `catalog prompt` (the agent brief) and `catalog repair` (salvage a damaged catalog) live in their own
    # modules: skel/commands/catalog_prompt.py, skel/commands/catalog_repair.py.
    from skel.commands import catalog_exchange, catalog_prompt, catalog_repair

    catalog_prompt.add_parser(verbs, _common)
    catalog_repair.add_parser(verbs)
    catalog_exchange.add_parser(verbs)  # export, import|merge: catalogs of many machines merged


def _common(p: argparse.ArgumentParser) -> None:
    add_json(p)
    add_library(p)
    add_catalog(p)


def _no_action(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return EXIT_USAGE


def _library(args) -> Library:
    return load_user_library(args)


def _evidence(args, codes: list[str]) -> dict[str, dict]:
    """Evidence per skeleton code from the catalog database; empty when there is no database yet."""
    from skel.catalog import store

    path = args.catalog or store.default_catalog_path()
    if not Path(path).exists():
        return {c: store.Evidence.empty(c).to_json() for c in codes}
    with store.open_catalog(path) as cat:
        return {c: cat.evidence(c).to_json() for c in codes}


def _entry(sk: Skeleton, evidence: dict) -> dict:
    data = sk.to_json()
    data["evidence"] = evidence.get("items", [])
    data["evidence_summary"] = {k: v for k, v in evidence.items() if k != "items"}
    return data


def cmd_list(args) -> int:
    lib = _library(args)
    chosen = [
        s for s in lib
        if args.origin != "mined"
        and (not args.category or s.category == args.category)
        and (not args.target or args.target in s.targets)
        and (not args.lifecycle or s.lifecycle == args.lifecycle)
        and (not args.family or args.family.replace("-", "_") in s.families)
    ]
    # History/variant candidates (SKP...) are preview skeletons without a category or family yet;
    # ranked after their gate verdicts: skel/commands/catalog_preview.py.
    from skel.commands import catalog_preview

    cands = []
    if (args.origin != "library" and args.lifecycle in (None, "preview") and not args.category and not args.family
            and args.target in (None, "triton")):
        cands = catalog_preview.ranked(args)
    if args.json:
        ev = _evidence(args, [s.code for s in chosen])
        emit_json([{**_entry(s, ev[s.code]), "origin": "library"} for s in chosen]
                  + [catalog_preview.entry(c, st) for c, st in cands])  # origin: history or variants
        return EXIT_OK
    if not chosen and not cands:
        print("no skeleton matches these filters")
        return EXIT_OK
    width = max([len(s.name) for s in chosen] + [len(c.name) for c, _ in cands])
    if chosen and cands:
        print(f"library skeletons ({len(chosen)}):")
    for s in chosen:
        print(f"{s.code}  {s.name:<{width}}  {s.category:<11} {s.lifecycle:<10} {s.safety:<6} {','.join(s.targets)}")
    if chosen and cands:
        print(f"\nmined candidates ({len(cands)}; `skel mine --history/--variants`, not in the library; "
              "`skel catalog promote CODE` adds one):")
    for c, st in cands:
        print(catalog_preview.list_line(c, st, width))
    return EXIT_OK


def cmd_promote(args) -> int:
    from skel.catalog import store
    from skel.skeletons import promote
    from skel.catalog.candidates import CANDIDATE_RE
    from skel.skeletons.library import CODE_RE, load_skeleton

    root = Path(args.library[-1] if args.library else default_root())  # where the folder is written
    path = args.catalog or store.default_catalog_path()
    if not CANDIDATE_RE.match(args.code.upper()):
        raise UsageError(f"{args.code!r}: a candidate code looks like SKP3FA91 (`skel catalog list --status preview`)")
    if not root.is_dir():
        raise UsageError(f"--library {root}: no such folder")
    cand = None
    if Path(path).exists():
        with store.open_catalog(path) as cat:
            cand = cat.candidate(args.code)
    if cand is None:
        raise UsageError(f"no candidate {args.code!r} in the catalog {path} (run `skel mine --history REPO`, "
                         "then `skel catalog list --status preview`)")
    existing = promote.find_promoted(root, cand.code)
    if args.as_code and not CODE_RE.match(args.as_code.upper()):
        raise UsageError(f"--as {args.as_code!r}: a library code looks like SK014")
    if args.check:
        if existing is None:
            raise UsageError(f"{cand.code}: no folder under {root} was generated from it (nothing to check)")
        p = promote.render(cand, existing.name[:5], root)
        p = promote.Promotion(p.candidate, p.code, existing, p.files)
        problems = promote.check(p)
        if args.json:
            emit_json({"candidate": cand.code, "folder": str(existing), "problems": problems})
        else:
            for line in problems:
                print(line, file=sys.stderr)
            if not problems:
                print(f"{existing}: up to date with candidate {cand.code}")
        return EXIT_FINDINGS if problems else EXIT_OK
    if existing is not None:
        raise UsageError(f"{cand.code} was already promoted to {existing} (use --check to verify it)")
    code = (args.as_code or promote.next_code(root)).upper()
    if any(p.name.startswith(code) for p in root.iterdir()):
        raise UsageError(f"{code} is already used in {root}; codes are never reused (pick another with --as)")
    p = promote.render(cand, code, root)
    promote.write(p)
    sk, problems = load_skeleton(p.folder)
    with store.open_catalog(path) as cat:
        cat.mark_promoted(cand.code, code)
    if args.json:
        emit_json({"candidate": cand.code, "code": code, "folder": str(p.folder),
                   "problems": [str(x) for x in problems]})
    else:
        print(f"wrote {p.folder} from {cand.code}; review it, add a detector for its conditions, "
              f"then run `skel catalog check`")
        for x in problems:
            print(f"problem: {x}", file=sys.stderr)
    return EXIT_USAGE if problems else EXIT_OK


def cmd_show(args) -> int:
    from skel.catalog.candidates import CANDIDATE_RE

    if CANDIDATE_RE.match(args.code.upper()):  # a preview candidate: skel/commands/catalog_preview.py
        from skel.commands import catalog_preview

        return catalog_preview.show(args)
    lib = _library(args)
    sk = lib.get(args.code)
    if sk is None:
        raise UsageError(f"no skeleton {args.code!r} in {lib.root} (codes: {', '.join(s.code for s in lib)})")
    ev = _evidence(args, [sk.code])[sk.code]
    if args.json:
        data = _entry(sk, ev)
        data["docs"] = sk.docs
        data["before"], data["after"] = sk.before, sk.after
        emit_json(data)
        return EXIT_OK
    print(render_show(sk, ev))
    return EXIT_OK


def render_show(sk: Skeleton, evidence: dict) -> str:
    out = [f"{sk.code} {sk.name}: {sk.title}",
           f"category {sk.category} · lifecycle {sk.lifecycle} · rewrite {sk.availability} ({sk.transformation.kind}) "
           f"· {sk.safety} · targets {', '.join(sk.targets)}"]
    if sk.families:
        out.append(f"families: {', '.join(sk.families)}")
    for heading in DOC_HEADINGS:
        out += ["", f"## {heading}", sk.docs[heading]]
    out += ["", "## Applicability conditions"]
    out += [f"- {c.id}: {c.holds}  (otherwise: {c.fails})" for c in sk.conditions]
    out += ["", "## Transformation method", f"{sk.transformation.kind}: {sk.transformation.method}"]
    out += [f"  {i}. {s}" for i, s in enumerate(sk.transformation.steps, 1)]
    c = sk.constraints
    out += ["", "## Resource constraints", f"- registers: {c.registers}", f"- shared memory: {c.shared_memory}",
            f"- warps: {c.warps}", f"- occupancy: {c.occupancy}", f"- grows with: {c.grows_with}"]
    out += ["", "## Provenance"]
    out += [f"- {p.repo} {p.path}:{p.line} ({p.version}){' — ' + p.note if p.note else ''}" for p in sk.provenance]
    if sk.conflicts or sk.enables:
        out += ["", "## Graph", f"- conflicts with: {', '.join(sk.conflicts) or '-'}", f"- enables: {', '.join(sk.enables) or '-'}"]
    out += ["", "## Evidence"]
    items = evidence.get("items", [])
    if not items:
        out.append("none recorded yet (run `skel mine` on kernels, `skel apply`/`skel validate` to measure)")
    for item in items[:20]:
        out.append(f"- {_evidence_line(item)}")
    if len(items) > 20:
        out.append(f"- ... and {len(items) - 20} more (--json for all)")
    return "\n".join(out)


def _evidence_line(item: dict) -> str:
    if item.get("type") == "verdict":
        ci = ""
        if item.get("ci_low") is not None and item.get("ci_high") is not None:
            ci = f" [{item['ci_low']:.4g}, {item['ci_high']:.4g}]"
        median = item.get("median")
        med = f" {median:.4g}{ci} {item.get('unit') or ''}" if median is not None else ""
        return (f"verdict {item.get('verdict')}: {item.get('kernel')} {item.get('shape')} {item.get('dtype') or ''} "
                f"{item.get('metric') or ''}{med} on {item.get('gpu') or 'cpu'}").strip()
    return f"{item.get('kind', 'instance')} {item.get('path')}:{item.get('line')} ({item.get('kernel')})"


def _haystack(sk: Skeleton) -> str:
    parts = [sk.code, sk.name, sk.title, sk.category, sk.transformation.method, *sk.transformation.steps,
             *sk.docs.values(), *(c.holds + " " + c.fails + " " + c.id for c in sk.conditions)]
    return "\n".join(parts).lower()


def cmd_search(args) -> int:
    lib = _library(args)
    words = [w.lower() for w in " ".join(args.text).split()]
    scored = []
    for sk in lib:
        hay = _haystack(sk)
        counts = [len(re.findall(re.escape(w), hay)) for w in words]
        if all(counts):
            name_bonus = sum(10 for w in words if w in (sk.name + " " + sk.title + " " + sk.code).lower())
            scored.append((sum(counts) + name_bonus, sk))
    scored.sort(key=lambda t: (-t[0], t[1].code))
    if args.json:
        emit_json([{"code": s.code, "name": s.name, "title": s.title, "score": score} for score, s in scored])
    elif not scored:
        print(f"no skeleton mentions {' '.join(args.text)!r}")
    else:
        for score, s in scored:
            print(f"{s.code}  {s.name}  — {s.title}")
    return EXIT_OK if scored else EXIT_FINDINGS


def cmd_check(args) -> int:
    roots = (default_root(), *library_dirs(args))
    skeletons, problems = check_library(*roots)
    root = ", ".join(str(r) for r in roots)
    if args.golden:
        from skel.skeletons.golden import check_golden
        from skel.skeletons.library import LibraryProblem

        mine = [s for s in skeletons if len(roots) == 1 or s.folder.parent.resolve() in {r.resolve() for r in roots[1:]}]
        problems = problems + [LibraryProblem(g.path, None, "golden", g.message) for s in mine for g in check_golden(s)]
    if args.json:
        emit_json({"library": str(root), "skeletons": len(skeletons),
                   "problems": [{"path": str(p.path), "line": p.line, "field": p.field, "message": p.message}
                                for p in problems]})
    else:
        for p in problems:
            print(str(p), file=sys.stderr)
        if not problems:
            print(f"{len(skeletons)} skeletons in {root}: all checks passed")
        else:
            print(f"{len(problems)} problem(s) in {root}", file=sys.stderr)
    return EXIT_USAGE if problems else EXIT_OK
