"""The judge's handles on its workers: the fork server, one ``Worker`` per role, requests, tensors.

Everything here runs in the judging process and executes no kernel code. A request to a worker
waits at most its time limit; a worker that does not answer in time is killed with its process
group, and one that dies is reported with what its supervisor saw (exit status or signal, and
the processes it left behind, which the supervisor killed).
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skel.validate import channel
from skel.validate.channel import Block, TensorMeta


class WorkerLost(Exception):
    """The worker did not answer: it timed out (``timed_out``) or its process ended."""

    def __init__(self, text: str, timed_out: bool, role: str, doing: str):
        super().__init__(text)
        self.timed_out, self.role, self.doing = timed_out, role, doing


@dataclass(frozen=True)
class Ending:
    """How a worker ended, as its supervisor saw it."""

    exit_code: int | None  # negative: killed by that signal; None: the supervisor never said
    survivors: tuple[str, ...]  # "pid: command line" of processes it left running (killed)
    last_words: str = ""  # its last line of output (a device assert, 'Fatal Python error: ...')

    def how(self) -> str:
        code = self.exit_code
        if code is None:
            return "ended without its supervisor's report"
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"crashed the worker process ({name})"
        return f"ended the worker process (exit status {code}) without a verdict"


class Zygote:
    """The fork server (``skel.validate.zygote``), one per judging process, started on first use."""

    _instance: "Zygote | None" = None
    _lock = threading.Lock()

    def __init__(self):
        self.sock, theirs = channel.pair()
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "skel.validate.zygote", str(theirs.fileno())], pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        theirs.close()
        self.sock.settimeout(300)
        try:
            ready, _ = channel.receive(self.sock)
        except (channel.ChannelClosed, OSError) as exc:
            raise RuntimeError(f"the gate's fork server did not start ({exc}); try `{sys.executable} -m"
                               f" skel.validate.zygote` to see why") from None
        self.pid = int(ready["pid"])
        self.owner = os.getpid()

    @classmethod
    def get(cls) -> "Zygote":
        with cls._lock:
            z = cls._instance
            if z is None or z.owner != os.getpid() or z.proc.poll() is not None:
                cls._instance = z = cls()
            return z

    def fork(self, config: dict, chan: socket.socket, status: socket.socket) -> int:
        with self._lock:
            channel.send(self.sock, {"op": "fork", "config": config}, [chan.fileno(), status.fileno()])
            reply, _ = channel.receive(self.sock)
        if "pid" not in reply:
            raise RuntimeError(f"the gate's fork server refused: {reply}")
        return int(reply["pid"])


@dataclass
class _Blocks:
    """The two shared blocks of one worker: ``up`` (judge -> worker) and ``down`` (worker -> judge)."""

    up: Block | None = None
    down: Block | None = None
    next_id: int = 0
    ids: dict = field(default_factory=dict)


class Worker:
    """One worker process (oracle or candidate) and the judge's side of its channel."""

    def __init__(self, config: dict, device: str, start_timeout: float = 300.0):
        self.config, self.device = config, device
        self.role = config["role"]
        self.blocks = _Blocks()
        self.ending: Ending | None = None
        self.chan, chan_theirs = channel.pair()
        self.status, status_theirs = channel.pair()
        try:
            Zygote.get().fork(config, chan_theirs, status_theirs)
        finally:
            chan_theirs.close()
            status_theirs.close()
        self.status.settimeout(start_timeout)
        first, _ = channel.receive(self.status)
        self.pid = int(first["worker"])
        hello = self._receive(start_timeout, "starting the worker")
        if "internal" in hello:
            raise RuntimeError(f"internal error in the gate's {self.role} worker: {hello['internal']}")
        self.isolation = hello.get("isolation", {})

    # -- requests --------------------------------------------------------------------------------------
    def request(self, message: dict, timeout: float, doing: str, fds: list[int] | tuple = ()) -> dict:
        try:
            channel.send(self.chan, message, fds)
        except OSError:
            raise WorkerLost(f"its process ended before {doing}", False, self.role, doing) from None
        return self._receive(timeout, doing)

    def _receive(self, timeout: float, doing: str) -> dict:
        self.chan.settimeout(max(timeout, 0.001))
        try:
            reply, _ = channel.receive(self.chan)
        except (socket.timeout, TimeoutError):
            self.kill()
            raise WorkerLost(f"no answer for {timeout:g} s while {doing}", True, self.role, doing) from None
        except (channel.ChannelClosed, OSError):
            raise WorkerLost(f"its process ended while {doing}", False, self.role, doing) from None
        except channel.ProtocolError as exc:
            self.kill()
            raise WorkerLost(f"it sent a malformed message while {doing} ({exc})", False, self.role, doing) from None
        return reply

    def fetch(self, reply: dict, timeout: float, doing: str, device: str | None = None) -> dict[str, Any]:
        """The tensors ``reply`` announced, as private copies in the judge (on ``device``)."""
        metas = [TensorMeta.from_json(m) for m in reply.get("tensors", ())]
        if not metas:
            return {}
        offsets, size = channel.layout(metas)
        new, fds = self._ensure("down", size)
        self.request({"op": "write", "block": self.blocks.ids["down"], "offsets": offsets, "new_blocks": new},
                     timeout, doing, fds)
        return channel.read_tensors(self.blocks.down, metas, offsets, device or self.device)

    def upload(self, tensors: dict[str, Any]) -> tuple[dict, list[dict], list[int]]:
        """Write ``tensors`` into the worker's inbound block; returns (descriptor for the request, the new
        block's announcement, its descriptor to attach)."""
        metas = [channel.meta_of(name, t) for name, t in tensors.items()]
        offsets, size = channel.layout(metas)
        new, fds = self._ensure("up", size)
        channel.write_tensors(self.blocks.up, metas, offsets, list(tensors.values()))
        return ({"block": self.blocks.ids["up"], "metas": [m.to_json() for m in metas], "offsets": offsets},
                new, fds)

    def _ensure(self, which: str, size: int) -> tuple[list[dict], list[int]]:
        block: Block | None = getattr(self.blocks, which)
        if block is not None and block.size >= size:
            return [], []
        if block is not None:
            block.close()
        grown = max(1 << 20, 1 << (size - 1).bit_length())
        block = Block(grown)
        setattr(self.blocks, which, block)
        self.blocks.next_id += 1
        self.blocks.ids[which] = self.blocks.next_id
        return [{"id": self.blocks.next_id, "size": grown}], [block.fd]

    # -- process control --------------------------------------------------------------------------------
    def freeze(self) -> None:
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, sig: int) -> None:
        for send in (os.killpg, os.kill):
            try:
                send(self.pid, sig)
            except OSError:
                pass

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def finish(self, timeout: float = 10.0) -> Ending:
        """Say goodbye (or kill it), and read the supervisor's report."""
        if self.ending is not None:
            return self.ending
        try:
            self.request({"op": "bye"}, min(timeout, 5.0), "ending")
        except WorkerLost:
            self.kill()
        self.thaw()
        self.status.settimeout(timeout + float(self.config.get("grace_s", 1.0)))
        try:
            report, _ = channel.receive(self.status)
            code = report.get("exit")
            survivors = tuple(str(s)[:200] for s in report.get("survivors", ())[:20])
            self.ending = Ending(int(code) if isinstance(code, int) else None, survivors, self._last_words())
        except (channel.ChannelClosed, channel.ProtocolError, OSError):
            self.ending = Ending(None, (), self._last_words())
        self.close()
        return self.ending

    def _last_words(self) -> str:
        try:
            with open(self.config["log"], "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 4096))
                lines = [ln.strip() for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        if not lines:
            return ""
        return lines[-1] if len(lines[-1]) <= 160 else lines[-1][:157] + "..."

    def close(self) -> None:
        for block in (self.blocks.up, self.blocks.down):
            if block is not None:
                block.close()
        self.blocks.up = self.blocks.down = None
        for sock in (self.chan, self.status):
            try:
                sock.close()
            except OSError:
                pass


def scratch_config(root: Path, role: str, device: str, **extra: Any) -> dict:
    """A worker's configuration with its scratch folder (work/, the log) made under ``root``, and the
    judge's import path and environment as they are now (the fork server's are from its start)."""
    scratch = root / role
    (scratch / "work").mkdir(parents=True, exist_ok=True)
    cwd = os.getcwd()
    return {"role": role, "device": device, "scratch": str(scratch), "log": str(scratch / "output.log"),
            "sys_path": [os.path.join(cwd, p) if not os.path.isabs(p) else p for p in sys.path],
            "env": {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, **extra}


def wall_us(start: float) -> float:
    return (time.perf_counter() - start) * 1e6
