"""The apply report's plot: speedup (95 % interval as error bars) and % of roofline against N, one column per
shape bucket, every timed candidate, GPU and dtype in the title; a report that says why when there is none."""
from __future__ import annotations

import pytest

import matplotlib  # noqa: F401  (the `plot` extra; the test extra installs it)

from skel.pipeline.report import PLOT_MISSING, plot_figure, render_markdown, timed_points


def perf(speedup, low, high, base_pct, cand_pct):
    return {"speedup": speedup, "speedup_low": low, "speedup_high": high, "baseline_roofline_pct": base_pct,
            "candidate_roofline_pct": cand_pct, "verdict": "faster" if low > 1 else "slower" if high < 1 else "same",
            "baseline": {"median_us": 100.0}, "candidate": {"median_us": 100.0 / speedup, "low_us": 1, "high_us": 2}}


def shape(n, t, p):
    return {"shape": f"N{n}-T{t}-H32-K128", "perf": p, "numerics": {"passed": True}}


DATA = {
    "target": "kernels/kda_decode/kernel.py", "perf_measured": True,
    "environment": {"gpu": "NVIDIA H200", "driver": "550.54.15", "torch": "2.11.0", "triton": "3.6.0",
                    "commit": "abc", "date": "2026-12-01T10:00:00Z"},
    "candidates": [
        {"label": "SK001", "accepted": True, "gate": {"dtype": "bfloat16", "shapes": [
            shape(64, 1, perf(1.09, 1.08, 1.10, 72.0, 79.0)), shape(1, 1, perf(0.97, 0.95, 0.99, 8.0, 7.8)),
            shape(64, 8, perf(1.20, 1.15, 1.25, 18.0, 21.6)), shape(256, 1, perf(1.05, 1.04, 1.06, 76.0, 80.0))]}},
        {"label": "SK002 [BV=128]", "accepted": False, "gate": {"dtype": "bfloat16", "shapes": [
            shape(64, 1, perf(0.90, 0.88, 0.92, 71.0, 64.0)), shape(64, 8, perf(1.30, 1.28, 1.33, 19.0, 24.7))]}},
        {"label": "SK003", "accepted": False, "gate": {"dtype": "bfloat16", "shapes": [
            {"shape": "N64-T1-H32-K128", "perf": None, "numerics": {"passed": False}}]}},  # failed: never plotted
    ],
}


def test_points_per_bucket_sorted_by_n():
    pts = timed_points(DATA)
    assert sorted(pts) == ["T1-H32-K128", "T8-H32-K128"]
    assert [q["N"] for q in pts["T1-H32-K128"]["SK001"]] == [1, 64, 256]  # a line along N, never across buckets
    assert set(pts["T1-H32-K128"]) == {"SK001", "SK002 [BV=128]"}  # every timed candidate, accepted or not


def test_figure_layout_error_bars_and_title():
    fig = plot_figure(DATA)
    assert fig._suptitle.get_text() == "kernel.py: NVIDIA H200, bfloat16"
    axes = fig.axes
    assert len(axes) == 4  # 2 rows (speedup, % of roofline) x 2 buckets
    top_t1 = next(a for a in axes if a.get_title() == "T1-H32-K128")
    bars = top_t1.containers
    assert len(bars) == 2  # one errorbar container per candidate
    sk001 = next(b for b in bars if b.get_label() == "SK001")
    line, _, (segments,) = sk001.lines[0], sk001.lines[1], sk001.lines[2]
    assert list(line.get_xdata()) == [1, 64, 256] and list(line.get_ydata()) == [0.97, 1.09, 1.05]
    lows_highs = [tuple(seg[:, 1]) for seg in segments.get_segments()]
    assert lows_highs == [pytest.approx((0.95, 0.99)), pytest.approx((1.08, 1.10)), pytest.approx((1.04, 1.06))]
    assert top_t1.get_xscale() == "log"
    bottom = [a for a in axes if a.get_ylabel() == "% of copy roofline"]
    assert len(bottom) == 2
    original = next(ln for ln in bottom[0].get_lines() if ln.get_label() == "original")
    assert list(original.get_xdata()) == [1, 64, 256] and list(original.get_ydata()) == [8.0, 71.5, 76.0]  # median


def test_nothing_timed_no_figure_and_the_report_says_why(monkeypatch):
    assert plot_figure({**DATA, "candidates": DATA["candidates"][2:]}) is None
    monkeypatch.setattr("skel.pipeline.report._has_matplotlib", lambda: False)
    md = render_markdown({**DATA, "binding": {"how": "x"}, "device": "cuda", "output": None, "notes": [],
                          "winners": [], "candidates": [], "skipped": [], "applicability": []}, None)
    assert PLOT_MISSING in md and "NVIDIA H200" in md and "550.54.15" in md


def test_the_batch_dim_is_the_specs():
    """An inferred harness names its batch dim as the launcher does (B, batch): the plot runs along it."""
    renamed = {**DATA, "binding": {"how": "x", "batch": "batch"}, "candidates": [
        {**c, "gate": {**c["gate"], "shapes": [{**s, "shape": s["shape"].replace("N", "batch", 1)}
                                               for s in c["gate"]["shapes"]]}} for c in DATA["candidates"]]}
    pts = timed_points(renamed)
    assert sorted(pts) == ["T1-H32-K128", "T8-H32-K128"]
    assert [q["N"] for q in pts["T1-H32-K128"]["SK001"]] == [1, 64, 256]
    fig = plot_figure(renamed)
    assert any(a.get_xlabel() == "batch dim batch" for a in fig.axes)
