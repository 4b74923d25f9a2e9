"""Hostile inputs through the real command line: one clear line naming the file and the reason,
the right exit code, never a traceback; and no worker left behind when `skel mine` is killed.

The cases run the CLI's entry point in this process (an exception escaping it is the traceback a
user would see), and in a subprocess (`python -m skel ...`) where a process of its own matters: a
FIFO that could block the read, other users' permissions, kill -9. All in a world-readable
temporary folder. Permissions mean nothing to root, so when the tests run as root the permission cases run as the
unprivileged user ``nobody``: with this interpreter, or, where nobody may not execute it (a
virtual environment under /root), with the system's Python of the same version and this
environment's site-packages. They are skipped only when neither can import skel.
"""
from __future__ import annotations

import contextlib
import io
import os
import py_compile
import random
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
import traceback
from pathlib import Path

import pytest

import skel.kernels

KDA = Path(skel.kernels.__file__).resolve().parent / "kda_decode" / "kernel.py"
NOBODY = 65534
AS_ROOT = os.geteuid() == 0
TIMEOUT_S = 60  # a FIFO or a huge file must not hang a command: far more than any case needs

SMALL_KERNEL = textwrap.dedent("""\
    import triton
    import triton.language as tl


    @triton.jit
    def scale_kernel(x, y, n, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        b = tl.load(x + offs, mask=mask)
        tl.store(y + offs, b / tl.sqrt(tl.sum(b * b) + 1e-6), mask=mask)


    def scale(x, y):
        scale_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    """)


# ------------------------------------------------------------------------------ the inputs
def _make_inputs(root: Path) -> None:
    """Every hostile file under root/inputs (names chosen not to shadow any stdlib module)."""
    d = root / "inputs"
    d.mkdir()
    (d / "latin1.py").write_bytes(b"import triton\n# caf\xe9 cr\xe8me\n@triton.jit\ndef k(x):\n    pass\n")
    (d / "cookie_latin1.py").write_bytes(
        b"# -*- coding: latin-1 -*-\n# caf\xe9\n" + KDA.read_bytes())  # honoured: mined and matched
    (d / "cookie_unknown.py").write_bytes(b"# -*- coding: klingon-8 -*-\nimport triton\n")
    rnd = random.Random(0)
    (d / "rand_bytes.py").write_bytes(bytes(rnd.randrange(256) for _ in range(4096)) + b"\x00")
    (d / "high_bytes.py").write_bytes(bytes(rnd.randrange(0x80, 0x100) for _ in range(4096)))  # no NUL
    (d / "elf_binary.py").write_bytes(Path(sys.executable).resolve().read_bytes()[:65536])
    src = root / "compiled_src.py"
    src.write_text(SMALL_KERNEL)
    py_compile.compile(str(src), cfile=str(d / "compiled.py"), doraise=True)  # a .pyc renamed .py
    src.unlink()
    (d / "empty.py").write_bytes(b"")
    (d / "nul_inside.py").write_bytes(SMALL_KERNEL.encode().replace(b"offs < n", b"offs < n\x00"))
    (d / "unreadable.py").write_text(SMALL_KERNEL)
    (d / "unreadable.py").chmod(0)
    (d / "folder.py").mkdir()
    (d / "kernel.cu").write_text("__global__ void k(float* x) { x[threadIdx.x] = 1.0f; }\n")
    (d / "kernel.cuh").write_text("__global__ void k(float* x) { x[threadIdx.x] = 2.0f; }\n")
    os.mkfifo(d / "fifo.py")
    with open(d / "huge.py", "wb") as fh:  # 200 MB, sparse: refused from its size, never read
        fh.truncate(200 * 1024 * 1024)
    (d / "dangling.py").symlink_to(d / "nowhere.py")
    locked = root / "locked"
    locked.mkdir()
    (locked / "k.py").write_text(SMALL_KERNEL)
    locked.chmod(0)
    mixed = root / "mixed"  # one unreadable file among good ones: an error entry, the rest mined
    mixed.mkdir()
    (mixed / "good.py").write_text(SMALL_KERNEL)
    (mixed / "also_good.py").write_text(SMALL_KERNEL.replace("scale", "shift"))
    (mixed / "secret.py").write_text(SMALL_KERNEL)
    (mixed / "secret.py").chmod(0)


# `python -m skel` for another Python than this one: this environment's site-packages (and the
# editable install's finder in it) added first, then the CLI run as a module.
_BOOT = ("import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
         "runpy.run_module('skel', run_name='__main__', alter_sys=True)")


def _nobody_cli(root: Path) -> tuple[list[str] | None, str | None]:
    """(command prefix that runs the CLI as nobody, None) or (None, why that is impossible)."""
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = [p for p in (shutil.which(version, path="/usr/bin:/usr/local/bin:/bin"),) if p]
    prefixes = [[sys.executable, "-m", "skel"]]
    prefixes += [[p, "-I", "-c", _BOOT, sysconfig.get_paths()["purelib"]] for p in system]
    why = "no interpreter"
    for prefix in prefixes:
        try:
            proc = subprocess.run(prefix + ["--version"], cwd=root, env=_env(root, True), capture_output=True, text=True,
                                  timeout=TIMEOUT_S, **_NOBODY)
        except (OSError, subprocess.SubprocessError) as exc:
            why = f"{prefix[0]}: cannot start it as nobody ({exc})"
            continue
        if proc.returncode == 0 and proc.stdout.startswith("skel "):
            return prefix, None
        why = f"{prefix[0]} as nobody: {(proc.stderr or proc.stdout).strip()[-300:]}"
    return None, why


_NOBODY = {"user": NOBODY, "group": NOBODY, "extra_groups": []}


def _env(root: Path, nobody: bool = False) -> dict:
    env = dict(os.environ)  # nobody gets a catalog of its own: it may not write one root created
    env.update(SKEL_CATALOG=str(root / "catalog" / ("nobody.sqlite" if nobody else "catalog.sqlite")),
               HOME=str(root / "home"))
    env.pop("SKEL_MAX_BYTES", None)
    return env


@pytest.fixture(scope="module")
def world():
    """A world-readable temporary folder with the inputs, and whether permissions can be tested."""
    root = Path(tempfile.mkdtemp(prefix="skel-hostile-"))
    root.chmod(0o755)
    for sub in ("catalog", "home"):
        (root / sub).mkdir()
        (root / sub).chmod(0o777)
    _make_inputs(root)
    prefix, why = _nobody_cli(root) if AS_ROOT else (None, None)
    _AS_NOBODY[:] = prefix or []
    yield root, why
    for p in (root / "locked", root / "inputs" / "unreadable.py", root / "mixed" / "secret.py"):
        p.chmod(0o755)
    shutil.rmtree(root, ignore_errors=True)


_AS_NOBODY: list[str] = []  # the command prefix for nobody, set by the ``world`` fixture when we are root


def skel(root: Path, *argv: str, unprivileged: bool = False) -> tuple[int, str]:
    """Run the CLI (as nobody when ``unprivileged`` and we are root); exit code and stdout + stderr."""
    nobody = unprivileged and AS_ROOT
    prefix = _AS_NOBODY if nobody else [sys.executable, "-m", "skel"]
    try:
        proc = subprocess.run(prefix + list(argv), cwd=root, env=_env(root, nobody), capture_output=True, text=True,
                              timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, **(_NOBODY if nobody else {}))
    except subprocess.TimeoutExpired:
        pytest.fail(f"skel {' '.join(argv)} hung for {TIMEOUT_S} s")
    return proc.returncode, proc.stdout + proc.stderr


# --------------------------------------------------------------------- the expected verdicts
# (file, reason words) for inputs every reading verb refuses; ``perm`` marks the permission cases.
REFUSED = [
    ("latin1.py", "not UTF-8 text", False),
    ("cookie_unknown.py", "unknown encoding", False),
    ("rand_bytes.py", "binary file", False),
    ("high_bytes.py", "not UTF-8 text", False),
    ("elf_binary.py", "binary file", False),
    ("compiled.py", "binary file", False),
    ("nul_inside.py", "binary file", False),
    ("unreadable.py", "permission denied", True),
    ("fifo.py", "not a regular file", False),
    ("huge.py", "larger than 5 MB", False),
    ("dangling.py", "broken symbolic link", False),
]
NOT_A_FILE = [("folder.py", "is a directory"), ("missing.py", "no such file")]
VERBS = {"apply": ["apply", "--dry-run"], "match": ["match"], "prompt": ["catalog", "prompt"]}

CASES = (
    [(verb, name, why, 2, perm) for verb in VERBS for name, why, perm in REFUSED]
    + [(verb, name, why, 2, False) for verb in VERBS for name, why in NOT_A_FILE
       if not (verb == "match" and why == "is a directory")]  # match takes folders: it walks them
    + [("apply", name, "is CUDA: use skel match/mine for CUDA", 2, False) for name in ("kernel.cu", "kernel.cuh")]
    + [("apply", "empty.py", "empty file", 2, False), ("prompt", "empty.py", "no @triton.jit kernel", 2, False),
       ("match", "empty.py", "no kernels found", 0, False)]
    + [("mine", name, why, 1, perm) for name, why, perm in REFUSED]
    + [("mine", "missing.py", "no such file", 1, False), ("mine", "empty.py", "empty file", 1, False)]
)


def skel_here(root: Path, *argv: str) -> tuple[int, str]:
    """The CLI's entry point in this process, in ``root``: exit code and stdout + stderr."""
    from skel.cli import main

    out, err = io.StringIO(), io.StringIO()
    old_cwd, old_env = os.getcwd(), dict(os.environ)
    os.chdir(root)
    os.environ.update(_env(root))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(list(argv))
    except BaseException:  # what a user would see as a traceback
        rc, err = -1, io.StringIO(err.getvalue() + traceback.format_exc())
    finally:
        os.chdir(old_cwd)
        os.environ.clear()
        os.environ.update(old_env)
    return rc, out.getvalue() + err.getvalue()


OWN_PROCESS = {"fifo.py"}  # a read that blocks must not block the test run


@pytest.fixture(scope="module")
def verdicts(world):
    """Every case run once: in this process, or in a subprocess (as nobody for permission cases)."""
    root, why = world
    out = {}
    for case in CASES:
        verb, name, _why, _code, perm = case
        if perm and why:
            continue
        argv = VERBS.get(verb, ["mine", "--no-progress"]) + [f"inputs/{name}"]
        if perm or name in OWN_PROCESS:
            out[case] = skel(root, *argv, unprivileged=perm)
        else:
            out[case] = skel_here(root, *argv)
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{v}-{n}" for v, n, *_ in CASES])
def test_refused_with_one_clear_line(world, verdicts, case):
    verb, name, why, code, perm = case
    if perm and world[1]:
        pytest.skip(world[1])
    rc, out = verdicts[case]
    assert "Traceback" not in out, out
    assert rc == code, f"exit {rc}, expected {code}: {out}"
    lines = [ln for ln in out.splitlines() if name in ln and why in ln]
    assert lines, f"no line names {name} and says {why!r}: {out}"
    if verb != "mine" and code == 2:
        assert lines[0].startswith("skel: error:") or lines[0].startswith("skel apply"), out


def test_coding_cookie_is_honoured(world):
    root, _ = world
    rc, out = skel(root, "match", "inputs/cookie_latin1.py")
    assert rc == 1 and "applies: SK001" in out and "Traceback" not in out, out
    rc, out = skel(root, "mine", "--no-progress", "--json", "inputs/cookie_latin1.py")
    assert rc == 0 and '"kernels": 1' in out, out
    rc, out = skel(root, "apply", "--dry-run", "--report-dir", "home/report", "inputs/cookie_latin1.py")
    assert "Traceback" not in out and "dry-run" in out, out
    assert not (root / "home" / "report").exists()  # a dry run writes nothing


def test_cuda_is_matched_and_mined(world):
    root, _ = world
    rc, out = skel(root, "match", "inputs/kernel.cu")
    assert rc in (0, 1) and "kernel k (cuda)" in out, out
    rc, out = skel(root, "mine", "--no-progress", "inputs/kernel.cu", "inputs/kernel.cuh")
    assert rc == 0 and "2 kernels" in out, out


def test_mine_unreadable_folder_and_file_among_many(world):
    root, why = world
    if why:
        pytest.skip(why)
    rc, out = skel(root, "mine", "--no-progress", "locked", unprivileged=True)
    assert rc == 1 and "Traceback" not in out, out
    assert any("locked" in ln and "permission denied" in ln for ln in out.splitlines()), out
    rc, out = skel(root, "mine", "--no-progress", "--json", "mixed", unprivileged=True)
    assert rc == 1 and "Traceback" not in out, out
    assert '"kernels": 2' in out and "secret.py" in out and "permission denied" in out, out


def test_mine_a_huge_file_is_skipped_quickly_and_the_limit_is_configurable(world):
    root, _ = world
    started = time.monotonic()
    rc, out = skel(root, "mine", "--no-progress", "inputs/huge.py", "--max-bytes", "1000000")
    assert rc == 1 and "larger than 1 MB" in out and "--max-bytes" in out, out
    assert time.monotonic() - started < 20
    big = root / "home" / "big.py"
    big.write_text(SMALL_KERNEL + "# padding\n" * 120_000)  # 1.5 MB of real text
    big.chmod(0o644)
    rc, out = skel(root, "match", "--max-bytes", "1000000", "home/big.py")
    assert rc == 2 and "home/big.py: skipped: larger than 1 MB" in out, out
    rc, out = skel(root, "match", "--max-bytes", "2000000", "home/big.py")
    assert rc == 1 and "kernel scale_kernel" in out, out


# ------------------------------------------------------------------- kill -9 leaves no orphan
def _children(pid: int) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == pid:
                out.append(int(d))
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie is dead, only not yet reaped by its new parent


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_kill_9_of_mine_leaves_no_worker_behind(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    body = SMALL_KERNEL.split("\n\n\n", 1)[1]
    for i in range(12):  # enough parsing for the two workers to be busy when the parent dies
        (corpus / f"f{i}.py").write_text("import triton\nimport triton.language as tl\n\n" + "\n\n".join(
            body.replace("scale", f"scale{j}") for j in range(250)))
    proc = subprocess.Popen([sys.executable, "-m", "skel", "mine", str(corpus), "-j", "2", "--no-progress",
                             "--catalog", str(tmp_path / "cat.sqlite")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers: list[int] = []
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
            workers = [w for w in _children(proc.pid) if _running(w)]
            time.sleep(0.02)
        time.sleep(0.3)  # into the parsing
        assert proc.poll() is None and len(workers) == 2 and all(map(_running, workers)), \
            "skel mine finished before its workers could be caught mid-parse"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(map(_running, workers)):
            time.sleep(0.05)
        survivors = [w for w in workers if _running(w)]
        assert not survivors, f"workers {survivors} outlived their killed parent {proc.pid}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in workers:  # never leave one behind, whatever the test found
            if _running(w):
                os.kill(w, signal.SIGKILL)
