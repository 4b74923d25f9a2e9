"""The mining evaluation (benchmarks/mining_eval.py): its labels parse, its scoring counts what it
says, and on a few real files from the registry the fixed classes stay fixed (losses and softmax are
not split-KV attention, merges of stored maxima are instances, SwiGLU is not a gate, a widened
program id on a flat grid is an instance, warp shuffles through wrappers count)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import fetch_wheel_corpus

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mining_eval", REPO / "benchmarks" / "mining_eval.py")
mining_eval = importlib.util.module_from_spec(_spec)
sys.modules["mining_eval"] = mining_eval
_spec.loader.exec_module(mining_eval)

# files whose labels exercise the fixed classes; one corpus each, small wheels first
SUBSET = {
    "liger-kernel==0.8.5": ("liger_kernel/ops/jsd.py", "liger_kernel/ops/grpo_loss.py", "liger_kernel/ops/swiglu.py",
                            "liger_kernel/ops/softmax.py", "liger_kernel/ops/cross_entropy.py", "liger_kernel/ops/rms_norm.py",
                            "liger_kernel/ops/layer_norm.py"),
    "fla-core==0.6.0": ("fla/ops/attn/decoding.py", "fla/modules/fused_cross_entropy/ops.py",
                        "fla/ops/gated_delta_rule/fused_recurrent.py"),
}
FIXED = ("SK001", "SK009", "SK011", "SK012", "SK013")


def _label(kernel="k", code="SK012", kind="none", file="a.py"):
    return mining_eval.Label("p==1", file, 1, kernel, code, kind, "why", "t.csv:2")


def _finding(kernel="k", code="SK012", kind="opportunity"):
    from skel.catalog.records import Finding

    return Finding(code, kind, "a.py", 5, 5, kernel, ())


def test_shipped_labels_parse_and_cover_every_skeleton():
    from skel.skeletons.library import load_library

    labels = mining_eval.read_labels()
    codes = {lb.skeleton for lb in labels}
    assert codes == {sk.code for sk in load_library()}, f"skeletons without labels: {sorted({sk.code for sk in load_library()} - codes)}"
    assert len({lb.package.split("==")[0] for lb in labels}) >= 3
    assert any(Path(lb.file).suffix == ".cuh" for lb in labels)


def test_a_malformed_label_is_reported_with_file_and_row(tmp_path):
    (tmp_path / "x.csv").write_text("package,file,line,kernel,skeleton,label,reason\n"
                                    "p==1,a.py,3,k,SK012,maybe,why\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"x\.csv:2: label 'maybe'"):
        mining_eval.read_labels(tmp_path)


def test_scoring_counts_hits_misses_and_unlabelled_kinds():
    labels = [_label("k1", kind="none"), _label("k2", kind="instance"), _label("k3", kind="opportunity"),
              _label("k4", code="SK001", kind="instance")]
    found = {
        ("p==1", "a.py", "k1"): mining_eval.Found(True, 1, (_finding("k1"),)),  # none, but reported: FP
        ("p==1", "a.py", "k2"): mining_eval.Found(True, 1, (_finding("k2", kind="instance"), _finding("k2"))),  # TP + FP
        ("p==1", "a.py", "k3"): mining_eval.Found(True, 1, ()),  # FN
        ("p==1", "a.py", "k4"): mining_eval.Found(True, 1, (_finding("k4", code="SK001", kind="instance"),
                                                               _finding("k4", code="SK009"))),  # TP; SK009 unlabelled
    }
    t = mining_eval.score(labels, found)
    assert (t["SK012"].tp, t["SK012"].fp, t["SK012"].fn) == (1, 2, 1)
    assert (t["SK001"].tp, t["SK001"].fp, t["SK001"].fn) == (1, 0, 0)
    assert "SK009" not in t and (t["all"].tp, t["all"].fp, t["all"].fn) == (2, 2, 1)
    assert {e.kind for e in t["all"].errors} == {"false positive", "false negative"}


def test_the_fixed_classes_stay_fixed_on_real_files():
    labels = [lb for lb in mining_eval.read_labels() if lb.file in SUBSET.get(lb.package, ())]
    roots = {pkg: fetch_wheel_corpus(*pkg.split("==")) for pkg in SUBSET}
    found, problems = mining_eval.mine_labelled(labels, roots)
    assert not problems
    tallies = mining_eval.score(labels, found)
    errors = [e for code in FIXED for e in tallies.get(code, mining_eval.Tally()).errors]
    assert not errors, "\n".join(f"{e.label.skeleton} {e.kind} on {e.label.file}:{e.label.kernel}: {e.detail}"
                                 for e in errors)
    assert sum(tallies[c].tp for c in FIXED if c in tallies) >= 10  # the subset really exercises them


def test_an_sdist_only_package_is_unpacked_with_wheel_style_paths(tmp_path, monkeypatch):
    import io
    import tarfile

    monkeypatch.setenv("SKEL_CORPUS_CACHE", str(tmp_path))
    with tarfile.open(tmp_path / "some_pkg-1.0.tar.gz", "w:gz") as tf:
        for name, text in (("some_pkg-1.0/csrc/k.cu", b"__global__ void k() {}\n"),
                           ("some_pkg-1.0/some_pkg/ops.py", b"import triton\n"),
                           ("some_pkg-1.0/../escape.txt", b"outside\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tf.addfile(info, io.BytesIO(text))
    root = mining_eval.corpus_root("some-pkg==1.0")  # cached: no download
    assert root == tmp_path / "some_pkg-1.0"
    assert (root / "csrc" / "k.cu").read_text() == "__global__ void k() {}\n"
    assert (root / "some_pkg" / "ops.py").is_file()
    assert not [p for p in tmp_path.rglob("escape.txt")], "a member outside the sdist's folder is not written"
