"""Put Ray's cp312 wheel (and the packages it needs that the GPU machine lacks) into .whl/, slimmed to fit a
device call: the Java jar (31 MB) and the dashboard's web client are left out (skel starts Ray without them).

    python benchmarks/ray_wheels.py [--dest .whl] [--version 2.52.0]

Needs the package registry (run it here, not on the GPU machine). The slim wheel is 38.5 MB; with the wheels
of benchmarks/gpu_env.sh the carried folder stays under the 64 MiB a device call takes.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

NEEDED = ("jsonschema", "jsonschema-specifications", "referencing", "rpds-py")  # absent on the GPU machine
DROPPED = ("ray/jars/", "ray/dashboard/client/build/")
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")


def download(names: list[str], dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(dest), *names]
    subprocess.run(cmd, check=True)


def slim(wheel: Path, out: Path) -> None:
    """The wheel without DROPPED, its RECORD rewritten to match."""
    drop = lambda name: name.startswith(DROPPED)  # noqa: E731
    with zipfile.ZipFile(wheel) as zin, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            if drop(info.filename):
                continue
            data = zin.read(info.filename)
            if info.filename.endswith(".dist-info/RECORD"):
                data = "".join(f"{line}\n" for line in data.decode().splitlines()
                               if not drop(line.split(",")[0])).encode()
            zout.writestr(info, data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", type=Path, default=Path(".whl"))
    ap.add_argument("--version", default="2.52.0")
    args = ap.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    download(list(NEEDED), args.dest)
    with tempfile.TemporaryDirectory() as tmp:
        download([f"ray=={args.version}"], Path(tmp))
        [wheel] = Path(tmp).glob("ray-*.whl")
        slim(wheel, args.dest / wheel.name)
        print(f"{args.dest / wheel.name}: {(args.dest / wheel.name).stat().st_size / 1e6:.1f} MB "
              f"(from {wheel.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
