"""Containment for the gate's workers: what a process that runs kernel code may touch.

Applied by the worker to itself after it is forked and before it loads any target, spec or
candidate code (``contain``), strongest first where the OS offers it, without root:

- Landlock (Linux >= 5.13): writes only under the worker's scratch folder, /dev (GPU device
  files, shared memory) and its own /proc entry (the CUDA driver writes there); with ABI >= 4 no TCP bind or connect; with ABI >= 6 no signals to, and no
  abstract sockets of, processes outside the sandbox. A Landlocked process also cannot ptrace or read
  the memory of processes outside its domain.
- no_new_privs; every capability dropped when running as root (uid 0 keeps owner rights on its own
  files, which Landlock then restricts); not dumpable (no other same-uid process reads its memory);
  dies with its supervisor (PDEATHSIG); its own session, so its process group can be frozen or killed.
- a scratch HOME, TMPDIR, cwd and caches; no bytecode written beside source files; only the channel
  and its standard streams open.

``Isolation`` records what was in force; the report shows it. The three Landlock system calls are
made through ctypes: they take two small structs, and the Python bindings on the package registry
are pre-release and could not travel to the GPU machine (it has no registry).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
from dataclasses import dataclass, field

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38

_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446  # the same on every Linux arch
_RULE_PATH_BENEATH, _RULE_NET_PORT = 1, 2

# filesystem rights (landlock.h)
_FS_EXECUTE, _FS_WRITE_FILE, _FS_READ_FILE, _FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_FS_REMOVE_DIR, _FS_REMOVE_FILE, _FS_MAKE_CHAR, _FS_MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
_FS_MAKE_REG, _FS_MAKE_SOCK, _FS_MAKE_FIFO, _FS_MAKE_BLOCK, _FS_MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6


@dataclass(frozen=True)
class Isolation:
    """What contained a worker; rendered in reports."""

    landlock_abi: int | None  # None: not available (why in ``notes``)
    writes_confined: bool  # filesystem writes only under the scratch folder and /dev
    network_denied: bool  # TCP bind/connect refused
    signals_scoped: bool  # no signals to processes outside the sandbox
    capabilities_dropped: bool
    no_new_privs: bool
    scratch: str
    notes: tuple[str, ...] = field(default=())

    def summary(self) -> str:
        if self.landlock_abi:
            parts = [f"Landlock ABI {self.landlock_abi}: writes only in the scratch folder, /dev and its own /proc entry"]
            if self.network_denied:
                parts.append("no TCP")
            if self.signals_scoped:
                parts.append("no signals out")
        else:
            parts = ["no Landlock (writes are not confined; files are hashed before and after instead)"]
        if self.capabilities_dropped:
            parts.append("capabilities dropped")
        if self.no_new_privs:
            parts.append("no_new_privs")
        parts.append("non-dumpable, own session, scratch HOME/TMPDIR/cwd")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {
            "landlock_abi": self.landlock_abi, "writes_confined": self.writes_confined,
            "network_denied": self.network_denied, "signals_scoped": self.signals_scoped,
            "capabilities_dropped": self.capabilities_dropped, "no_new_privs": self.no_new_privs,
            "scratch": self.scratch, "notes": list(self.notes), "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, value: dict) -> "Isolation":
        keys = ("landlock_abi", "writes_confined", "network_denied", "signals_scoped", "capabilities_dropped",
                "no_new_privs", "scratch")
        return cls(**{k: value.get(k) for k in keys}, notes=tuple(str(n) for n in value.get("notes", ())))


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def prctl(option: int, arg: int = 0) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    return _libc().prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0),
                         ctypes.c_ulong(0)) == 0


def die_with_parent(sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent exits; exit now if it already has.
    (The parent id is read before and after: a parent that died in between is caught by the check.)"""
    parent = os.getppid()
    prctl(PR_SET_PDEATHSIG, int(sig))
    if os.getppid() != parent:
        os._exit(1)


def landlock_abi() -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    abi = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(abi) if abi > 0 else None


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _write_rights(abi: int) -> int:
    rights = (_FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_CHAR | _FS_MAKE_DIR | _FS_MAKE_REG
              | _FS_MAKE_SOCK | _FS_MAKE_FIFO | _FS_MAKE_BLOCK | _FS_MAKE_SYM)
    if abi >= 2:
        rights |= _FS_REFER
    if abi >= 3:
        rights |= _FS_TRUNCATE
    return rights


def _landlock(writable: list[str], abi: int) -> tuple[bool, bool, list[str]]:
    """Confine writes to ``writable`` (and TCP, signals by ABI); returns (network denied, signals scoped, notes)."""
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    rights = _write_rights(abi)
    attr = _RulesetAttr(rights, _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= 4 else 0,
                        _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr), ctypes.c_size_t(size),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), f"landlock_create_ruleset: {os.strerror(ctypes.get_errno())}")
    notes = []
    try:
        for path in writable:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError as exc:
                notes.append(f"not writable: {path} ({exc.strerror})")
                continue
            try:
                rule = _PathBeneath(rights, fd)
                if libc.syscall(ctypes.c_long(_SYS_ADD_RULE), ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                    notes.append(f"not writable: {path} (landlock_add_rule: {os.strerror(ctypes.get_errno())})")
            finally:
                os.close(fd)
        if libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), f"landlock_restrict_self: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(ruleset)
    return abi >= 4, abi >= 6, notes


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities() -> bool:
    """Empty the bounding, effective, permitted and inheritable sets (a no-op for a non-root user)."""
    if not sys.platform.startswith("linux"):
        return False
    for cap in range(64):
        if not prctl(PR_CAPBSET_DROP, cap) and ctypes.get_errno() == 22:  # EINVAL: past the last capability
            break
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (_CapData * 2)()
    return _libc().capset(ctypes.byref(header), data) == 0


def scratch_env(scratch: str, keep_triton_cache: str | None) -> dict[str, str]:
    """Environment overrides that point every per-user cache and temp folder into ``scratch``."""
    env = {
        "HOME": os.path.join(scratch, "home"),
        "TMPDIR": os.path.join(scratch, "tmp"), "TEMP": os.path.join(scratch, "tmp"),
        "TMP": os.path.join(scratch, "tmp"),
        "XDG_CACHE_HOME": os.path.join(scratch, "cache"),
        "TRITON_HOME": os.path.join(scratch, "triton-home"),
        "TRITON_CACHE_DIR": keep_triton_cache or os.path.join(scratch, "triton-cache"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "cache", "torchinductor"),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    for key in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "TRITON_HOME", "TRITON_CACHE_DIR"):
        os.makedirs(env[key], exist_ok=True)
    return env


def contain(scratch: str, writable_extra: tuple[str, ...], keep_fds: tuple[int, ...], *,
            landlock: bool = True, triton_cache: str | None = None) -> Isolation:
    """Contain the calling process (see the module docstring); returns what is in force."""
    import tempfile

    notes: list[str] = []
    os.setsid()
    die_with_parent(signal.SIGKILL)
    prctl(PR_SET_DUMPABLE, 0)
    os.environ.update(scratch_env(scratch, triton_cache))
    for key in ("PWD", "OLDPWD"):  # where the judge was started says nothing the worker needs
        os.environ.pop(key, None)
    tempfile.tempdir = os.environ["TMPDIR"]  # not merely unset: a module loaded before may have cached /tmp
    os.chdir(os.path.join(scratch, "work") if os.path.isdir(os.path.join(scratch, "work")) else scratch)
    sys.dont_write_bytecode = True
    _close_other_fds(keep_fds)
    nnp = prctl(PR_SET_NO_NEW_PRIVS, 1)
    caps = os.geteuid() == 0 and drop_capabilities()
    abi = landlock_abi() if landlock else None
    net = sig = confined = False
    if abi:
        # SKEL_SANDBOX_WRITABLE (colon-separated) adds folders for a driver that needs to write elsewhere
        extra = [p for p in os.environ.get("SKEL_SANDBOX_WRITABLE", "").split(":") if p]
        writable = [scratch, "/dev", "/proc/self", *writable_extra, *extra]  # the CUDA driver writes under /proc/self
        try:
            net, sig, more = _landlock(writable, abi)
            notes += more
            confined = True
        except OSError as exc:
            notes.append(f"Landlock not applied: {exc}")
            abi = None
    elif landlock:
        notes.append("Landlock is not available on this kernel")
    else:
        notes.append("Landlock switched off for this run")
    return Isolation(abi, confined, net, sig, caps, nnp, scratch, tuple(notes))


def _close_other_fds(keep: tuple[int, ...]) -> None:
    keep_set = set(keep) | {0, 1, 2}
    try:
        fds = [int(n) for n in os.listdir("/proc/self/fd")]
    except OSError:
        fds = list(range(3, 1024))
    for fd in fds:
        if fd not in keep_set:
            try:
                os.close(fd)
            except OSError:
                pass


# -- the supervisor's side -------------------------------------------------------------------------------
def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process instead of init, so it can find them."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)


def children(pid: int) -> list[int]:
    """Processes whose parent is ``pid`` (the kernel's children list, else a scan of /proc)."""
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        return out
    except OSError:
        pass
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid:
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return out


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            text = f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return "?"
    return text if len(text) <= 120 else text[:117] + "..."


def kill_descendants(rounds: int = 50) -> list[str]:
    """Kill every process re-parented to this subreaper (and theirs, as they are re-parented in turn);
    returns "pid: command line" of each one killed."""
    import time

    me = os.getpid()
    killed: list[str] = []
    seen: set[int] = set()
    for _ in range(rounds):
        kids = [p for p in children(me)]
        if not kids:
            break
        for pid in kids:
            if pid not in seen:
                seen.add(pid)
                killed.append(f"{pid}: {command_line(pid)}")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)
        _reap()
    _reap()
    return killed


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
