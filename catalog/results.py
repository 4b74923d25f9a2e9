"""``skel results export``: every verdict in the catalog as one long table, to load in pandas, polars,
DuckDB or a spreadsheet (like Liger's benchmark CSV or FLA's records).

One row per target x candidate x shape x dtype x metric (a ``validation_runs`` row): the shape's
dims as columns of their own (``dim_N``, ``dim_T``, ...), the numbers (median and its 95 % interval;
None where nothing was measured, never a guess) and where they were measured (GPU, driver, CUDA,
torch, triton, date, the target's commit). Formats: csv, json (a list of objects), parquet (needs
pyarrow; without it the export says so and exits 2).
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from skel.errors import UsageError

FORMATS = ("csv", "json", "parquet")
COLUMNS = ("id", "date", "target", "candidate", "skeletons", "shape", "dtype", "metric", "verdict", "median",
           "ci_low", "ci_high", "unit", "baseline_us", "candidate_us", "baseline_roofline_pct",
           "candidate_roofline_pct", "floor_us", "baseline_floor_x", "candidate_floor_x", "regime", "gpu", "driver", "cuda", "torch", "triton", "python", "skel", "commit",
           "source_hash", "reason")
PARQUET_MISSING = ("parquet needs pyarrow, which is not installed: `pip install 'skel[parquet]'` (or export --format csv "
                   "and convert it); csv and json need nothing")


def rows(runs) -> list[dict]:
    """``ValidationRun`` records as flat dicts: the COLUMNS, then one ``dim_<NAME>`` per shape dim."""
    out = []
    for r in runs:
        extra = dict(r.extra)
        row = {
            "id": r.id, "date": r.created_at, "target": r.kernel, "candidate": extra.get("label", "+".join(r.skeletons)),
            "skeletons": "+".join(r.skeletons), "shape": r.shape, "dtype": r.dtype, "metric": r.metric,
            "verdict": r.verdict, "median": r.median, "ci_low": r.ci_low, "ci_high": r.ci_high, "unit": r.unit,
            "baseline_us": extra.get("baseline_us"), "candidate_us": extra.get("candidate_us"),
            "baseline_roofline_pct": extra.get("baseline_roofline_pct"),
            "candidate_roofline_pct": extra.get("candidate_roofline_pct"),
            "floor_us": extra.get("floor_us"), "baseline_floor_x": extra.get("baseline_floor_x"),
            "candidate_floor_x": extra.get("candidate_floor_x"), "regime": extra.get("regime"),
            "gpu": r.gpu, "driver": extra.get("driver", ""), "cuda": extra.get("cuda", ""), "torch": r.torch_version,
            "triton": r.triton_version, "python": extra.get("python", ""), "skel": extra.get("skel", ""),
            "commit": extra.get("commit", ""), "source_hash": r.source_hash, "reason": r.reason,
        }
        row.update({f"dim_{k}": v for k, v in shape_dims(r.shape).items()})
        out.append(row)
    return out


def shape_dims(label: str) -> dict[str, int]:
    """"N64-T1-H32" -> {"N": 64, "T": 1, "H": 32}; a label that is not of that form gives {}."""
    dims = {}
    for part in label.split("-"):
        name = part.rstrip("0123456789")
        digits = part[len(name):]
        if not name or not digits:
            return {}
        dims[name] = int(digits)
    return dims


def columns(table: list[dict]) -> list[str]:
    dims = sorted({k for row in table for k in row if k.startswith("dim_")})
    return [*COLUMNS, *dims]


def to_csv(table: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns(table), lineterminator="\n")
    writer.writeheader()
    for row in table:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buf.getvalue()


def to_json(table: list[dict]) -> str:
    cols = columns(table)
    return json.dumps([{c: row.get(c) for c in cols} for row in table], indent=2) + "\n"


def write_parquet(table: list[dict], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError(PARQUET_MISSING) from None
    cols = columns(table)
    pq.write_table(pa.Table.from_pylist([{c: row.get(c) for c in cols} for row in table]), str(path))
