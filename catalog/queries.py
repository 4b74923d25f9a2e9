"""Reading the catalog back: ``QueryStore`` is a mixin of ``Catalog``.

What was synced, mined and measured, as the records of ``skel.catalog.records``:
skeleton entries, sources and their kernel profiles, findings, validation runs, a
skeleton's evidence and the catalog's counts. The catalog owns the connection and
the helpers these use (``_conn``, ``_q``, ``_depth``, ``path``, ``version``); all
writing stays in ``skel.catalog.store``. Rows become records through ``skel.catalog.rows``
(a row that does not decode is reported as damage).
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from skel.catalog import rows
from skel.catalog.records import Evidence, Finding, SourceRecord, Stats, StoredFile, ValidationRun


STORED_CHUNK = 500  # files per query of ``stored_files`` (SQLite's limit on bound values was 999 before 3.32)


class QueryStore:
    """Catalog methods that read (mixed into ``skel.catalog.store.Catalog``)."""

    # --------------------------------------------------------------- skeletons
    def skeleton_entries(self) -> dict[str, dict]:
        """Code -> the library entry (``Skeleton.to_json()``) as last synced."""
        found = self._q("SELECT code, entry_json FROM skeletons ORDER BY code")
        return dict(zip((r["code"] for r in found), rows.decoded(self.path, "skeletons", found)))

    # ------------------------------------------------------------------ mining
    def source_hash(self, path: str | Path) -> str | None:
        """The content hash recorded for ``path`` (None if never mined): skip unchanged files."""
        found = self._q("SELECT content_hash FROM sources WHERE path = ?", (str(path),))
        return found[0]["content_hash"] if found else None

    def source(self, path: str | Path) -> SourceRecord | None:
        found = rows.decoded(self.path, "sources", self._q("SELECT * FROM sources WHERE path = ?", (str(path),)))
        return found[0] if found else None

    def sources(self, failed_only: bool = False) -> list[SourceRecord]:
        sql = "SELECT * FROM sources" + (" WHERE error IS NOT NULL" if failed_only else "") + " ORDER BY path"
        return rows.decoded(self.path, "sources", self._q(sql))

    def stored_files(self, paths: Iterable[str | Path]) -> dict[str, StoredFile]:
        """Path -> what the catalog holds for it (its source, kernel count and findings), for those of
        ``paths`` it knows: the answer a warm re-mine reports for unchanged files.

        A few queries per ``STORED_CHUNK`` files, whatever their number (never a query or a scan per file),
        all in one snapshot. Profiles are not decoded, only their kind read (a profile that is not JSON
        is still reported as damage); findings are in ``findings(path=...)``'s order.
        """
        wanted = list(dict.fromkeys(str(p) for p in paths))
        out: dict[str, StoredFile] = {}
        with self.snapshot():
            for start in range(0, len(wanted), STORED_CHUNK):
                out.update(self._stored_chunk(wanted[start:start + STORED_CHUNK]))
        return out

    def _stored_chunk(self, paths: list[str]) -> dict[str, StoredFile]:
        marks = ", ".join("?" * len(paths))
        found = self._q(f"SELECT * FROM sources WHERE path IN ({marks})", paths)
        ids = {r["id"]: rec for r, rec in zip(found, rows.decoded(self.path, "sources", found))}
        if not ids:
            return {}
        id_marks = ", ".join("?" * len(ids))
        kinds = self._q(
            "SELECT id, source_id, CASE WHEN json_valid(profile_json) THEN json_extract(profile_json, '$.kind') END "
            f"AS kind, json_valid(profile_json) AS valid FROM kernels WHERE source_id IN ({id_marks})", list(ids))
        broken = [r["id"] for r in kinds if not r["valid"]]
        if broken:  # decoding the row names the damage as every other query does
            rows.decoded(self.path, "kernels", self._q("SELECT * FROM kernels WHERE id = ?", (broken[0],)))
        counts = dict.fromkeys(ids, 0)
        for r in kinds:
            counts[r["source_id"]] += r["kind"] == "kernel"
        by_source: dict[int, list[Finding]] = {i: [] for i in ids}
        found = self._q(f"SELECT * FROM findings WHERE source_id IN ({id_marks}) ORDER BY source_id, line, skeleton, id",
                        list(ids))
        for r, f in zip(found, rows.decoded(self.path, "findings", found)):
            by_source[r["source_id"]].append(f)
        return {rec.path: StoredFile(rec, counts[i], tuple(by_source[i])) for i, rec in ids.items()}

    def profiles(self, path: str | Path) -> list:
        """The kernel profiles recorded for ``path``, in line order (the miner's content-hash cache)."""
        found = self._q(
            "SELECT k.id, k.profile_json FROM kernels k JOIN sources s ON s.id = k.source_id WHERE s.path = ? "
            "ORDER BY k.line",
            (str(path),),
        )
        return rows.decoded(self.path, "kernels", found)

    def findings(
        self,
        skeleton: str | None = None,
        kind: str | None = None,
        path: str | Path | None = None,
        kernel: str | None = None,
        limit: int | None = None,
    ) -> list[Finding]:
        """Findings filtered by any of skeleton code, kind, file path and kernel name, by path and line."""
        clauses, args = [], []
        for column, value in (("skeleton", skeleton and skeleton.upper()), ("kind", kind), ("path", path), ("kernel", kernel)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(str(value))
        sql = "SELECT * FROM findings" + (" WHERE " + " AND ".join(clauses) if clauses else "")
        sql += " ORDER BY path, line, skeleton, id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return rows.decoded(self.path, "findings", self._q(sql, args))

    # -------------------------------------------------------------- validation
    def validation_runs(self, skeleton: str | None = None, kernel: str | None = None) -> list[ValidationRun]:
        """Runs involving ``skeleton`` (alone or combined with others) and/or of ``kernel``, oldest first."""
        clauses, args = [], []
        if skeleton is not None:
            clauses.append("EXISTS (SELECT 1 FROM json_each(validation_runs.skeletons_json) j WHERE j.value = ?)")
            args.append(skeleton.upper())
        if kernel is not None:
            clauses.append("kernel = ?")
            args.append(kernel)
        sql = "SELECT * FROM validation_runs" + (" WHERE " + " AND ".join(clauses) if clauses else "") + " ORDER BY id"
        return rows.decoded(self.path, "validation_runs", self._q(sql, args))

    # ---------------------------------------------------------------- evidence
    def evidence(self, code: str) -> Evidence:
        """Everything the catalog knows for one skeleton: mined instances, opportunities, measured runs."""
        code = code.upper()
        # One read transaction so the three queries see the same snapshot under concurrent writers.
        with self.snapshot():
            instances = self.findings(skeleton=code, kind="instance")
            opportunities = self._q(
                "SELECT COUNT(*) AS n FROM findings WHERE skeleton = ? AND kind = 'opportunity'", (code,)
            )[0]["n"]
            runs = self.validation_runs(skeleton=code)
        return Evidence(code, tuple(instances), opportunities, tuple(runs))

    def stats(self) -> Stats:
        def count(sql: str) -> int:
            return self._q(sql)[0][0]

        return Stats(
            path=str(self.path),
            schema_version=self.version,
            skeletons=count("SELECT COUNT(*) FROM skeletons"),
            sources=count("SELECT COUNT(*) FROM sources"),
            failed_sources=count("SELECT COUNT(*) FROM sources WHERE error IS NOT NULL"),
            kernels=count("SELECT COUNT(*) FROM kernels"),
            instances=count("SELECT COUNT(*) FROM findings WHERE kind = 'instance'"),
            opportunities=count("SELECT COUNT(*) FROM findings WHERE kind = 'opportunity'"),
            validation_runs=count("SELECT COUNT(*) FROM validation_runs"),
        )

