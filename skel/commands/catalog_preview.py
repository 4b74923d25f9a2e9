"""Preview candidates (``SKP...``) in `skel catalog list` and `skel catalog show`.

A candidate is listed with its rank after gate verdicts and whether it is admitted
(``skel.pipeline.preview``); `show` prints its pattern, holes, conditions, provenance,
support and every verdict.
"""
from __future__ import annotations

from skel.commands.common import emit_json
from skel.errors import EXIT_OK, UsageError


def ranked(args) -> list:
    """[(CandidateSkeleton, Standing)] best rank first; none when the catalog does not exist yet."""
    from skel.pipeline.preview import ranked_from

    return ranked_from(args.catalog)


def engine_problem(cand) -> str | None:
    """Why `skel apply --preview` can never apply this candidate, or None."""
    from skel.rewriter.pattern import pattern_problem

    problem = pattern_problem(cand.pattern["refined"])
    if problem is None and cand.targets == ["cuda"]:
        problem = "mined from CUDA files: `skel apply` rewrites Triton files only"
    return problem


def entry(cand, standing) -> dict:
    """The JSON of one candidate: its content plus its standing (rank_score, admitted, trials)."""
    return {**cand.to_json(), **standing.to_json(), "sources": len(cand.pattern.get("sources", ())),
            "appliable": engine_problem(cand) is None}


def list_line(cand, standing, width: int) -> str:
    status = "preview" if cand.status == "preview" else f"promoted as {cand.promoted_as}"
    admitted = "admitted" if standing.admitted else "not admitted"
    rank = f"score {cand.score:g}" + (f" -> {standing.rank_score:g}" if standing.rank_score != cand.score else "")
    engine = "" if engine_problem(cand) is None else " (the pattern engine cannot apply it)"
    return (f"{cand.code}  {cand.name:<{width}}  candidate {rank}, {cand.kernels} kernels, {cand.commits} commits, "
            f"{len(standing.trials)} trials  {status}, {admitted}{engine}")


def show(args) -> int:
    """`skel catalog show SKPxxxxx`."""
    from skel.catalog import store

    path = store.resolve_catalog_path(args.catalog)
    hit = [(c, s) for c, s in ranked(args) if c.code == args.code.upper()]
    if not hit:
        raise UsageError(f"no preview candidate {args.code!r} in the catalog {path} "
                         "(`skel catalog list --status preview` lists them)")
    cand, standing = hit[0]
    if args.json:
        emit_json(entry(cand, standing))
        return EXIT_OK
    print(render(cand, standing))
    return EXIT_OK


def render(cand, standing) -> str:
    p = cand.pattern
    status = "preview" if cand.status == "preview" else f"promoted as {cand.promoted_as}"
    out = [f"{cand.code} {cand.name}: {cand.title}",
           f"candidate ({status}) · rewrite by pattern · unsafe · score {cand.score:g}, "
           f"after verdicts {standing.rank_score:g} · {'admitted' if standing.admitted else 'not admitted'}",
           "", "## Pattern"]
    out += [f"- {e['kind']}: {e['before'] or '-'} => {e['after'] or '-'}" for e in p["refined"]]
    problem = engine_problem(cand)
    out += [f"- the pattern engine cannot apply it to any kernel: {problem}"] if problem else []
    out += ["", "## Holes"]
    out += [f"- {h['name']} ({h['kind']}): e.g. {', '.join(h['examples'])}" for h in p["refined_holes"]] or ["- none"]
    out += ["", "## Core pattern (what changes)"]
    out += [f"- {e['kind']}: {e['before'] or '-'} => {e['after'] or '-'}" for e in p["edits"]]
    out += ["", "## Applicability conditions"]
    out += [f"- {c['id']}: {c['holds']}  (otherwise: {c['fails']})" for c in p["conditions"]] or ["- none inferred"]
    out += ["", "## Support",
            f"- {cand.kernels} kernels, {cand.commits} commits or variant pairs, "
            f"{cand.perf_commits} with a commit message about speed",
            f"- distilled from {len(p.get('sources', ()))} file versions (held-out evidence must come from others)"]
    out += ["", "## Provenance"]
    for o in p["occurrences"][:20]:
        where = o["message"] if o["message"].startswith("variant pair:") else \
            f"{o['repo']} {o['commit'][:10]} {o['path']}:{o['line']} {o['kernel']} \"{o['message']}\""
        out.append(f"- {where}")
    if len(p["occurrences"]) > 20:
        out.append(f"- ... and {len(p['occurrences']) - 20} more (--json for all)")
    out += ["", "## Verdicts", f"{standing.why}"]
    out += [f"- {'accepted' if t.accepted else 'rejected'}: {t.describe()}" for t in standing.trials] or \
        ["- none yet (`skel apply --preview TARGET` judges it)"]
    return "\n".join(out)
