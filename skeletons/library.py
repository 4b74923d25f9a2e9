"""The skeleton library: one folder per skeleton under ``skeletons/``.

A folder holds
  skeleton.toml   metadata, conditions, transformation, constraints, provenance, and for an
                  expression-level skeleton ``[[pattern]]`` before/after tables (no rule.py then)
  rule.py         one ``skel.skeletons.rule.Rule`` subclass: conditions, detection, rewrite
  docs.md         documentation under fixed headings (the text `skel catalog show` prints)
  examples/       before.py (the skeleton applies), after.py (rewrite(before) == after where the rule
                  rewrites; after.<variant>.py for a search), fixtures*.py / fixtures*.cu (markers)

Availability, safety and transformation kind are read off the rule, never typed in the TOML.
A library is the shipped folder plus any user folders (``--library DIR``, ``[tool.skel]
skeleton_dirs``); a folder that does not load is reported with the others' problems, and the
rest of the library still loads (``check_library``).

The loader validates every field and reports each problem with the file, the
line (where TOML lets us find it) and the field. Evidence is never typed here:
it comes from the catalog database (mined instances, measured verdicts).
"""
from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from skel.catalog.records import CODE_RE, Condition

FAMILY_RE = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")  # one spelling everywhere: kda_decode, as kernels/ names it
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
CONDITION_ID_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

CATEGORIES = ("memory", "compute", "precision", "parallelism", "launch")
LIFECYCLES = ("preview", "stable", "deprecated")
AVAILABILITY = ("always", "sometimes", "never")
SAFETY = ("safe", "unsafe")
TARGETS = ("triton", "cuda")
TRANSFORM_KINDS = ("pattern", "codemod", "template", "launch-search")
CONSTRAINT_KEYS = ("registers", "shared_memory", "warps", "occupancy", "grows_with")
DOC_HEADINGS = (
    "What it does",
    "Why it is faster",
    "When it applies",
    "Example",
    "Rewritten",
    "Rewrite safety",
)
FILES = ("skeleton.toml", "docs.md", "examples/before.py", "examples/after.py")
DERIVED = {"availability": "availability", "safety": "safety", "kind": "transformation kind"}


@dataclass(frozen=True)
class Transformation:
    kind: str  # pattern | codemod | template | launch-search
    method: str  # how the rewrite is done, in words
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class Constraints:
    registers: str
    shared_memory: str
    warps: str
    occupancy: str
    grows_with: str


@dataclass(frozen=True)
class Provenance:
    repo: str
    path: str
    line: int
    version: str
    note: str = ""


@dataclass(frozen=True)
class Skeleton:
    code: str
    name: str
    title: str
    category: str
    lifecycle: str
    availability: str
    safety: str
    targets: tuple[str, ...]
    families: tuple[str, ...]
    conditions: tuple[Condition, ...]
    transformation: Transformation
    constraints: Constraints
    provenance: tuple[Provenance, ...]
    conflicts: tuple[str, ...]
    enables: tuple[str, ...]
    docs: dict[str, str] = field(hash=False, compare=False)
    rule: type = field(repr=False, compare=False)  # the folder's skel.skeletons.rule.Rule subclass
    before: str = field(repr=False)
    after: str = field(repr=False)
    folder: Path = field(compare=False)

    @property
    def unsafe_because(self) -> str:
        """Why the rewrite is unsafe, in the skeleton's own words (the first sentence of its docs' "Rewrite
        safety" after "Unsafe:"); "" for a safe rewrite. Not every unsafe rewrite changes rounding: SK015's
        assumes its stores cover the buffer."""
        if self.safety != "unsafe":
            return ""
        text = " ".join((self.docs or {}).get("Rewrite safety", "").split())
        text = re.sub(r"^Unsafe\s*(\([^)]*\))?\s*:\s*", "", text)
        first = re.split(r"(?<!e\.g)(?<!i\.e)\.\s+(?=[A-Z`])", text, maxsplit=1)[0].rstrip(".")
        first = first.split(" (", 1)[0].split(", so ", 1)[0].strip()  # the clause that says it, not the detail
        return first or "it changes rounding or reduction order"

    def to_json(self) -> dict:
        """Plain-data rendering (evidence is added by the catalog, not here)."""
        return {
            "code": self.code,
            "name": self.name,
            "title": self.title,
            "category": self.category,
            "lifecycle": self.lifecycle,
            "availability": self.availability,
            "safety": self.safety,
            "targets": list(self.targets),
            "families": list(self.families),
            "conditions": [
                {"id": c.id, "holds": c.holds, "fails": c.fails} for c in self.conditions
            ],
            "transformation": {
                "kind": self.transformation.kind,
                "method": self.transformation.method,
                "steps": list(self.transformation.steps),
            },
            "constraints": {k: getattr(self.constraints, k) for k in CONSTRAINT_KEYS},
            "provenance": [
                {"repo": p.repo, "path": p.path, "line": p.line, "version": p.version, "note": p.note}
                for p in self.provenance
            ],
            "conflicts": list(self.conflicts),
            "enables": list(self.enables),
            "folder": str(self.folder),
        }


@dataclass(frozen=True)
class LibraryProblem:
    """One thing wrong with a skeleton folder, located as precisely as we can."""

    path: Path
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else str(self.path)
        return f"{where}: {self.field}: {self.message}"


class LibraryError(Exception):
    def __init__(self, problems: list[LibraryProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class Library:
    root: Path
    skeletons: tuple[Skeleton, ...]
    extra_roots: tuple[Path, ...] = ()  # user folders of rules added to the shipped library

    def get(self, code: str) -> Skeleton | None:
        code = code.upper()
        return next((s for s in self.skeletons if s.code == code), None)

    def __iter__(self):
        return iter(self.skeletons)

    def __len__(self) -> int:
        return len(self.skeletons)


def default_root() -> Path:
    """The library shipped with skel (the ``skeletons/`` folder)."""
    import skel.skeletons

    return Path(skel.skeletons.__file__).resolve().parent


_CACHE: dict[tuple, Library] = {}


def load_library(root: Path | None = None, extra: tuple[Path, ...] | list[Path] = ()) -> Library:
    """Load and validate every skeleton folder under ``root`` (default: the shipped library) and the
    ``extra`` user folders; raise LibraryError listing all problems. Cached per (roots, folder mtimes)."""
    root = Path(root) if root else default_root()
    roots = (root, *(Path(e) for e in extra if Path(e).resolve() != root.resolve()))
    key = tuple((str(r.resolve()), _stamp(r)) for r in roots)
    if key in _CACHE:
        return _CACHE[key]
    skeletons, problems = check_library(*roots)
    if problems:
        raise LibraryError(problems)
    lib = _CACHE[key] = Library(root, tuple(skeletons), roots[1:])
    return lib


def _stamp(root: Path) -> tuple:
    """What a cached library depends on: every file's path and mtime under ``root`` (a few hundred)."""
    try:
        return tuple(sorted((str(p), p.stat().st_mtime_ns) for p in root.glob("*/*") if "__pycache__" not in p.parts))
    except OSError:
        return ()


def check_library(root: Path, *extra: Path) -> tuple[list[Skeleton], list[LibraryProblem]]:
    """Validate every folder of every root; return the good skeletons and every problem found.
    One broken folder is reported and skipped: the other skeletons still load."""
    problems: list[LibraryProblem] = []
    skeletons: list[Skeleton] = []
    for r in (root, *extra):
        r = Path(r)
        if not r.is_dir():
            problems.append(LibraryProblem(r, None, "library", "not a directory"))
            continue
        folders = sorted(p for p in r.iterdir() if p.is_dir() and not p.name.startswith(("_", ".")))
        if not folders:
            problems.append(LibraryProblem(r, None, "library", "no skeleton folders found"))
        for folder in folders:
            sk, probs = load_skeleton(folder)
            problems.extend(probs)
            if sk is not None:
                skeletons.append(sk)
    problems.extend(_check_cross_references(skeletons))
    skeletons.sort(key=lambda s: s.code)
    return skeletons, problems


def _check_cross_references(skeletons: list[Skeleton]) -> list[LibraryProblem]:
    problems = []
    seen: dict[str, Skeleton] = {}
    for sk in skeletons:
        toml = sk.folder / "skeleton.toml"
        if sk.code in seen:
            problems.append(
                LibraryProblem(toml, None, "code", f"{sk.code} is also used by {seen[sk.code].folder} (codes are unique across the shipped library and every --library / skeleton_dirs folder)")
            )
        seen[sk.code] = sk
    for sk in skeletons:
        toml = sk.folder / "skeleton.toml"
        for rel in ("conflicts", "enables"):
            for other in getattr(sk, rel):
                if other not in seen:
                    problems.append(LibraryProblem(toml, None, rel, f"unknown skeleton code {other!r}"))
                elif other == sk.code:
                    problems.append(LibraryProblem(toml, None, rel, "a skeleton cannot refer to itself"))
    return problems


class _Fields:
    """Typed access to a TOML table that records problems instead of raising."""

    def __init__(self, path: Path, text: str, table: dict, prefix: str, problems: list[LibraryProblem]):
        self.path, self.text, self.table, self.prefix, self.problems = path, text, table, prefix, problems

    def line_of(self, key: str) -> int | None:
        m = re.search(rf"^\s*{re.escape(key)}\s*=", self.text, re.MULTILINE)
        return self.text.count("\n", 0, m.start()) + 1 if m else None

    def fail(self, key: str, message: str) -> None:
        name = f"{self.prefix}{key}"
        self.problems.append(LibraryProblem(self.path, self.line_of(key), name, message))

    def string(self, key: str, choices: tuple[str, ...] | None = None, pattern: re.Pattern | None = None) -> str:
        value = self.table.get(key)
        if value is None:
            self.fail(key, "missing")
            return ""
        if not isinstance(value, str) or not value.strip():
            self.fail(key, f"must be a non-empty string, got {value!r}")
            return ""
        if choices and value not in choices:
            self.fail(key, f"{value!r} is not one of {', '.join(choices)}")
        if pattern and not pattern.match(value):
            self.fail(key, f"{value!r} does not match {pattern.pattern}")
        return value

    def strings(self, key: str, choices: tuple[str, ...] | None = None, required: bool = True) -> tuple[str, ...]:
        value = self.table.get(key)
        if value is None:
            if required:
                self.fail(key, "missing")
            return ()
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.fail(key, f"must be a list of non-empty strings, got {value!r}")
            return ()
        if required and not value:
            self.fail(key, "must not be empty")
        for v in value:
            if choices and v not in choices:
                self.fail(key, f"{v!r} is not one of {', '.join(choices)}")
        return tuple(value)

    def integer(self, key: str) -> int:
        value = self.table.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            self.fail(key, f"must be a positive integer, got {value!r}")
            return 0
        return value

    def table_list(self, key: str) -> list[dict]:
        value = self.table.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            self.fail(key, "must be a non-empty array of tables ([[%s]])" % key)
            return []
        return value

    def subtable(self, key: str) -> dict:
        value = self.table.get(key)
        if not isinstance(value, dict):
            self.fail(key, f"must be a table ([{key}])")
            return {}
        return value

    def unknown_keys(self, allowed: tuple[str, ...]) -> None:
        for key in self.table:
            if key not in allowed:
                self.fail(key, f"unknown field (allowed: {', '.join(allowed)})")


TOP_KEYS = (
    "code", "name", "title", "category", "lifecycle", "targets",
    "families", "conflicts", "enables", "conditions", "transformation", "constraints", "provenance", "pattern",
)


def load_skeleton(folder: Path) -> tuple[Skeleton | None, list[LibraryProblem]]:
    """Load one folder. Returns (skeleton or None, problems)."""
    problems: list[LibraryProblem] = []
    for name in FILES:
        if not (folder / name).is_file():
            problems.append(LibraryProblem(folder / name, None, name, "required file is missing"))
    if problems:
        return None, problems
    toml_path = folder / "skeleton.toml"
    text = toml_path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        return None, [LibraryProblem(toml_path, int(m.group(1)) if m else None, "toml", str(exc))]

    f = _Fields(toml_path, text, data, "", problems)
    for key, what in DERIVED.items():
        if key in data or key in (data.get("transformation") or {}):
            f.fail(key, f"the {what} is read off the rule (rule.py or [[pattern]]); remove it from skeleton.toml")
    f.unknown_keys(TOP_KEYS + tuple(DERIVED))
    code = f.string("code", pattern=CODE_RE)
    if code and not folder.name.startswith(code):
        f.fail("code", f"folder name {folder.name!r} must start with the code {code!r}")
    name = f.string("name", pattern=NAME_RE)
    title = f.string("title")
    category = f.string("category", CATEGORIES)
    lifecycle = f.string("lifecycle", LIFECYCLES)
    targets = f.strings("targets", TARGETS)
    families = f.strings("families", required=False)
    for fam in families:
        if not FAMILY_RE.match(fam):
            f.fail("families", f"{fam!r}: spell families as kernels/ targets are spelt, lower case with underscores "
                               f"(e.g. kda_decode, gdn_decode, attention_decode)")
    conflicts = f.strings("conflicts", required=False)
    enables = f.strings("enables", required=False)

    conditions = []
    patterns = data.get("pattern")
    rows = f.table_list("conditions") if "conditions" in data or patterns is None else []
    for i, row in enumerate(rows):
        cf = _Fields(toml_path, text, row, f"conditions[{i}].", problems)
        cf.unknown_keys(("id", "holds", "fails"))
        conditions.append(Condition(cf.string("id", pattern=CONDITION_ID_RE), cf.string("holds"), cf.string("fails")))
    ids = [c.id for c in conditions]
    for dup in {i for i in ids if ids.count(i) > 1}:
        f.fail("conditions", f"condition id {dup!r} is used twice")

    tf = _Fields(toml_path, text, f.subtable("transformation"), "transformation.", problems)
    tf.unknown_keys(("kind", "method", "steps"))
    method, steps = tf.string("method"), tf.strings("steps", required=False)

    kf = _Fields(toml_path, text, f.subtable("constraints"), "constraints.", problems)
    kf.unknown_keys(CONSTRAINT_KEYS)
    constraints = Constraints(*(kf.string(k) for k in CONSTRAINT_KEYS))

    provenance = []
    for i, row in enumerate(f.table_list("provenance")):
        pf = _Fields(toml_path, text, row, f"provenance[{i}].", problems)
        pf.unknown_keys(("repo", "path", "line", "version", "note"))
        note = row.get("note", "")
        provenance.append(Provenance(pf.string("repo"), pf.string("path"), pf.integer("line"), pf.string("version"), note if isinstance(note, str) else ""))

    docs = _load_docs(folder / "docs.md", problems)
    before = _load_example(folder / "examples" / "before.py", targets, problems)
    after = _load_example(folder / "examples" / "after.py", targets, problems)
    if before and after and before == after:
        problems.append(LibraryProblem(folder / "examples" / "after.py", None, "after.py", "identical to before.py"))
    if problems:
        return None, problems
    from skel.skeletons.loader import load_rule

    rule, conditions = load_rule(folder, code, text, patterns, tuple(conditions), problems)
    if rule is None or problems:
        return None, problems
    transformation = Transformation(rule.KIND, method, steps)
    return (
        Skeleton(
            code=code, name=name, title=title, category=category, lifecycle=lifecycle,
            availability=rule.availability(), safety=rule.SAFETY, targets=targets, families=families,
            conditions=tuple(conditions), transformation=transformation, constraints=constraints,
            provenance=tuple(provenance), conflicts=conflicts, enables=enables, docs=docs,
            rule=rule, before=before, after=after, folder=folder,
        ),
        problems,
    )


def _load_docs(path: Path, problems: list[LibraryProblem]) -> dict[str, str]:
    text = path.read_text(encoding="utf-8")
    sections: dict[str, str] = {}
    heading_lines: dict[str, int] = {}
    current = None
    lines: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^##\s+(.+?)\s*$", line)
        if m:
            if current:
                sections[current] = "\n".join(lines).strip()
            current, lines = m.group(1), []
            if current in heading_lines:
                problems.append(LibraryProblem(path, lineno, "docs", f"heading {current!r} appears twice"))
            heading_lines[current] = lineno
        elif current:
            lines.append(line)
    if current:
        sections[current] = "\n".join(lines).strip()
    for heading in DOC_HEADINGS:
        if heading not in sections:
            problems.append(LibraryProblem(path, None, "docs", f"missing heading '## {heading}'"))
        elif not sections[heading]:
            problems.append(LibraryProblem(path, heading_lines[heading], "docs", f"section '## {heading}' is empty"))
    for heading, lineno in heading_lines.items():
        if heading not in DOC_HEADINGS:
            problems.append(
                LibraryProblem(path, lineno, "docs", f"unknown heading '## {heading}' (allowed: {', '.join(DOC_HEADINGS)})")
            )
    order = [h for h in heading_lines if h in DOC_HEADINGS]
    if order != [h for h in DOC_HEADINGS if h in order]:
        problems.append(LibraryProblem(path, None, "docs", f"headings must appear in the order: {', '.join(DOC_HEADINGS)}"))
    return {h: sections.get(h, "") for h in DOC_HEADINGS}


def _load_example(path: Path, targets: tuple[str, ...], problems: list[LibraryProblem]) -> str:
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        problems.append(LibraryProblem(path, None, path.name, "example kernel is empty"))
        return ""
    try:
        ast.parse(text, filename=str(path))
    except SyntaxError as exc:
        problems.append(LibraryProblem(path, exc.lineno, path.name, f"does not parse as Python: {exc.msg}"))
    return text
