"""`skel capture --entry FILE.py[:fn] -- CMD ...`: record a kernel file's launcher calls in the user's own
run and write a spec that replays them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skel.commands.common import add_catalog, add_json, emit_json, positive_int
from skel.errors import EXIT_OK, UsageError

EPILOG = """\
CMD runs once, in a child process, as you would run it (`python ...` and `pytest ...` with this
interpreter, anything else from PATH). When it imports FILE.py (as a module of your package, matched
by path), every top-level function of that file that launches one of its @triton.jit kernels is
wrapped: each call is recorded (argument shapes, dtypes, strides, flags; the return structure) and,
for K calls of each distinct signature (the first, and the latest K-1 of calls 2, 4, 8, ...: a sample
spread over the run, not only its first steps), its input tensors as they were before the call are
saved (safetensors) with the inputs the call changed. The wrapped functions return what the real ones
return; only the sampled calls pay for a copy.

The folder (default: a new one under captures/ beside the catalog) gets calls.json, call<i>.safetensors
and spec.py: a spec without a reference (the original kernel is the oracle) whose 'ci' shapes replay
the recorded calls small enough for the CPU interpreter and whose 'decode' shapes add the same calls
scaled along the batch dim where that is unambiguous. It loads in a fresh process without your
package: `skel validate FILE.py CANDIDATE.py --spec DIR/spec.py`, `skel apply FILE.py --harness DIR/spec.py`.

Exit codes: 0 a spec was written; 2 the command failed, FILE.py was never imported or no launcher was
called, or FILE.py has no launcher (a kernel launched only from another file)."""


def register(subparsers) -> None:
    p = subparsers.add_parser("capture", help="record a kernel file's calls in your own test or benchmark; write a spec",
                              description=__doc__.split("\n")[0], epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--entry", required=True, metavar="FILE.py[:fn]",
                   help="the kernel file whose launchers are recorded, and optionally the one launcher")
    p.add_argument("-o", "--output", type=Path, metavar="DIR", help="capture folder (default: new, beside the catalog)")
    p.add_argument("--force", action="store_true", help="replace an earlier capture in -o DIR")
    p.add_argument("--per-signature", type=positive_int, default=2, metavar="K",
                   help="calls kept with their tensors per distinct signature: the first and K-1 spread over the run (default 2)")
    p.add_argument("--max-bytes", type=positive_int, default=None, metavar="N",
                   help="tensor bytes kept in all (default 256 MiB); calls beyond it are counted, not kept")
    add_json(p)
    add_catalog(p)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the run to record")
    p.set_defaults(func=handler)


def handler(args) -> int:
    from skel.harness.capture import DEFAULT_MAX_BYTES, CaptureError, CaptureOptions, capture

    command = tuple(args.command[1:] if args.command[:1] == ["--"] else args.command)
    if not command:
        raise UsageError("no command: give the run after --, e.g. skel capture --entry k.py -- python bench.py")
    path, sep, fn = args.entry.rpartition(":")
    if not sep or not path.endswith(".py"):
        path, fn = args.entry, ""
    options = CaptureOptions(target=Path(path), command=command, entry=fn or None, output=args.output,
                             force=args.force, per_signature=args.per_signature,
                             max_bytes=args.max_bytes or DEFAULT_MAX_BYTES, catalog=args.catalog)
    try:
        result = capture(options, stdout=sys.stderr.fileno() if args.json else None)
    except CaptureError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        emit_json(result.to_json())
    else:
        _print_summary(result)
    if not result.specs:
        raise UsageError("no spec written: " + "; ".join(result.problems))
    return EXIT_OK


def _print_summary(result) -> None:
    capture = result.capture
    for t in capture.tallies:
        print(f"{t.launcher}: {t.calls} call(s), {t.signatures} signature(s), {t.kept} kept with tensors")
    for note in capture.notes:
        print(f"note: {note}")
    for problem in result.problems:
        print(f"no spec: {problem}")
    print(f"tensors: {capture.bytes} bytes in {len(capture.kept)} file(s)")
    for spec in result.specs:
        print(f"spec: {spec}")
