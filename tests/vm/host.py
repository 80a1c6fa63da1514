"""Host side of the v2 suite: boot one guest, run the ``cgroupv2`` tests in it, report what they did.

The guest is virtme-ng's snapshot of this host: the same root filesystem (read-only, over 9p), so the
guest runs this checkout with this very interpreter and its installed packages.  What the guest may write
goes to ``--rwdir`` directories: the results directory (junit file, exit code, guest facts) and nothing
else.  A scratch file attached as a virtio-scsi disk gives the blkio tests a real block device.

KVM is tried first with a short probe; the nested virtualisation of the test machines makes qemu abort or
hang silently there, and then TCG (emulation, several times slower) runs the suite.  Which one ran and why
is logged.  Anything that keeps the guest from booting or from reporting is an error naming the cause:
the v2 suite never skips.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GUEST_MEMORY = "3G"
GUEST_CPUS = 2
DISK_BYTES = 512 << 20
KVM_PROBE_SECONDS = 20.0
DEFAULT_TIMEOUT_SECONDS = 45 * 60
PROBE_MARKER = "koordlet-vm-probe-ok"
# Variables the guest inherits from the host run (CI=true turns a skip into a failure there too).
PASSED_ENV = ("CI", "HOME", "LANG", "LC_ALL", "TZ", "PYTEST_ADDOPTS")
PASSED_ENV_PREFIXES = ("KOORDLET_", "HYPOTHESIS_")


class VMError(RuntimeError):
    """The guest could not be booted or did not report; the message says why and what to do."""


@dataclass
class Accel:
    name: str
    """``kvm`` or ``tcg``."""
    reason: str


@dataclass
class Outcome:
    nodeid: str
    outcome: str
    seconds: float
    message: str = ""


@dataclass
class Results:
    exit_code: int
    outcomes: list[Outcome] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)
    summary: str = ""
    """The guest pytest's closing line."""


def _version_key(path: Path) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path.name)]


def find_kernel() -> Path:
    """The guest kernel: ``KOORDLET_VM_KERNEL`` or the newest ``/boot/vmlinuz-*`` (Debian's linux-image)."""
    override = os.environ.get("KOORDLET_VM_KERNEL")
    if override:
        path = Path(override)
        if not path.is_file():
            raise VMError(f"KOORDLET_VM_KERNEL={override} is not a file")
        return path
    kernels = sorted(Path("/boot").glob("vmlinuz-*"), key=_version_key)
    if not kernels:
        raise VMError("no kernel image in /boot: install Debian's linux-image-amd64 (tests/host-deps.sh does, as root)")
    return kernels[-1]


def find_tool(name: str, hint: str) -> str:
    """``name`` on PATH or beside this interpreter (a venv's console scripts)."""
    beside = Path(sys.executable).parent / name
    found = shutil.which(name) or (str(beside) if beside.exists() else None)
    if found is None:
        raise VMError(f"{name} not found: {hint}")
    return found


def _vng_command(
    vng: str, kernel: Path, accel: str, exec_cmd: str, rwdirs: Sequence[Path] = (), disk: Path | None = None
) -> list[str]:
    cmd = [vng, "--run", str(kernel), "--memory", GUEST_MEMORY, "--cpus", str(GUEST_CPUS), "--cwd", str(REPO_ROOT)]
    if accel == "tcg":
        cmd.append("--disable-kvm")
    for rwdir in rwdirs:
        cmd += ["--rwdir", str(rwdir)]
    if disk is not None:
        cmd += ["--disk", str(disk)]
    return [*cmd, "--exec", exec_cmd]


def _tool_env() -> dict[str, str]:
    # vng calls virtme-run by name: the venv's script directory must be on PATH.
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def choose_accel(vng: str, kernel: Path) -> Accel:
    """KVM when a short probe boot answers, TCG otherwise (``KOORDLET_VM_ACCEL=kvm|tcg`` forces one)."""
    forced = os.environ.get("KOORDLET_VM_ACCEL", "").strip().lower()
    if forced in ("kvm", "tcg"):
        return Accel(forced, "forced by KOORDLET_VM_ACCEL")
    if forced:
        raise VMError(f"KOORDLET_VM_ACCEL must be kvm or tcg, got {forced!r}")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accel("tcg", "/dev/kvm is absent or not accessible")
    cmd = _vng_command(vng, kernel, "kvm", f"echo {PROBE_MARKER}")
    started = time.monotonic()
    try:
        code, out, err = run_group(cmd, KVM_PROBE_SECONDS, capture=True)
    except subprocess.TimeoutExpired:
        return Accel("tcg", f"a KVM guest printed nothing within {KVM_PROBE_SECONDS:g} s (nested virtualisation)")
    if code == 0 and PROBE_MARKER in out:
        return Accel("kvm", f"KVM probe boot answered in {time.monotonic() - started:.1f} s")
    last = (err.strip().splitlines() or ["no output"])[-1]
    return Accel("tcg", f"KVM probe failed (exit {code}: {last})")


def run_group(cmd: Sequence[str], timeout: float, capture: bool = False) -> tuple[int, str, str]:
    """Runs ``cmd`` in a process group of its own; on timeout the whole group is killed (vng starts
    virtme-run, which starts qemu: killing vng alone would leave a guest running) and TimeoutExpired raised."""
    pipe = subprocess.PIPE if capture else None
    with subprocess.Popen(cmd, env=_tool_env(), stdin=subprocess.DEVNULL, stdout=pipe, stderr=pipe, text=True,
                          start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
        return proc.returncode, out or "", err or ""


def guest_env() -> dict[str, str]:
    """The environment the guest's pytest runs with: this venv first on PATH, plus the passed variables."""
    env = {k: v for k, v in os.environ.items() if k in PASSED_ENV or k.startswith(PASSED_ENV_PREFIXES)}
    env["PATH"] = f"{Path(sys.executable).parent}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the checkout is read-only in the guest
    return env


def read_junit(path: Path) -> list[Outcome]:
    """Per-test outcomes from a pytest junit file (``passed``, ``failed``, ``error``, ``skipped``)."""
    outcomes = []
    for case in ET.parse(path).getroot().iter("testcase"):
        module = (case.get("classname") or "").replace(".", "/")
        nodeid = f"{module}.py::{case.get('name')}" if module else str(case.get("name"))
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            child = case.find(tag)
            if child is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (child.get("message") or "").splitlines()[0][:200] if child.get("message") else ""
                break
        outcomes.append(Outcome(nodeid, outcome, float(case.get("time") or 0.0), message))
    return outcomes


def run(pytest_args: Sequence[str], junit_out: Path | None = None, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> int:
    """Boots the guest, runs the selection, prints per-test outcomes; returns the guest pytest's exit code."""
    kernel = find_kernel()
    vng = find_tool("vng", "install virtme-ng from PyPI (tox -e v2 does)")
    find_tool("qemu-system-x86_64", "install Debian's qemu-system-x86 (tests/host-deps.sh does, as root)")
    if shutil.which("busybox") is None:
        raise VMError("busybox not found: virtme-ng builds the guest's initramfs with it (Debian busybox-static)")
    accel = choose_accel(vng, kernel)
    print(f"v2 guest: kernel {kernel}, {GUEST_CPUS} vCPUs, {GUEST_MEMORY}, {accel.name} ({accel.reason})", flush=True)
    with tempfile.TemporaryDirectory(prefix="koordlet-vm-") as tmp:
        results_dir = Path(tmp) / "results"
        results_dir.mkdir()
        disk = Path(tmp) / "disk.img"
        with open(disk, "wb") as f:
            f.truncate(DISK_BYTES)
        env = guest_env()
        env["KOORDLET_VM_DISK_BYTES"] = str(DISK_BYTES)
        (results_dir / "env.json").write_text(json.dumps(env))
        exec_cmd = f"{sys.executable} -m tests.vm.guest {results_dir} " + " ".join(_quote(a) for a in pytest_args)
        cmd = _vng_command(vng, kernel, accel.name, exec_cmd, [results_dir], disk)
        started = time.monotonic()
        try:
            code, _, _ = run_group(cmd, timeout)
        except subprocess.TimeoutExpired:
            raise VMError(f"the guest did not finish within {timeout:g} s ({accel.name})") from None
        elapsed = time.monotonic() - started
        results = collect(results_dir, code)
        if junit_out is not None:
            shutil.copyfile(results_dir / "junit.xml", junit_out)
    report(results, elapsed, accel)
    return results.exit_code


def collect(results_dir: Path, vng_code: int) -> Results:
    """What the guest left in its results directory; a guest that never ran pytest is a :class:`VMError`."""
    error = results_dir / "error"
    if error.exists():
        raise VMError(f"the guest could not prepare the suite: {error.read_text().strip()}")
    started = results_dir / "facts.json"
    if not started.exists():
        raise VMError(
            f"the guest never started the suite (virtme-ng exit {vng_code}): see the console output above; "
            "qemu, the kernel's virtio modules or the initramfs (busybox) are the usual causes"
        )
    facts = json.loads(started.read_text())
    stalled = results_dir / "stalled"
    if stalled.exists():
        raise VMError(f"the guest's pytest stalled and was killed; where its processes waited:\n{stalled.read_text()}")
    code_file = results_dir / "exitcode"
    if not code_file.exists():
        raise VMError(f"the guest's pytest did not finish (virtme-ng exit {vng_code}): see the console output above")
    junit = results_dir / "junit.xml"
    outcomes = read_junit(junit) if junit.exists() else []
    log = results_dir / "pytest.log"
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    return Results(int(code_file.read_text()), outcomes, facts, lines[-1] if lines else "")


def report(results: Results, elapsed: float, accel: Accel) -> None:
    print("\nv2 guest results (per test):")
    for item in results.outcomes:
        note = f"  {item.message}" if item.message and item.outcome != "passed" else ""
        print(f"  {item.outcome.upper():7} {item.nodeid} ({item.seconds:.1f} s){note}")
    facts = results.facts
    print(
        f"v2 guest: kernel {facts.get('kernel')}, controllers {facts.get('controllers')}, "
        f"booted in {facts.get('boot_seconds')} s ({accel.name}), suite {facts.get('suite_seconds', '?')} s, "
        f"whole run {elapsed:.0f} s, pytest exit {results.exit_code}"
    )
    # Last, so that the run's closing line is the guest pytest's own summary.
    print(f"v2 guest pytest summary:\n{results.summary}", flush=True)


def _quote(arg: str) -> str:
    return arg if re.fullmatch(r"[\w./:=@,+-]+", arg) else "'" + arg.replace("'", "'\"'\"'") + "'"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.vm",
        description="Boot a pure cgroup v2 guest (virtme-ng) and run the cgroupv2 tests in it. "
        "The first positional argument and everything after it (or everything after --) go to the guest's "
        "pytest; the default selection is tests/integration -m cgroupv2.",
    )
    parser.add_argument("--junitxml", type=Path, help="copy the guest's junit file here")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_SECONDS, help="seconds for the whole guest")
    # REMAINDER: everything from the first pytest argument on is pytest's, options such as -k included.
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    try:
        return run(pytest_args, args.junitxml, args.timeout)
    except VMError as exc:
        print(f"v2 guest: ERROR: {exc}", file=sys.stderr, flush=True)
        return 3
