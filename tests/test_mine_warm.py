"""A warm re-mine (nothing changed) answers every unchanged file from the catalog in a bounded number of
queries, whatever the number of files, with exactly the cold run's results.

Counted, not timed: the statements the catalog's connection runs (SQLite's trace callback). Before
the batched look-up a warm run made two queries per file, one of them a scan of every finding
(5,000 files: 54-65 s); the wall-clock figures are benchmarks/mine_scale.py's.
"""
from __future__ import annotations

import sqlite3
import textwrap
from pathlib import Path

import pytest

import skel.catalog.queries as queries_mod
from skel.catalog.damage import CatalogError
from skel.catalog.store import open_catalog
from skel.miner.mine import mine

# Two kernels, one jit helper (a device function: not counted as a kernel) and a launcher each.
KERNELS = textwrap.dedent("""\
    import triton
    import triton.language as tl


    @triton.jit
    def _sq{i}(x):
        return x * x


    @triton.jit
    def norm{i}(x, y, D: tl.constexpr):
        i = tl.program_id(0)
        o = tl.arange(0, D)
        b = tl.load(x + i * D + o).to(tl.float32)
        tl.store(y + i * D + o, b / tl.sqrt(tl.sum(_sq{i}(b)) + 1e-6))


    @triton.jit
    def scale{i}(x, n, BLOCK: tl.constexpr):
        o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x + o, tl.exp(tl.load(x + o, mask=o < n) * 0.5), mask=o < n)


    def run{i}(x, y):
        norm{i}[(x.shape[0],)](x, y, D=x.shape[1])
        scale{i}[(triton.cdiv(x.numel(), 128),)](x, x.numel(), BLOCK=128)
    """)


def corpus(root: Path, n: int) -> Path:
    for i in range(n):
        f = root / f"pkg{i % 7}" / f"ops{i}.py"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(KERNELS.format(i=i))
    (root / "pkg0" / "broken.py").write_text("import triton\n@triton.jit\ndef k(:\n")  # an error, cached too
    return root


def results(report) -> tuple:
    key = lambda f: (f.path, f.line, f.skeleton, f.kind)  # noqa: E731
    return (report.kernels, report.kernel_files, sorted(report.instances, key=key),
            sorted(report.opportunities, key=key), sorted(report.errors))


def warm_queries(root: Path, db: Path) -> tuple[int, object]:
    statements: list[str] = []
    with open_catalog(db) as cat:
        cat._conn.set_trace_callback(statements.append)
        report = mine([str(root)], catalog=cat, jobs=1)
    assert (report.parsed, report.cached) == (0, report.kernel_files), "nothing changed: nothing parsed"
    return len(statements), report


@pytest.mark.parametrize("chunk", [queries_mod.STORED_CHUNK, 16], ids=["one-chunk", "chunks-of-16"])
def test_a_warm_re_mine_makes_a_bounded_number_of_queries(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(queries_mod, "STORED_CHUNK", chunk)
    counts = {}
    for n in (6, 60):
        root, db = corpus(tmp_path / f"c{n}", n), tmp_path / f"c{n}.sqlite"
        cold = mine([str(root)], catalog=db, jobs=1)
        assert cold.kernels == 2 * n and len(cold.errors) == 1 and cold.opportunities, "helpers are not kernels"
        counts[n], warm = warm_queries(root, db)
        assert results(warm) == results(cold)
    chunks = -(-61 // chunk) - -(-7 // chunk)  # the extra chunks the larger corpus needs
    assert counts[60] <= counts[6] + 3 * chunks, counts  # a few queries a chunk, none per file
    assert counts[60] < 61 / 2, f"{counts[60]} statements for 61 unchanged files (before: two a file)"


def test_a_damaged_profile_is_reported_by_a_warm_re_mine(tmp_path):
    root, db = corpus(tmp_path / "c", 3), tmp_path / "c.sqlite"
    mine([str(root)], catalog=db, jobs=1)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE kernels SET profile_json = '{\"name\": \"cut he' WHERE id = (SELECT min(id) FROM kernels)")
    conn.close()
    with pytest.raises(CatalogError, match="table kernels"):
        mine([str(root)], catalog=db, jobs=1)


def test_a_file_replaced_meanwhile_is_parsed_not_served_stale(tmp_path, monkeypatch):
    """Between reading the catalog's hashes and its records another writer may re-record a file: a record
    whose hash no longer matches the bytes read is not served (the file is parsed again)."""
    root, db = corpus(tmp_path / "c", 3), tmp_path / "c.sqlite"
    cold = mine([str(root)], catalog=db, jobs=1)
    real = queries_mod.QueryStore.stored_files

    def another_writer_first(self, paths):
        got = real(self, paths)
        path = sorted(got)[0]
        got[path] = type(got[path])(type(got[path].source)(path, "sha256:other"), 0, ())
        return got

    monkeypatch.setattr(queries_mod.QueryStore, "stored_files", another_writer_first)
    warm = mine([str(root)], catalog=db, jobs=1)
    assert (warm.parsed, warm.cached) == (1, cold.kernel_files - 1)
    assert results(warm) == results(cold)
