"""Registers, spills and instruction counts of a kernel file's Triton kernels on sm_90, without a GPU.

The file's own entry function is called on CPU tensors (the family's inputs) with Triton's driver
replaced by one that compiles for sm_90 and never launches: every launch becomes a compilation with
the arguments' real specialisation (pointer alignment, integer values), which a bare
`triton.compile(ASTSource(...))` does not reproduce (without the alignment hints the loads are not
vectorised and the same kernel can appear to spill). The cubin goes through `cuobjdump`
(-res-usage, -sass) from triton's own bin folder.

    python experiments/2026-11-29-t1-copy-ceiling/sass_stats.py FILE --family kda_decode [--T 1] [--N 2] [--sass OUT.sass]
    # family: kda_decode, gdn_decode, or fla_kda (fla-core's KDA file through kda_decode's fla_upstream spec)

A development tool: it relies on triton's runtime internals (driver.set_active, JITFunction.run), checked
with triton 3.7.1; an autotuned kernel fails (the compile-only driver cannot benchmark its configs);
nothing it prints is a performance result.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def install_compile_only_driver():
    """Launches compile for sm_90 and return; returns the list the compiled kernels are appended to."""
    import triton  # noqa: F401
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    class CompileOnly:
        def get_current_device(self):
            return 0

        def get_current_stream(self, device=None):
            return 0

        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)

        def get_active_torch_device(self):
            import torch
            return torch.device("cpu")

    compiled = []
    driver.set_active(CompileOnly())
    run = JITFunction.run

    def compile_only(self, *args, grid, warmup, **kwargs):
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        compiled.append((self.fn.__name__, kernel))
        return kernel

    JITFunction.run = compile_only
    return compiled


def _cuobjdump(kernel, *flags: str) -> str:
    import triton
    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    with tempfile.TemporaryDirectory() as d:
        cubin = Path(d) / "k.cubin"
        cubin.write_bytes(kernel.asm["cubin"])
        return subprocess.run([str(tool), *flags, str(cubin)], capture_output=True, text=True, check=True).stdout


def stats(kernel) -> dict:
    sass = _cuobjdump(kernel, "-sass")
    res = _cuobjdump(kernel, "-res-usage")
    reg, stack = re.search(r"REG:(\d+)", res), re.search(r"STACK:(\d+)", res)
    return {"registers": int(reg.group(1)) if reg else None, "stack_bytes": int(stack.group(1)) if stack else None,
            "spill_instructions": len(re.findall(r"\b(?:LDL|STL)\b", sass)),
            "instructions": len(re.findall(r"/\*[0-9a-f]{4}\*/", sass)), "num_warps": kernel.metadata.num_warps}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--family", required=True, choices=("kda_decode", "gdn_decode", "fla_kda"))
    ap.add_argument("--N", type=int, default=2)
    ap.add_argument("--T", type=int, default=1)
    ap.add_argument("--fla", type=Path, default=Path("/work/corpus/fla_core"), help="unpacked fla-core (fla_kda)")
    ap.add_argument("--sass", type=Path, help="write the last kernel's SASS here")
    a = ap.parse_args()

    compiled = install_compile_only_driver()
    import torch
    torch.cuda.get_device_name = lambda i=0: "NVIDIA H200"  # fla-core probes the device at import
    torch.cuda.get_device_capability = lambda i=0: (9, 0)
    from skel.validate.spec import Shape
    if a.family == "fla_kda":
        sys.path.insert(0, str(a.fla))
        from skel.kernels.kda_decode.fla_upstream import SPEC
    elif a.family == "kda_decode":
        from skel.kernels.kda_decode.spec import SPEC
    else:
        from skel.kernels.gdn_decode.spec import SPEC
    spec = importlib.util.spec_from_file_location(f"sass_stats_{a.file.stem}", a.file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    heads = 16 if a.family == "gdn_decode" else 32
    x = SPEC.make_inputs(Shape.of(N=a.N, T=a.T, H=heads, HV=32, K=128, V=128), "bfloat16", 0, "cpu")
    getattr(module, SPEC.entry)(**x)
    if not compiled:
        print(f"{a.file}: the entry launched no Triton kernel", file=sys.stderr)
        return 1
    for name, kernel in compiled:
        print(f"{a.file.name} {name}: " + ", ".join(f"{k} {v}" for k, v in stats(kernel).items()))
    if a.sass:
        a.sass.write_text(_cuobjdump(compiled[-1][1], "-sass"))
    return 0


if __name__ == "__main__":
    os.environ.pop("TRITON_INTERPRET", None)
    sys.exit(main())
