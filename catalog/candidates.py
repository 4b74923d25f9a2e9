"""Candidate (preview) skeletons distilled from kernel history, and the history they come from.

``HistoryStore`` is a mixin of ``Catalog`` (schema version 3 tables ``history_repos``,
``history_edits``, ``candidates``, ``candidate_occurrences``). A candidate's code
(``SKP`` + 5 hex digits) is a hash of its pattern key, so re-mining more history finds
the same candidate again; its content (pattern, holes, conditions, occurrences,
support) is recomputed from every stored edit each time new history arrives.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone

from skel.catalog import rows
from skel.catalog.records import language_of

CANDIDATE_RE = re.compile(r"^SKP[0-9A-F]{5}$")
# history_repos.head of a repository whose mined state is not known to be complete (a run that was
# stopped before its first commit was done, or a catalog salvaged by `skel catalog repair`): the next
# `skel mine --history` re-walks it from the start, replacing its edits.
UNKNOWN_HEAD = ""
# meta keys: the progress of a run that walks commits (one per repository), and a flag that the
# candidates were not distilled since edits last changed (a run stopped between the two).
PROGRESS_KEY = "history_progress {repo}"
STALE_KEY = "candidates_stale"


@dataclass(frozen=True)
class HistoryProgress:
    """How far a `skel mine --history` run got: the first ``done`` commits of the walk ``since..target``
    (the ``done``-th being ``last``) are in the catalog, each committed with its edits."""

    since: str | None
    target: str
    done: int
    last: str
    paths: tuple[str, ...] = ()  # the walk's --under folders

    def to_json(self) -> dict:
        return {"since": self.since, "target": self.target, "done": self.done, "last": self.last,
                "paths": list(self.paths)}


@dataclass(frozen=True)
class CandidateSkeleton:
    code: str
    name: str
    title: str
    status: str  # preview | promoted
    promoted_as: str | None
    score: float
    kernels: int
    commits: int
    perf_commits: int
    pattern: dict = field(compare=False)  # Pattern.to_json(): edits, holes, refined, conditions, occurrences

    @property
    def lifecycle(self) -> str:
        return "preview"

    @property
    def targets(self) -> list[str]:
        """``cuda`` and/or ``triton``: what the files it was mined from are (CUDA edits are in the mirror's
        Python syntax, ``skel.miner.history_cuda``); ``triton`` when there are no occurrences."""
        kinds = {"cuda" if language_of(o["path"].split(":")[0]) == "cuda" else "triton" for o in self.pattern["occurrences"]}
        return sorted(kinds) or ["triton"]

    def to_json(self) -> dict:
        return {
            "code": self.code, "name": self.name, "title": self.title, "origin": "history", "lifecycle": "preview",
            "status": self.status, "promoted_as": self.promoted_as, "score": self.score,
            "support": {"kernels": self.kernels, "commits": self.commits, "perf_commits": self.perf_commits},
            **{k: self.pattern[k] for k in ("edits", "holes", "refined", "refined_holes", "conditions", "occurrences")},
        }


def describe(edits: list[dict]) -> tuple[str, str]:
    """A name (kebab-case) and a title from what the pattern removes and adds."""
    def dotted(text: str) -> list[str]:
        return re.findall(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+", text)

    before = [t for e in edits for t in dotted(e["before"])]
    after = [t for e in edits for t in dotted(e["after"])]
    removed = [t for t in dict.fromkeys(before) if t not in after]
    added = [t for t in dict.fromkeys(after) if t not in before]
    consts = [c for e in edits for c in re.findall(r"\b\d+\.\d{4,}\b", e["after"]) if c not in e["before"]]
    if removed or added:
        title = f"replace {', '.join(removed) or 'code'} by {', '.join(added) or 'other code'}"
    else:
        first = edits[0]
        title = f"{first['kind']} `{first['before'] or first['after']}`" + (f" -> `{first['after']}`" if first["before"] else "")
    if consts:
        title += f" (introduces {', '.join(dict.fromkeys(consts))})"
    words = [w.split(".")[-1] for w in removed[:2]] + ["to"] + [w.split(".")[-1] for w in added[:2]]
    if not removed and not added:
        words = [edits[0]["kind"], *re.findall(r"[a-z]+", (edits[0]["after"] or edits[0]["before"]).lower())[:3]]
    name = "-".join(w.lower().replace("_", "-") for w in words if w) or "edit"
    name = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "", name)).strip("-")[:48].strip("-") or "edit"
    return name, title[:160]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class HistoryStore:
    """Catalog methods for history mining (mixed into ``skel.catalog.store.Catalog``)."""

    # ------------------------------------------------------------- history
    def history_head(self, repo: str) -> str | None:
        """The last commit mined in ``repo`` (None if never mined)."""
        rows = self._q("SELECT head FROM history_repos WHERE repo = ?", (repo,))
        return rows[0]["head"] if rows else None

    def history_progress(self, repo: str) -> HistoryProgress | None:
        """Where a stopped (killed) run over ``repo`` left off; None when no run is unfinished."""
        found = self._q("SELECT value FROM meta WHERE key = ?", (PROGRESS_KEY.format(repo=repo),))
        if not found:
            return None
        try:
            d = json.loads(found[0]["value"])
            return HistoryProgress(d["since"], d["target"], int(d["done"]), d["last"], tuple(d.get("paths", ())))
        except (ValueError, KeyError, TypeError):
            return None  # unreadable progress: the run is redone from its start

    def record_commit(self, repo: str, progress: HistoryProgress, mined, reset: bool = False) -> None:
        """One walked commit: its kernel edits and the run's progress, in one transaction.

        ``reset`` (with the first commit of a run that re-walks from the start) forgets the
        repository's edits first and marks its head unknown until the run finishes, so a run
        stopped midway resumes where it stopped and never passes for complete.
        """
        with self.transaction():
            if reset:
                self._conn.execute("DELETE FROM history_edits WHERE repo = ?", (repo,))
            self._conn.execute(
                "INSERT INTO history_repos(repo, head, commits, mined_at) VALUES (?, ?, 0, ?) "
                + ("ON CONFLICT(repo) DO UPDATE SET head = excluded.head, commits = 0" if reset else
                   "ON CONFLICT(repo) DO NOTHING"),
                (repo, UNKNOWN_HEAD, _now()),
            )
            self._insert_edits(mined)
            self._set_meta(PROGRESS_KEY.format(repo=repo), json.dumps(progress.to_json()))
            self._set_meta(STALE_KEY, "1")

    def finish_history(self, repo: str, head: str, commits: int, reset: bool = False, forget: bool = False) -> None:
        """The run over ``repo`` walked every commit up to ``head``: move the head, count the commits.

        ``forget``: drop the repository's stored edits (a re-walk from the start that found no commit to record).
        """
        with self.transaction():
            if forget:
                self._conn.execute("DELETE FROM history_edits WHERE repo = ?", (repo,))
            self._move_head(repo, head, commits, reset)
            self._conn.execute("DELETE FROM meta WHERE key = ?", (PROGRESS_KEY.format(repo=repo),))
            self._set_meta(STALE_KEY, "1")

    def candidates_stale(self) -> bool:
        """True when edits changed after the candidates were last distilled (a run stopped in between)."""
        return bool(self._q("SELECT 1 FROM meta WHERE key = ?", (STALE_KEY,)))

    def _move_head(self, repo: str, head: str, commits: int, reset: bool) -> None:
        """``repo``'s head is now ``head``; its commit count grows by ``commits`` (or is ``commits`` on ``reset``)."""
        self._conn.execute(
            "INSERT INTO history_repos(repo, head, commits, mined_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT(repo) DO UPDATE SET head = excluded.head, "
            "commits = CASE WHEN ? THEN excluded.commits ELSE history_repos.commits + excluded.commits END, "
            "mined_at = excluded.mined_at",
            (repo, head, commits, _now(), 1 if reset else 0),
        )

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = "
                           "excluded.value", (key, value))

    def _insert_edits(self, mined) -> None:
        for m in mined:
            ke = m.kernel_edit
            self._conn.execute(
                "INSERT OR REPLACE INTO history_edits(repo, commit_sha, message, committed_at, path, kernel, line, jit, "
                "local_names_json, edits_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (m.repo, m.commit, m.message, m.date, ke.path, ke.kernel, ke.line, int(ke.jit),
                 json.dumps(list(ke.local_names)), _edits_json(ke)),
            )

    def record_history(self, repo: str, head: str, commits: int, mined, reset: bool = False) -> None:
        """Store the kernel edits of newly mined commits and move ``repo``'s head, in one transaction.

        ``mined`` are ``skel.miner.history_patterns.MinedEdit``; ``reset`` forgets what was
        mined before (history was rewritten, or --force).
        """
        with self.transaction():
            if reset:
                self._conn.execute("DELETE FROM history_edits WHERE repo = ?", (repo,))
            self._move_head(repo, head, commits, reset)
            self._insert_edits(mined)
            self._set_meta(STALE_KEY, "1")

    def history_edits(self, repo: str | None = None) -> list:
        """Every stored kernel edit (of one repo, or all), oldest commit first."""
        sql = "SELECT * FROM history_edits" + (" WHERE repo = ?" if repo else "") + " ORDER BY id"
        return rows.decoded(self.path, "history_edits", self._q(sql, (repo,) if repo else ()))

    def history_repos(self) -> list[dict]:
        return [dict(r) for r in self._q("SELECT * FROM history_repos ORDER BY repo")]

    # ----------------------------------------------------------- candidates
    def store_candidates(self, patterns) -> None:
        """Replace the candidates by ``patterns`` (``Pattern``), keeping each code's promotion status."""
        with self.transaction():
            self._conn.execute("DELETE FROM meta WHERE key = ?", (STALE_KEY,))
            promoted = {r["code"]: r["promoted_as"] for r in self._q("SELECT code, promoted_as FROM candidates WHERE status = 'promoted'")}
            self._conn.execute("DELETE FROM candidates")
            for p in patterns:
                data = p.to_json()
                name, title = describe(data["edits"])
                code = p.code
                self._conn.execute(
                    "INSERT INTO candidates(code, pattern_key, name, title, status, promoted_as, score, kernels, commits, "
                    "perf_commits, pattern_json, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (code, p.key, name, title, "promoted" if code in promoted else "preview", promoted.get(code),
                     p.score, p.kernels, p.commits, p.perf_commits, json.dumps(data), _now()),
                )
                for o in p.occurrences:
                    self._conn.execute(
                        "INSERT INTO candidate_occurrences(candidate, repo, commit_sha, path, line, kernel, message, "
                        "committed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (code, o.repo, o.commit, o.path, o.line, o.kernel, o.message, o.date),
                    )

    def candidates(self, status: str | None = None) -> list[CandidateSkeleton]:
        """Candidates, best score first (ties by code)."""
        sql = "SELECT * FROM candidates" + (" WHERE status = ?" if status else "") + " ORDER BY score DESC, code"
        return rows.decoded(self.path, "candidates", self._q(sql, (status,) if status else ()))

    def candidate(self, code: str) -> CandidateSkeleton | None:
        found = rows.decoded(self.path, "candidates", self._q("SELECT * FROM candidates WHERE code = ?", (code.upper(),)))
        return found[0] if found else None

    def mark_promoted(self, code: str, library_code: str) -> None:
        with self.transaction():
            self._conn.execute("UPDATE candidates SET status = 'promoted', promoted_as = ? WHERE code = ?",
                               (library_code, code.upper()))


def _edits_json(ke) -> str:
    """``edits_json``: the edits, with the hashes of the two file versions they came from.

    Stored as {"edits": [...], "sources": [...]}; rows written before sources were kept hold
    the bare list (read as no sources: such candidates cannot be admitted until re-mined).
    """
    return json.dumps({"edits": [e.to_json() for e in ke.edits], "sources": list(ke.sources)})

