"""Which step of the gate's containment stops CUDA from initialising (cudaErrorOperatingSystem on the
H200 machine)? Each step alone, then all, each in a fresh interpreter: apply, then torch.zeros on cuda."""
import subprocess
import sys

LL = "sandbox.prctl(sandbox.PR_SET_NO_NEW_PRIVS, 1); sandbox._landlock([tempfile.mkdtemp(), '/dev'{}], sandbox.landlock_abi())"
STEPS = {
    "landlock /dev": LL.format(""),
    "+/proc/self": LL.format(", '/proc/self'"),
    "+/proc/thread-self": LL.format(", '/proc/thread-self', '/proc/self'"),
    "+/proc": LL.format(", '/proc'"),
    "+/sys": LL.format(", '/sys'"),
    "+/tmp": LL.format(", '/tmp'"),
    "+/run": LL.format(", '/run'"),
    "+/var": LL.format(", '/var'"),
    "+HOME": LL.format(", os.path.expanduser('~')"),
}
for name, step in STEPS.items():
    code = ("import os, tempfile, torch; from skel.validate import sandbox; " + (step + "; " if step else "")
            + "x = torch.zeros(4, device='cuda'); print('ok', float(x.sum()))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    last = (proc.stdout + proc.stderr).strip().splitlines()
    print(f"{name:20s} rc={proc.returncode} {last[-1][:160] if last else ''}", flush=True)
    if proc.returncode == 0 and name.startswith("+") and "WRITABLE" not in globals():
        WRITABLE = name[1:] if name != "+HOME" else "~"
        print(f"first single addition that lets CUDA start: {WRITABLE}", flush=True)
        with open("/tmp/writable.txt", "w") as f:
            f.write(WRITABLE.split()[0] if WRITABLE != "/proc/thread-self" else "/proc/thread-self:/proc/self")
