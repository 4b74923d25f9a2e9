"""skel on Ray (CPU): one local cluster of two CPUs for the whole module; the serial runs are the reference.

Mining over fla-core 0.6.0 (fetched from the package registry) as Ray tasks gives the serial run's findings and
catalog; a task whose worker process is killed mid-run is retried and nothing is lost or recorded twice; history
chunks are recorded in commit order; two catalogs merged equal one catalog that mined both inputs; `skel apply
--executor ray` on the CPU gives the local verdicts, also when a judging worker is killed mid-judgement.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

import skel.kernels  # noqa: E402
from skel.catalog.store import ValidationRun, open_catalog  # noqa: E402
from skel.cli import main  # noqa: E402
from skel.executor import RayExecutor  # noqa: E402
from skel.miner.mine import mine  # noqa: E402

KDA = Path(skel.kernels.__file__).resolve().parent / "kda_decode" / "kernel.py"


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster (two CPUs) for every test here; the CLI joins it (ray is already initialised)."""
    import warnings

    started = not ray.is_initialized()
    if started:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # Ray's note on accelerator variables for CPU tasks
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield RayExecutor()
    if started:
        ray.shutdown()


def _records(catalog: Path) -> list[dict]:
    """The catalog's records (export lines) without the time each file was mined."""
    with open_catalog(catalog) as cat:
        out = [json.loads(line) for line in cat.export_lines(header=False)]
    for r in out:
        r.pop("mined_at", None)
    return out


class Killer:
    """Kills (SIGKILL) the first Ray worker process seen running ``task``, once; only descendants of this
    test process (the workers of the cluster it started) are considered."""

    def __init__(self, task: str, after_s: float = 0.0):
        self.title = f"ray::{task}".encode()
        self.after_s = after_s
        self.killed: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)

    def _run(self) -> None:
        seen: dict[int, float] = {}
        while not self.stop.is_set() and not self.killed:
            for pid in _descendants(os.getpid()):
                try:
                    title = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if title.startswith(self.title):
                    first = seen.setdefault(pid, time.monotonic())
                    if time.monotonic() - first >= self.after_s:
                        os.kill(pid, signal.SIGKILL)
                        self.killed.append(pid)
                        return
            time.sleep(0.005)


def _descendants(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, frontier = [], [root]
    while frontier:
        pid = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == pid]
        out += kids
        frontier += kids
    return out


# ------------------------------------------------------------------------------------------------ mining
@pytest.fixture(scope="module")
def serial(fla_corpus, tmp_path_factory):
    """fla-core mined one file at a time, no pool: the reference."""
    db = tmp_path_factory.mktemp("serial") / "catalog.sqlite"
    report = mine([str(fla_corpus)], catalog=db, jobs=1)
    return report, db


def test_mine_on_ray_gives_the_serial_findings(cluster, serial, fla_corpus, tmp_path, capsys):
    report, serial_db = serial
    db = tmp_path / "catalog.sqlite"
    code = main(["mine", str(fla_corpus), "--executor", "ray", "--catalog", str(db), "--json", "--no-progress"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out == report.to_json() and out["instances"] and out["opportunities"]
    assert _records(db) == _records(serial_db)


def test_a_killed_mining_task_is_retried_and_nothing_is_lost(cluster, serial, fla_corpus, tmp_path):
    _, serial_db = serial
    part = fla_corpus / "fla" / "ops" / "gated_delta_rule"
    db = tmp_path / "catalog.sqlite"
    tallies = []
    with Killer("analyze_task", after_s=0.02) as killer:
        again = mine([str(part)], catalog=db, executor=cluster, on_tally=tallies.append)
    assert killer.killed, "no mining task was caught running"
    assert again.errors == () and again.instances
    # every file once, none twice, each as the serial run recorded it (its repo is the PATH it was found under)
    expected = [{**r, "repo": str(part)} for r in _records(serial_db) if r["path"].startswith(str(part) + os.sep)]
    assert _records(db) == expected and len(expected) == again.kernel_files
    last = tallies[-1]
    assert (last.done, last.running, last.failed) == (last.total, 0, 0) and last.total == again.kernel_files


def test_history_on_ray_is_recorded_in_commit_order(cluster, tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git is needed to build the repository")
    sys.path.insert(0, str(Path(__file__).parent))
    import history_repo as hr

    import skel.miner.history as history

    repo = tmp_path / "repo"
    repo.mkdir()
    hr.build(repo)
    local = history.mine_history(repo, catalog=tmp_path / "local.sqlite")
    monkeypatch.setattr(history, "CHUNK_COMMITS", 2)  # several chunks, finishing in any order
    remote = history.mine_history(repo, catalog=tmp_path / "ray.sqlite", executor=cluster)
    assert remote.commits == local.commits and remote.kernel_edits == local.kernel_edits
    assert [c.to_json() for c in remote.candidates] == [c.to_json() for c in local.candidates]
    assert remote.errors == local.errors and remote.blobs >= local.blobs
    with open_catalog(tmp_path / "local.sqlite") as a, open_catalog(tmp_path / "ray.sqlite") as b:
        assert [e.commit for e in a.history_edits()] == [e.commit for e in b.history_edits()]
        assert a.history_repos()[0]["commits"] == b.history_repos()[0]["commits"]


def test_missing_ray_is_a_usage_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code = main(["mine", str(KDA), "--executor", "ray", "--catalog", str(tmp_path / "c.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'skel[ray]'" in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------------ merging
def _run(label: str, created: str) -> ValidationRun:
    return ValidationRun(skeletons=("SK001",), kernel="kda_decode:kernel.py", shape="N2-T1", dtype="float32",
                         metric="numerics", verdict="numerics-pass", created_at=created, extra=(("label", label),))


def test_merged_catalogs_equal_one_catalog_that_mined_both(fla_corpus, tmp_path, capsys):
    ops = fla_corpus / "fla" / "ops"
    a, b = [str(ops / "kda"), str(ops / "gla")], [str(ops / "gated_delta_rule"), str(ops / "kda")]  # kda in both
    mine(a, catalog=tmp_path / "a.sqlite")
    mine(b, catalog=tmp_path / "b.sqlite")
    mine(a + b[:1], catalog=tmp_path / "both.sqlite")
    shared, only_a, only_b = _run("x", "2026-01-01T00:00:00+00:00"), _run("a", "2026-01-02T00:00:00+00:00"), \
        _run("b", "2026-01-03T00:00:00+00:00")
    for name, runs in (("a", (shared, only_a)), ("b", (shared, only_b)), ("both", (shared, only_a, only_b))):
        with open_catalog(tmp_path / f"{name}.sqlite") as cat:
            for r in runs:
                cat.record_validation(r)
    assert main(["catalog", "export", "--catalog", str(tmp_path / "a.sqlite"), "-o", str(tmp_path / "a.jsonl")]) == 0
    assert main(["catalog", "merge", str(tmp_path / "a.jsonl"), str(tmp_path / "b.sqlite"),
                 "--catalog", str(tmp_path / "ab.sqlite")]) == 0
    assert main(["catalog", "import", str(tmp_path / "b.sqlite"), "--catalog", str(tmp_path / "ba.sqlite")]) == 0
    assert main(["catalog", "import", str(tmp_path / "a.sqlite"), "--catalog", str(tmp_path / "ba.sqlite")]) == 0
    capsys.readouterr()
    both = _records(tmp_path / "both.sqlite")
    assert _records(tmp_path / "ab.sqlite") == both == _records(tmp_path / "ba.sqlite")  # either order
    assert sum(r["type"] == "run" for r in both) == 3  # the shared verdict once
    # importing again changes nothing; provenance: the export names both origins
    assert main(["catalog", "import", str(tmp_path / "a.jsonl"), "--catalog", str(tmp_path / "ab.sqlite")]) == 0
    assert "already imported" in capsys.readouterr().out
    with open_catalog(tmp_path / "ab.sqlite") as cat:
        header = json.loads(next(cat.export_lines()))
        assert cat.content_digest() == open_catalog(tmp_path / "ba.sqlite").content_digest()
    origins = [o["catalog"] for o in header["origins"]]
    assert origins[0] == str((tmp_path / "ab.sqlite").resolve())
    assert str(tmp_path / "a.jsonl") in origins and str(tmp_path / "b.sqlite") in origins
    assert any(o.get("origins") and o["origins"][0]["catalog"] == str((tmp_path / "a.sqlite").resolve())
               for o in header["origins"][1:])


def test_import_refuses_what_is_not_an_export(tmp_path, capsys):
    bad = tmp_path / "notes.jsonl"
    bad.write_text('{"hello": 1}\n')
    assert main(["catalog", "import", str(bad), "--catalog", str(tmp_path / "c.sqlite")]) == 2
    assert "not a skel catalog export" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ apply
def test_apply_on_ray_gives_the_local_verdicts_even_when_a_worker_dies(cluster, tmp_path, capsys):
    target = tmp_path / "kda.py"
    shutil.copy(KDA, target)
    args = ["apply", str(target), "--unsafe", "--skeleton", "SK001", "--device", "cpu", "--no-record", "--json"]
    assert main([*args, "--report-dir", str(tmp_path / "local")]) == 1
    local = json.loads(capsys.readouterr().out)
    with Killer("gate_task", after_s=1.0) as killer:  # mid-judgement: the gate's workers are running
        code = main([*args, "--report-dir", str(tmp_path / "ray"), "--executor", "ray"])
    remote = json.loads(capsys.readouterr().out)
    assert killer.killed, "no judging task was caught running"
    assert code == 1 and len(local["candidates"]) == 1

    def verdicts(data):
        return [(c["label"], c["numerics_passed"], c["reason"]) for c in data["candidates"]]

    assert verdicts(remote) == verdicts(local)
    assert all(c["numerics_passed"] for c in local["candidates"])


def test_task_progress_says_done_running_queued_failed():
    import io

    from skel.commands.progress import TallyProgress
    from skel.executor import Tally

    out = io.StringIO()
    clock = iter([0.0, 1.0, 20.0, 21.0])
    show = TallyProgress(out, "skel mine --executor ray", "files", every_s=10.0, clock=lambda: next(clock))
    show(Tally(10, 0, 4, 0))
    show(Tally(10, 2, 4, 0))  # within 10 s: not written
    show(Tally(10, 7, 2, 1))
    show(Tally(10, 9, 0, 1))  # finished: always written
    assert out.getvalue().splitlines() == [
        "skel mine --executor ray: 0/10 files done, 4 running, 6 queued, 0 failed",
        "skel mine --executor ray: 7/10 files done, 2 running, 0 queued, 1 failed",
        "skel mine --executor ray: 9/10 files done, 0 running, 0 queued, 1 failed",
    ]


def test_the_roofline_is_measured_once_per_gpu_model_and_judgements_hold_one_gpu(tmp_path):
    """RemoteGate's GPU path without a GPU: a stand-in executor records what each task asked for."""
    from skel.executor import Resources
    from skel.pipeline import remote_gate as rg

    class Cluster:
        calls: list = []

        def resources(self):
            return {"CPU": 32.0, "GPU": 3.0, "accelerator_type:H200": 2.0, "accelerator_type:H100": 1.0}

        def call(self, fn, item, res=Resources()):
            self.calls.append((fn.__name__, res))
            return f"rates of {dict(res.custom)}" if fn is rg.roofline_task else "verdict"

        def map(self, fn, items, res=Resources(), on_tally=None):
            for i, item in enumerate(items):
                self.calls.append((fn.__name__, res))
                yield i, rg.GateRefused("no such shape") if i == 1 else "verdict"

    gate = rg.RemoteGate(Cluster())
    assert gate.default_device() == "cuda"
    gate.check("cuda")
    jobs = [gate.job(tmp_path / "k.py", tmp_path / f"c{i}.py", None, "launch", "decode", "cuda", 60.0) for i in (1, 2)]
    untimed = gate.job(tmp_path / "k.py", tmp_path / "d.py", None, "launch", "decode", "cuda", 60.0, timed=False)
    assert jobs[0].machines == jobs[1].machines == (
        ("H100", "rates of {'accelerator_type:H100': 0.001}"), ("H200", "rates of {'accelerator_type:H200': 0.001}"))
    assert untimed.machines == () and not untimed.timed
    roofline = [res for name, res in Cluster.calls if name == "roofline_task"]
    assert len(roofline) == 2 and all(r.gpus == 1 and r.own_process for r in roofline)  # once per model
    results = dict(gate.validate_many(jobs))
    assert results[0] == "verdict" and isinstance(results[1], rg.GateInputError) and "no such shape" in str(results[1])
    assert all(res == Resources(cpus=1, gpus=1) for name, res in Cluster.calls if name == "gate_task")

    class NoGPU(Cluster):
        def resources(self):
            return {"CPU": 2.0}

    from skel.errors import UsageError

    with pytest.raises(UsageError, match="has no GPU"):
        rg.RemoteGate(NoGPU()).check("cuda")
    assert rg.RemoteGate(NoGPU()).default_device() == "cpu"
