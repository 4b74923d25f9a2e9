"""`skel catalog prompt TARGET`: the Markdown brief a coding agent gets for one kernel file.

Registered by ``skel.commands.catalog`` (it adds this action to its sub-parsers); the
brief itself is built in ``skel.pipeline.prompt`` and trimmed in ``skel.pipeline.prompt_budget``.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from skel.commands.common import emit_json, positive_int, warn
from skel.errors import EXIT_FINDINGS, EXIT_OK

DESCRIPTION = """\
Render a Markdown brief for a coding agent optimising TARGET (a Triton .py or CUDA file):
the kernel's profile, where it stands against the roofline if it was measured, the
skeletons whose conditions all hold (ranked: measured wins, then mined instances, then
none), each with the lines that make its conditions hold, resource constraints, a
before/after example, provenance and the `skel apply` / `skel validate` commands; then
the skeletons that do not apply, with the failing condition.

--budget TOKENS keeps the Markdown under TOKENS, estimated as ceil(characters / 4), by
dropping the least useful parts first: the not-applicable list, extra provenance, then
examples, constraints and methods of lower-ranked skeletons, profile details, ... The
names of the applicable skeletons and their conditions are never dropped: when even they
do not fit, nothing is printed, the message says how many tokens are needed, and the exit
code is 1. --json prints the same (trimmed) content as data, with "tokens" and "trimmed".

Exit codes: 0 brief printed, 1 budget too small, 2 unusable input."""


def add_parser(verbs, common: Callable[[argparse.ArgumentParser], None]) -> None:
    p = verbs.add_parser("prompt", help="a Markdown brief for a coding agent: applicable skeletons with evidence",
                         description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", help="kernel file (Triton .py or CUDA .cu/.cuh), as it should appear in the brief")
    p.add_argument("--budget", type=positive_int, metavar="TOKENS",
                   help="keep the brief under TOKENS (estimated as ceil(chars / 4))")
    common(p)
    p.set_defaults(func=cmd_prompt)


def cmd_prompt(args) -> int:
    from skel.pipeline.prompt import build_brief, render_markdown
    from skel.pipeline.prompt_budget import BudgetError, fit_budget
    from skel.commands.catalog import _library

    brief = build_brief(args.target, _library(args), args.catalog)
    try:
        brief = fit_budget(brief, args.budget)
    except BudgetError as exc:
        if args.json:
            emit_json({"error": str(exc), "budget": exc.budget, "needed_tokens": exc.needed})
        warn(str(exc))
        return EXIT_FINDINGS
    if args.json:
        emit_json(brief.to_json())
    else:
        sys.stdout.write(render_markdown(brief))
    return EXIT_OK
