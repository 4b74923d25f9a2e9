"""`skel mine`: walking, bad input, incremental re-mining, parallel workers, catalog safety."""
from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import skel.miner.cache as cache_mod
import skel.miner.mine as mine_mod
from skel.catalog.store import open_catalog
from skel.cli import main
from skel.commands.mine import FileProgress
from skel.miner.mine import mine

KERNEL = textwrap.dedent("""\
    import triton
    import triton.language as tl


    @triton.jit
    def l2norm_kernel(x, y, D: tl.constexpr):
        i = tl.program_id(0)
        o = tl.arange(0, D)
        b = tl.load(x + i * D + o).to(tl.float32)
        b = b / tl.sqrt(tl.sum(b * b) + 1e-6)
        tl.store(y + i * D + o, b)


    def l2norm(x, y):
        l2norm_kernel[(x.shape[0],)](x, y, D=x.shape[1])
    """)


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)
    return path


@pytest.fixture
def tree(tmp_path) -> Path:
    root = tmp_path / "repo"
    write(root / "ops" / "norm.py", KERNEL)
    write(root / "ops" / "norm2.py", KERNEL.replace("l2norm", "other_norm"))
    write(root / "ops" / "plain.py", "def f():\n    return 1\n")  # no kernel: skipped, no error
    write(root / "ops" / "__init__.py", "")  # empty, found by walking: skipped, no error
    write(root / ".git" / "hooks" / "k.py", KERNEL)  # hidden: never walked
    write(root / ".venv" / "lib" / "k.py", KERNEL)
    write(root / "env" / "pyvenv.cfg", "home = /usr\n")
    write(root / "env" / "lib" / "k.py", KERNEL)  # a virtual environment: not walked
    write(root / "notes.txt", "triton.jit")  # not a source extension
    return root


@pytest.fixture
def catalog_path(tmp_path) -> Path:
    return tmp_path / "cat.sqlite"


def by_path(report) -> dict[str, str]:
    return {os.path.basename(p): e for p, e in report.errors}


# ------------------------------------------------------------------------- basics
def test_mines_a_tree_and_records_findings(tree, catalog_path):
    report = mine([str(tree)], catalog=catalog_path, jobs=1)
    assert report.errors == ()
    assert report.files == 4  # norm.py, norm2.py, plain.py, __init__.py (hidden/venv folders skipped)
    assert (report.kernel_files, report.parsed, report.cached, report.kernels) == (2, 2, 0, 2)
    with open_catalog(catalog_path) as cat:
        paths = sorted(s.path for s in cat.sources())
        assert paths == [str(tree / "ops" / "norm.py"), str(tree / "ops" / "norm2.py")]
        (profile,) = cat.profiles(tree / "ops" / "norm.py")
        assert profile.name == "l2norm_kernel" and profile.launches[0].line == 15
        recorded = cat.findings(path=str(tree / "ops" / "norm.py"))
    assert sorted((f.skeleton, f.kind, f.line) for f in recorded) == \
        sorted((f.skeleton, f.kind, f.line) for f in report.instances + report.opportunities
               if f.path.endswith("/norm.py"))
    assert ("SK001", 10) in {(f.skeleton, f.line) for f in report.opportunities if f.path.endswith("/norm.py")}


def test_incremental_remine_parses_nothing(tree, catalog_path):
    first = mine([str(tree)], catalog=catalog_path, jobs=1)
    second = mine([str(tree)], catalog=catalog_path, jobs=1)
    assert (second.parsed, second.cached) == (0, 2)
    assert second.kernels == first.kernels
    assert sorted(second.opportunities, key=repr) == sorted(first.opportunities, key=repr)
    assert sorted(second.instances, key=repr) == sorted(first.instances, key=repr)
    # one edited file is parsed again, the other is not
    write(tree / "ops" / "norm2.py", KERNEL.replace("1e-6", "1e-5"))
    third = mine([str(tree)], catalog=catalog_path, jobs=1)
    assert (third.parsed, third.cached) == (1, 1)
    # --force parses everything
    assert mine([str(tree)], catalog=catalog_path, jobs=1, force=True).parsed == 2


def test_a_changed_miner_remines(tree, catalog_path, monkeypatch):
    mine([str(tree)], catalog=catalog_path, jobs=1)
    monkeypatch.setattr(cache_mod, "miner_fingerprint", lambda: "000000000000")
    assert mine([str(tree)], catalog=catalog_path, jobs=1).parsed == 2


def test_a_file_that_lost_its_kernels_leaves_the_catalog(tree, catalog_path):
    mine([str(tree)], catalog=catalog_path, jobs=1)
    write(tree / "ops" / "norm2.py", "def nothing():\n    pass\n")
    mine([str(tree)], catalog=catalog_path, jobs=1)
    with open_catalog(catalog_path) as cat:
        assert cat.source(str(tree / "ops" / "norm2.py")) is None
        assert cat.findings(path=str(tree / "ops" / "norm2.py")) == []


def test_deleted_and_emptied_files_leave_the_catalog(tree, catalog_path):
    mine([str(tree)], catalog=catalog_path, jobs=1)
    (tree / "ops" / "norm.py").unlink()
    write(tree / "ops" / "norm2.py", "")
    report = mine([str(tree)], catalog=catalog_path, jobs=1)
    assert report.errors == () and report.kernels == 0
    with open_catalog(catalog_path) as cat:
        assert cat.sources() == [] and cat.findings() == []


def test_parallel_workers_give_the_same_result(tmp_path):
    root = tmp_path / "many"
    for i in range(12):
        write(root / f"k{i}.py", KERNEL.replace("l2norm", f"norm{i}"))
    write(root / "bad.py", "import triton\n@triton.jit\ndef k(:\n")
    serial = mine([str(root)], catalog=tmp_path / "a.sqlite", jobs=1)
    parallel = mine([str(root)], catalog=tmp_path / "b.sqlite", jobs=2)
    assert parallel.parsed == serial.parsed == 13
    assert sorted(parallel.opportunities, key=repr) == sorted(serial.opportunities, key=repr)
    assert parallel.errors == serial.errors and len(parallel.errors) == 1
    assert parallel.kernels == serial.kernels == 12


# ---------------------------------------------------------------------- bad input
def test_every_bad_input_is_reported_and_the_run_goes_on(tree, catalog_path, tmp_path, monkeypatch):
    bad = tree / "bad"
    write(bad / "syntax.py", "import triton\n\n@triton.jit\ndef k(x:\n    pass\n")
    write(bad / "latin1.py", b"import triton\n# caf\xe9\n@triton.jit\ndef k(x):\n    pass\n")
    write(bad / "binary.py", b"triton jit \x00\x01\x02\xff")
    write(bad / "big.py", "import triton\n@triton.jit\ndef k(x):\n    pass\n" + "# pad\n" * 400)
    write(bad / "denied.py", KERNEL)
    (bad / "dangling.py").symlink_to(bad / "nowhere.py")
    (bad / "self.py").symlink_to(bad / "self.py")
    (bad / "loop").symlink_to(tree)  # a directory link back to the root
    os.mkfifo(bad / "fifo.py")  # must not block the walk
    explicit_empty = write(tmp_path / "empty.py", "")
    missing = tmp_path / "does-not-exist"

    real_open = open

    def fake_open(path, *args, **kwargs):  # unreadable even for root
        if str(path).endswith("denied.py"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(mine_mod, "open", fake_open, raising=False)
    report = mine([str(tree), str(explicit_empty), str(missing)], catalog=catalog_path, jobs=1, max_bytes=1000)
    errors = by_path(report)
    assert errors["syntax.py"].startswith("syntax error at line 4")
    assert "not UTF-8" in errors["latin1.py"] and "line 2" in errors["latin1.py"]
    assert errors["binary.py"].startswith("binary file")
    assert "limit" in errors["big.py"]
    assert errors["denied.py"] == "permission denied"
    assert "broken symbolic link" in errors["dangling.py"]
    assert "symlink loop" in errors["self.py"]
    assert "symlink loop" in errors["loop"]
    assert "empty file" in errors["empty.py"]
    assert errors["does-not-exist"] == "no such file or directory"
    assert "fifo.py" not in errors and "__init__.py" not in errors and "plain.py" not in errors
    # the good files were still mined, once each (not again through the loop link)
    assert report.kernels == 2 and report.parsed == 2 + 1  # two kernels + the syntax error parse
    with open_catalog(catalog_path) as cat:
        recorded = {os.path.basename(s.path): s.error for s in cat.sources()}
    assert set(recorded) == {"norm.py", "norm2.py", "syntax.py"}
    assert recorded["syntax.py"].startswith("syntax error")
    # an unchanged broken file is not parsed again but still reported
    again = mine([str(tree)], catalog=catalog_path, jobs=1, max_bytes=1000)
    assert again.parsed == 0 and by_path(again)["syntax.py"] == errors["syntax.py"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_unreadable_file_by_mode(tmp_path, catalog_path):
    f = write(tmp_path / "k.py", KERNEL)
    f.chmod(0)
    try:
        report = mine([str(f)], catalog=catalog_path, jobs=1)
    finally:
        f.chmod(0o644)
    assert by_path(report)["k.py"] == "permission denied"


def test_a_file_that_became_unreadable_leaves_the_catalog(tree, catalog_path):
    mine([str(tree)], catalog=catalog_path, jobs=1)
    write(tree / "ops" / "norm2.py", b"import triton\n@triton.jit\n# \xff\n")
    report = mine([str(tree)], catalog=catalog_path, jobs=1)
    assert "not UTF-8" in by_path(report)["norm2.py"]
    with open_catalog(catalog_path) as cat:
        assert cat.source(str(tree / "ops" / "norm2.py")) is None


def test_frontend_crash_is_reported_not_raised(tree, catalog_path, monkeypatch):
    def boom(text, path):
        raise IndexError("list index out of range")

    monkeypatch.setattr(mine_mod, "_reader", lambda language: boom)
    report = mine([str(tree)], catalog=catalog_path, jobs=1)
    assert by_path(report)["norm.py"] == "triton frontend failed: IndexError: list index out of range"


def test_unstorable_results_are_reported_and_recorded_as_failed(tree, catalog_path, monkeypatch):
    real = mine_mod.analyze

    def leaky(path, text, language, parts=1):  # a frontend bug: a non-JSON object inside a profile
        profiles, findings, error = real(path, text, language, parts)
        return [dataclasses.replace(p, notes=(object(),)) for p in profiles], findings, error

    monkeypatch.setattr(mine_mod, "analyze", leaky)
    report = mine([str(tree)], catalog=catalog_path, jobs=1)
    assert "cannot record the results" in by_path(report)["norm.py"] and report.kernels == 0
    with open_catalog(catalog_path) as cat:
        rec = cat.source(str(tree / "ops" / "norm.py"))
        assert rec.error.startswith("cannot record") and cat.profiles(rec.path) == []


# ---------------------------------------------------------------------------- CLI
def test_cli_json_shape_and_exit_code(tree, catalog_path, tmp_path, capsys):
    rc = main(["mine", str(tree), str(tmp_path / "missing.py"), "--json", "--catalog", str(catalog_path),
               "--no-progress", "--jobs", "1"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1  # the run went on (two kernels mined), but one input could not be read
    assert set(out) == {"files", "kernels", "instances", "opportunities", "errors"}
    assert out["files"] == 4 and out["kernels"] == 2
    assert out["errors"] == [{"path": str(tmp_path / "missing.py"), "error": "no such file or directory"}]
    for row in out["instances"] + out["opportunities"]:
        assert set(row) == {"skeleton", "path", "line", "kernel"}
    assert {"skeleton": "SK001", "path": str(tree / "ops" / "norm.py"), "line": 10,
            "kernel": "l2norm_kernel"} in out["opportunities"]


def test_cli_text_output_and_summary(tree, catalog_path, capsys):
    assert main(["mine", str(tree), "--catalog", str(catalog_path), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "SK001: 0 instances, 2 opportunities" in captured.out
    assert "(2 parsed, 0 unchanged), 2 kernels" in captured.err
    main(["mine", str(tree), "--catalog", str(catalog_path), "--no-progress"])
    assert "(0 parsed, 2 unchanged)" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["mine"], ["mine", ".", "--jobs", "0"], ["mine", ".", "--jobs", "x"]])
def test_cli_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


def test_cli_unusable_catalog_exits_2(tree, tmp_path, capsys):
    not_a_catalog = write(tmp_path / "cat.sqlite", "hello, not sqlite\n")
    assert main(["mine", str(tree), "--catalog", str(not_a_catalog), "--no-progress"]) == 2
    assert str(not_a_catalog) in capsys.readouterr().err
    assert not_a_catalog.read_text() == "hello, not sqlite\n"


def test_progress_bar_only_on_a_terminal():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, plain = Tty(), io.StringIO()
    for stream in (tty, plain):
        bar = FileProgress(stream)
        for i in range(1, 4):
            bar(i, 3, f"/x/k{i}.py")
        bar.close()
    assert "\x1b[" in tty.getvalue() and "3/3 files" in tty.getvalue() and "files/s" in tty.getvalue()
    assert plain.getvalue() == ""  # a fast run prints no periodic lines


# ------------------------------------------------------------------- concurrency
def test_concurrent_miners_share_one_catalog(tmp_path):
    roots = []
    for r in range(2):
        root = tmp_path / f"repo{r}"
        for i in range(10):
            write(root / f"k{i}.py", KERNEL.replace("l2norm", f"n{r}_{i}"))
        roots.append(root)
    cat = tmp_path / "shared.sqlite"
    cmd = [sys.executable, "-m", "skel", "mine", "--json", "--no-progress", "--jobs", "1", "--catalog", str(cat)]
    procs = [subprocess.Popen(cmd + [str(roots[0]), str(roots[1])], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1] for o in outs]
    for out, _ in outs:
        data = json.loads(out)
        assert data["errors"] == [] and data["kernels"] == 20
    with open_catalog(cat) as c:
        stats = c.stats()
        assert stats.sources == 20 and stats.kernels == 20
        assert len(c.findings(skeleton="SK001", kind="opportunity")) == 20  # no duplicates from the 3 writers


# ------------------------------------------------------------------- real corpus
def test_mines_the_fla_kda_folder(fla_corpus, catalog_path):
    kda = fla_corpus / "fla" / "ops" / "kda"
    report = mine([str(kda)], catalog=catalog_path)
    assert report.errors == ()
    target = str(kda / "fused_recurrent.py")
    found = {(f.skeleton, f.line) for f in report.opportunities if f.path == target}
    assert {("SK001", 157), ("SK001", 158)} <= found
    assert report.kernels > 10
