"""Stored rows back into records: one decoder per table, shared by the queries and by repair.

A row that SQLite reads but that does not decode (its JSON cut short by a damaged overflow
page, a profile without its fields) is damage, not a bug of the caller: ``decoded`` turns the
decoder's ``ValueError``/``KeyError``/``TypeError`` into ``CatalogDamaged`` naming the table and
the row. ``skel catalog repair`` runs the same decoders over every salvaged row, so what it
keeps is what the queries can read.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from skel.catalog.damage import undecodable
from skel.catalog.records import Edit, Finding, KernelEdit, KernelProfile, MinedEdit, SourceRecord, ValidationRun, freeze

Row = Mapping[str, Any]  # an sqlite3.Row or a dict of column -> value
DECODE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def source(r: Row) -> SourceRecord:
    return SourceRecord(r["path"], r["content_hash"], r["repo"], r["mtime"], r["size"], r["mined_at"], r["error"])


def finding(r: Row) -> Finding:
    params = tuple((k, freeze(v)) for k, v in json.loads(r["params_json"]).items())
    return Finding(r["skeleton"], r["kind"], r["path"], r["line"], r["end_line"], r["kernel"], params)


def run(r: Row) -> ValidationRun:
    extra = tuple((k, freeze(v)) for k, v in json.loads(r["extra_json"]).items())
    return ValidationRun(
        skeletons=tuple(json.loads(r["skeletons_json"])), kernel=r["kernel"], shape=r["shape"], dtype=r["dtype"],
        metric=r["metric"], verdict=r["verdict"], median=r["median"], ci_low=r["ci_low"], ci_high=r["ci_high"],
        unit=r["unit"], gpu=r["gpu"], torch_version=r["torch_version"], triton_version=r["triton_version"],
        source_hash=r["source_hash"], reason=r["reason"], created_at=r["created_at"], extra=extra, id=r["id"],
    )


def profile(r: Row):
    """A ``kernels`` row's ``KernelProfile``."""
    return KernelProfile.from_json(json.loads(r["profile_json"]))


def skeleton_entry(r: Row) -> dict:
    entry = json.loads(r["entry_json"])
    if not isinstance(entry, dict):
        raise TypeError(f"entry_json is a {type(entry).__name__}, not an object")
    return entry


def mined_edit(r: Row):
    """A ``history_edits`` row's ``MinedEdit``."""
    edits, sources = read_edits(r["edits_json"])
    ke = KernelEdit(r["path"], r["kernel"], r["line"], bool(r["jit"]), tuple(json.loads(r["local_names_json"])),
                    tuple(Edit.from_json(e) for e in edits), sources)
    return MinedEdit(r["repo"], r["commit_sha"], r["message"], r["committed_at"], ke)


def read_edits(text: str) -> tuple[list, tuple[str, ...]]:
    """``edits_json``: {"edits": [...], "sources": [...]}; rows written before sources were kept hold
    the bare list (read as no sources: such candidates cannot be admitted until re-mined)."""
    data = json.loads(text)
    if isinstance(data, list):
        return data, ()
    return data["edits"], tuple(data.get("sources", ()))


def candidate(r: Row):
    """A ``candidates`` row's ``CandidateSkeleton``."""
    from skel.catalog.candidates import CandidateSkeleton

    pattern = json.loads(r["pattern_json"])
    if not isinstance(pattern, dict):
        raise TypeError(f"pattern_json is a {type(pattern).__name__}, not an object")
    return CandidateSkeleton(r["code"], r["name"], r["title"], r["status"], r["promoted_as"], r["score"], r["kernels"],
                             r["commits"], r["perf_commits"], pattern)


# Table -> the decoder of its rows (tables missing here hold plain columns SQLite's types check).
DECODERS: dict[str, Callable[[Row], Any]] = {
    "skeletons": skeleton_entry, "sources": source, "kernels": profile, "findings": finding,
    "validation_runs": run, "history_edits": mined_edit, "candidates": candidate,
}


def decoded(path: Path | str, table: str, rows: Iterable[Row], decode: Callable[[Row], Any] | None = None) -> list:
    """``decode`` (default: the table's decoder) of every row; a row that does not decode is ``CatalogDamaged``."""
    decode = decode or DECODERS[table]
    out = []
    for r in rows:
        try:
            out.append(decode(r))
        except DECODE_ERRORS as exc:
            raise undecodable(path, table, row_key(r), exc) from exc
    return out


def row_key(r: Row) -> object:
    """How a message names a row: its id, else its code, path or key column."""
    keys = r.keys()
    for column in ("id", "code", "path", "key", "repo"):
        if column in keys:
            return r[column]
    return "?"
