"""`skel validate TARGET CANDIDATE`: judge a candidate kernel file against a target.

Exit 0 accepted, 1 rejected, 2 bad input (unknown target or shape set, missing file, or a
target the gate cannot judge because the original kernel fails its own spec).
"""
from __future__ import annotations

import argparse
import json
import sys

from skel.catalog.store import resolve_catalog_path
from skel.commands.common import add_catalog
from skel.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, UsageError

EPILOG = """\
TARGET is a family under kernels/ (kda_decode, gdn_decode, state_merge, dsa_indexer) or the
path of a kernel file; a file outside kernels/ needs a spec (--spec FAMILY or a spec.py
exporting SPEC = TargetSpec(...), or a spec.py beside it). CANDIDATE is a .py file defining
the target's launcher with the same arguments.

Numerics run on every shape and seed against the float64 reference and the original
kernel; on a GPU the candidate is then timed against the original, interleaved, per shape.
The candidate, the target and the spec are executed, each in a contained worker process of
the gate's, never in this one (README: Trust model); the report says what contained them.
Without a GPU numerics run in the Triton interpreter on the 'ci' shapes and performance is
reported as not measured."""


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "validate", help="judge a candidate kernel: numerics against two oracles, then timing on a GPU",
        description=__doc__.split("\n\n")[0], epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="TARGET", help="family name or kernel file")
    p.add_argument("candidate", metavar="CANDIDATE", help="candidate .py file")
    p.add_argument("--shapes", metavar="NAME|LABELS",
                   help="shape set of the spec (ci, decode, ...) or comma-separated labels such as N64-T1-H32-HV32-K128-V128;"
                        " default ci on CPU, decode on a GPU")
    p.add_argument("--seeds", metavar="S,S", help="input seeds per shape (default: 0 and a fresh random seed)")
    p.add_argument("--dtype", help="input dtype (default: the spec's first)")
    p.add_argument("--device", metavar="cpu|cuda|cuda:N",
                   help="default: cuda when available; cuda:N judges on GPU N (the only one its workers see)")
    p.add_argument("--spec", metavar="FAMILY|SPEC.py", help="spec for a kernel file outside kernels/")
    p.add_argument("--entry", help="launcher name when it differs from the spec's")
    p.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="seconds one call of candidate code may run before it counts as hung (default 60)")
    p.add_argument("--require", choices=("correct", "not-slower", "faster"), default="correct",
                   help="what acceptance needs besides numerics (default: correct)")
    p.add_argument("--no-bench", action="store_true", help="skip timing on a GPU")
    p.add_argument("--all-shapes", action="store_true", help="keep judging after the first failing shape")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    p.add_argument("--skeleton", action="append", default=[], metavar="CODE",
                   help="the skeleton(s) the candidate applies (repeatable): the verdict is recorded in the catalog "
                        "as their evidence, per shape, with where it ran (`skel results export` lists it)")
    p.add_argument("--no-record", action="store_true", help="with --skeleton: do not record the verdict")
    add_catalog(p)
    p.set_defaults(func=handler)


def handler(args) -> int:
    from skel.device import select_device
    from skel.validate.gate import GateInputError, validate

    shapes = args.shapes
    if shapes and ("-" in shapes or "," in shapes):
        shapes = [s.strip() for s in shapes.split(",") if s.strip()]
    try:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    except ValueError:
        raise UsageError(f"--seeds {args.seeds!r}: expected comma-separated integers") from None
    try:
        result = validate(
            args.target, args.candidate, shapes=shapes, seeds=seeds, device=select_device(args.device), dtype=args.dtype,
            time_limit=args.time_limit, bench=False if args.no_bench else None, require=args.require,
            spec=args.spec, entry=args.entry, fail_fast=not args.all_shapes,
        )
    except GateInputError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print(render(result))
    if args.skeleton and not args.no_record and not result.error:
        n = record(result, args)
        print(f"skel: recorded {n} run(s) for {'+'.join(args.skeleton)} in {resolve_catalog_path(args.catalog)}",
              file=sys.stderr)
    if result.error:
        return EXIT_USAGE
    return EXIT_OK if result.accepted else EXIT_FINDINGS


def record(result, args) -> int:
    """The verdict, one run per judged shape, as evidence for ``--skeleton`` (``validate.record``)."""
    import hashlib
    from pathlib import Path

    from skel.catalog.store import open_catalog
    from skel.validate.environment import current
    from skel.validate.record import runs_from_gate

    gate = result.to_dict()
    machine = gate.get("machine") if isinstance(gate.get("machine"), dict) else {}
    target = Path(result.target)
    env = current(target if target.exists() else None, result.device, gpu=(machine or {}).get("name", ""),
                  driver=(machine or {}).get("driver", "")).to_json()
    source = Path(result.candidate).read_bytes() if Path(result.candidate).is_file() else b""
    label = f"{'+'.join(c.upper() for c in args.skeleton)}: {Path(result.candidate).name}"
    reason = "accepted" if result.accepted else "; ".join(result.reasons) or "rejected"
    runs = runs_from_gate(gate, [c.upper() for c in args.skeleton], label, f"{result.family}:{target.name}",
                          hashlib.sha256(source).hexdigest(), reason, env)
    with open_catalog(args.catalog) as cat:
        with cat.transaction():
            for run in runs:
                cat.record_validation(run)
    return len(runs)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.1e}"


def render(result) -> str:
    verdict = "ACCEPTED" if result.accepted else ("CANNOT JUDGE" if result.error else "REJECTED")
    lines = [
        f"{result.family}: {verdict}  candidate {result.candidate}",
        f"  against {result.target}  ({result.device}, {result.dtype}, shapes {result.shape_set},"
        f" seeds {', '.join(map(str, result.seeds))})",
    ]
    for v in result.shapes:
        if v.numerics is None:
            lines.append(f"  {v.shape:<32} {v.perf_note}")
            continue
        errs = "  ".join(
            f"{o.output} {_fmt(o.rel_rms)} (orig {_fmt(o.original_rel_rms)})"
            for o in v.numerics.outputs if o.rel_rms is not None
        )
        status = "ok  " if v.numerics.passed else "FAIL"
        if v.perf is not None:
            p = v.perf
            perf = (f"{p.baseline.median_us:.1f} -> {p.candidate.median_us:.1f} us, x{p.speedup:.3f}"
                    f" [{p.speedup_low:.3f}, {p.speedup_high:.3f}] {p.verdict}, roofline"
                    f" {p.baseline_roofline_pct:.0f}% -> {p.candidate_roofline_pct:.0f}%"
                    + (f", layout ceiling {p.baseline_ceiling_pct:.0f}% -> {p.candidate_ceiling_pct:.0f}%"
                       if p.baseline_ceiling_pct else "")
                    + (f", x{p.baseline_floor_x:.2f} -> x{p.candidate_floor_x:.2f} of floor ({p.floor_us:.2f} us)"
                       if p.floor_us else ""))
        else:
            perf = v.perf_note
        lines.append(f"  {v.shape:<32} {status} rel-RMS {errs}  | {perf}")
    if result.machine is not None and getattr(result.machine, "name", ""):
        m = result.machine
        lines.append(f"  device: {m.name} (driver {m.driver or '?'}; {m.versions}), copy {m.copy_bps / 1e12:.2f} TB/s")
        regime = next((v.perf.regime for v in result.shapes if v.perf is not None and v.perf.regime), "")
        if regime:
            lines.append(f"  regime: {regime}; floor = best in-place copy of the same bytes, timed the same way")
    second = [n for n in result.notes if n.startswith("second oracle: ")]
    if result.oracle == "original":
        lines.append("  oracle: the original kernel (no reference): each output's accepted error calibrated per case"
                     " from the original's spread when its float32-upcast inputs move by one ulp and its distance to that upcast run"
                     + "".join(f"; {n}" for n in second))
    lines += [f"  note: {n}" for n in result.notes if n not in second]
    if result.isolation:
        lines.append(f"  isolation: {result.isolation.get('summary', '')}")
    if result.reasons:
        lines.append("reasons:")
        lines += [f"  - {r}" for r in result.reasons]
    return "\n".join(lines)
