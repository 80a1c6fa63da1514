"""Guest side of the v2 suite: prepare the pure v2 kernel, run ``pytest -m cgroupv2``, leave the results.

Run by :mod:`tests.vm.host` as ``python -m tests.vm.guest RESULTS_DIR [pytest args]`` inside the guest.
It enables every controller the kernel offers in the root's ``cgroup.subtree_control`` (a pure v2 node
under systemd has cpu, cpuset, io, memory and pids enabled there), gives the tests a tmpfs as TMPDIR
(the guest's /tmp is an overlay, and containerd's overlayfs snapshotter cannot stack on one), names the
scratch disk in ``KOORDLET_VM_DISK``, then runs pytest and writes ``junit.xml``, ``pytest.log``,
``exitcode`` and ``facts.json`` into RESULTS_DIR (a ``--rwdir`` shared with the host).  A run that goes silent
past pytest's own timeout is stopped with a report of where each of its processes waits (``stalled``).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

CGROUP_ROOT = Path("/sys/fs/cgroup")
TMP_MOUNT = Path("/run/koordlet-vm-tmp")
PYTEST_TIMEOUT_SECONDS = 600
# Longer than pytest's per-test timeout, so that a test that merely hangs in Python is failed by pytest and
# the suite goes on; only a run that stays silent past it is stuck where pytest cannot act.
STALL_SECONDS = PYTEST_TIMEOUT_SECONDS + 120
STALLED_EXIT = 124
KILL_GRACE_SECONDS = 90.0
SYSRQ = Path("/proc/sysrq-trigger")


class GuestError(RuntimeError):
    pass


def enable_controllers(root: Path = CGROUP_ROOT) -> list[str]:
    """Every controller of the v2 root, enabled for its children; returns their names."""
    if not (root / "cgroup.controllers").is_file():
        raise GuestError(f"{root} is not a cgroup v2 root (no cgroup.controllers): the guest must boot pure v2")
    controllers = (root / "cgroup.controllers").read_text().split()
    for name in controllers:
        (root / "cgroup.subtree_control").write_text(f"+{name}")
    enabled = (root / "cgroup.subtree_control").read_text().split()
    missing = sorted(set(controllers) - set(enabled))
    if missing:
        raise GuestError(f"controllers not enabled in {root}/cgroup.subtree_control: {' '.join(missing)}")
    return enabled


def mount_tmp(size: str = "60%") -> Path:
    TMP_MOUNT.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(TMP_MOUNT)], check=True)
    return TMP_MOUNT


def find_disk(size_bytes: int, sys_block: Path = Path("/sys/block")) -> str:
    """The scratch disk the host attached: the block device of exactly ``size_bytes``."""
    seen = []
    for dev in sorted(sys_block.iterdir()):
        sectors = int((dev / "size").read_text())
        seen.append(f"{dev.name}={sectors * 512}")
        if sectors * 512 == size_bytes and not dev.name.startswith(("loop", "sr", "ram")):
            return f"/dev/{dev.name}"
    raise GuestError(f"no block device of {size_bytes} bytes in {sys_block} (have: {', '.join(seen) or 'none'})")


def run_logged(cmd: Sequence[str], env: dict[str, str], log: Path, stall_seconds: float = STALL_SECONDS,
               report: Path | None = None, sysrq: Path | None = SYSRQ) -> int:
    """Runs ``cmd`` with its output on the console and in ``log``: the console can lose output (a test's
    terminal program may take it over), the file is what the host reads the summary from.

    Output is copied as it comes, partial lines included, so the log names the test that is running.  When
    nothing comes for ``stall_seconds`` the run is stuck below pytest's own timeout (a task in the kernel,
    a signal that is never handled): the state of every process of the run goes to ``report`` and the
    console, then the run is killed and the exit code says so."""
    with open(log, "wb") as out, subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    ) as proc:
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        last_output = time.monotonic()
        stalled = False
        while True:
            ready, _, _ = select.select([fd], [], [], min(5.0, stall_seconds / 4))
            chunk = os.read(fd, 65536) if ready else b""
            if chunk:
                last_output = time.monotonic()
                out.write(chunk)
                out.flush()
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
            elif ready:  # end of output: pytest and everything holding its pipe are gone
                code = proc.wait()
                return STALLED_EXIT if stalled else code
            elif not stalled and time.monotonic() - last_output > stall_seconds:
                stalled = True
                text = stall_report(proc.pid, stall_seconds, sysrq)
                out.write(text.encode())
                out.flush()
                sys.stdout.write(text)
                sys.stdout.flush()
                if report is not None:
                    report.write_text(text)
                abort_then_kill(proc)
                last_output = time.monotonic()
            if stalled and ((proc.poll() is not None and time.monotonic() - last_output > 2.0)
                            or time.monotonic() - last_output > KILL_GRACE_SECONDS):
                # A test's daemon of its own session may still hold the pipe; a task in uninterruptible
                # sleep outlives SIGKILL: neither may keep the run from reporting.
                return STALLED_EXIT


def _run_tree(root: int) -> list[int]:
    """``root`` and every process below it, parents first."""
    try:
        return [root, *(child.pid for child in psutil.Process(root).children(recursive=True))]
    except psutil.Error:
        return [root]


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace").strip()
    except OSError as exc:
        return f"<{exc.strerror}>"


def stall_report(root: int, stall_seconds: float, sysrq: Path | None = SYSRQ, proc_dir: Path = Path("/proc")) -> str:
    """Where each process and thread of the run waits (state, wchan, kernel stack), and, with ``sysrq``,
    the kernel's list of blocked tasks (sysrq w) from its log."""
    lines = [f"\n===== v2 guest: no output for {stall_seconds:.0f} s; state of the run's processes =====\n"]
    for pid in _run_tree(root):
        base = proc_dir / str(pid)
        cmdline = _read(base / "cmdline").replace("\0", " ")[:300]
        lines.append(f"--- pid {pid}: {cmdline}\n")
        tasks = sorted((base / "task").iterdir(), key=lambda t: int(t.name)) if (base / "task").is_dir() else []
        for task in tasks:
            state = next((ln for ln in _read(task / "status").splitlines() if ln.startswith("State:")), "State: ?")
            lines.append(f"  task {task.name} {_read(task / 'comm')} {state.split(':', 1)[1].strip()} "
                         f"wchan={_read(task / 'wchan')}\n")
            stack = _read(task / "stack")
            if stack:
                lines.extend(f"      {frame}\n" for frame in stack.splitlines())
    if sysrq is None:
        return "".join(lines)
    try:
        sysrq.write_text("w")
        kernel_log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=30).stdout
        lines.append("--- kernel log, last 150 lines (sysrq w: blocked tasks)\n")
        lines.extend(f"{ln}\n" for ln in kernel_log.splitlines()[-150:])
    except (OSError, subprocess.SubprocessError) as exc:
        lines.append(f"--- no kernel log: {exc}\n")
    return "".join(lines)


def abort_then_kill(proc: subprocess.Popen[bytes], grace: float = 30.0) -> None:
    """SIGABRT first: pytest's faulthandler prints every thread's Python stack into the log; then the
    whole process group goes."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGABRT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def main(argv: Sequence[str]) -> int:
    results = Path(argv[0])
    pytest_args = list(argv[1:])
    env = json.loads((results / "env.json").read_text())
    facts: dict[str, object] = {
        "kernel": platform.release(),
        "boot_seconds": round(float(Path("/proc/uptime").read_text().split()[0]), 1),
        "controllers": " ".join(enable_controllers()),
    }
    env["TMPDIR"] = str(mount_tmp())
    # The run writes its log and junit file here and copies them to RESULTS_DIR at the end: RESULTS_DIR is a 9p
    # share, and a write that blocks there must not stop the log (or the stall watchdog that reads it).
    local = Path(tempfile.mkdtemp(prefix="koordlet-vm-results-", dir=env["TMPDIR"]))
    disk_bytes = int(env.get("KOORDLET_VM_DISK_BYTES", "0"))
    if disk_bytes:
        env["KOORDLET_VM_DISK"] = facts["disk"] = find_disk(disk_bytes)
    (results / "facts.json").write_text(json.dumps(facts))
    print(f"v2 guest up: {json.dumps(facts)}", flush=True)

    if not any(not a.startswith("-") and a.split("::")[0].startswith("tests") for a in pytest_args):
        pytest_args.append("tests/integration")
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "cgroupv2", "-v",
        f"--timeout={PYTEST_TIMEOUT_SECONDS}",
        f"--junitxml={local / 'junit.xml'}", *pytest_args,
    ]
    started = time.monotonic()
    code = run_logged(cmd, env, local / "pytest.log", report=local / "stalled")
    facts["suite_seconds"] = round(time.monotonic() - started)
    for name in ("pytest.log", "junit.xml", "stalled"):
        if (local / name).exists():
            shutil.copyfile(local / name, results / name)
    (results / "facts.json").write_text(json.dumps(facts))
    (results / "exitcode").write_text(str(code))
    return code


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (GuestError, OSError, subprocess.CalledProcessError) as exc:
        # The host reads this file to say why the guest could not run the suite.
        Path(sys.argv[1], "error").write_text(f"{type(exc).__name__}: {exc}")
        print(f"v2 guest: ERROR: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
