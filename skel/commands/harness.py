"""`skel harness FILE.py`: write the spec skel infers for a kernel file it has never seen."""
from __future__ import annotations

import argparse
from pathlib import Path

from skel.commands.common import add_catalog, add_json, dims_arg, emit_json
from skel.errors import EXIT_OK, UsageError

EPILOG = """\
The launcher (a function of FILE that launches one of its @triton.jit kernels; --entry picks
one when there are several) and the kernel are read, never imported: tensor shapes from the
launcher's .shape unpacking, asserts and allocations, and from the kernel's address arithmetic;
sizes for the interpreter ("ci") and a decode sweep over the batch-like dim (1 ... 256) at
model-like sizes; values in the regime the code implies; outputs from what it returns and the
inputs its kernel stores into. There is no reference: the original kernel is the oracle, with
each output's accepted error calibrated from its own sensitivity. The spec says what it read and
assumed; edit it and pass it back with `skel apply --harness` or `skel validate --spec`.
`skel apply` and `skel validate` infer the same spec when given none.

Exit status: 0 written, 2 when no harness can be inferred (the message says what and where)."""


def register(sub) -> None:
    p = sub.add_parser("harness", help="write the spec skel infers for a kernel file (no reference needed)",
                       description=__doc__.split("\n")[0].strip("`"), epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", type=Path, metavar="FILE.py", help="Triton kernel file with a launcher")
    p.add_argument("--entry", metavar="NAME", help="the launcher to judge (default: the first forward one)")
    p.add_argument("--variant", action="append", default=[], metavar="ARG",
                   help="also pass this Optional argument / set this flag (repeatable)")
    p.add_argument("--dims", type=dims_arg, default={}, metavar="N=64,H=32", help="decode sizes to use instead")
    p.add_argument("-o", "--output", type=Path, metavar="SPEC.py", help="write here (default: print)")
    p.add_argument("--force", action="store_true", help="overwrite an existing --output file")
    add_catalog(p, used=False)
    add_json(p)
    p.set_defaults(func=handler)


def handler(args) -> int:
    from skel.harness.infer import HarnessError, infer
    from skel.harness.render import render
    from skel.miner.sourcefile import read_source

    source = read_source(str(args.file), "triton").text
    try:
        harness = infer(args.file.resolve(), source, args.entry, tuple(args.variant), args.dims)
    except HarnessError as exc:
        raise UsageError(str(exc)) from None
    text = render(harness)
    if args.output is not None:
        if args.output.exists() and not args.force:
            raise UsageError(f"{args.output} exists: pass --force to overwrite it")
        args.output.write_text(text)
    if args.json:
        emit_json({**harness.to_json(), "spec": str(args.output) if args.output else None})
    elif args.output is None:
        print(text, end="")
    else:
        print(f"wrote {args.output}: {harness.entry} -> {harness.kernel}; "
              + "; ".join(f"{t.name} [{', '.join(t.dims)}]" for t in harness.tensors))
    return EXIT_OK
