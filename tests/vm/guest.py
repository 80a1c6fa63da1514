"""Guest side of the v2 suite: prepare the pure v2 kernel, run ``pytest -m cgroupv2``, leave the results.

Run by :mod:`tests.vm.host` as ``python -m tests.vm.guest RESULTS_DIR [pytest args]`` inside the guest.
It enables every controller the kernel offers in the root's ``cgroup.subtree_control`` (a pure v2 node
under systemd has cpu, cpuset, io, memory and pids enabled there), gives the tests a tmpfs as TMPDIR
(the guest's /tmp is an overlay, and containerd's overlayfs snapshotter cannot stack on one), names the
scratch disk in ``KOORDLET_VM_DISK``, then runs pytest and writes ``junit.xml``, ``exitcode`` and
``facts.json`` into RESULTS_DIR (a ``--rwdir`` shared with the host).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
TMP_MOUNT = Path("/run/koordlet-vm-tmp")


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


def run_logged(cmd: Sequence[str], env: dict[str, str], log: Path) -> int:
    """Runs ``cmd`` with its output on the console and in ``log``: the console can lose output (a test's
    terminal program may take it over), the file is what the host reads the summary from."""
    with open(log, "wb") as out, subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            out.flush()
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
        return proc.wait()


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
    disk_bytes = int(env.get("KOORDLET_VM_DISK_BYTES", "0"))
    if disk_bytes:
        env["KOORDLET_VM_DISK"] = facts["disk"] = find_disk(disk_bytes)
    (results / "facts.json").write_text(json.dumps(facts))
    print(f"v2 guest up: {json.dumps(facts)}", flush=True)

    if not any(not a.startswith("-") and a.split("::")[0].startswith("tests") for a in pytest_args):
        pytest_args.append("tests/integration")
    cmd = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "cgroupv2", "--timeout=600",
        f"--junitxml={results / 'junit.xml'}", *pytest_args,
    ]
    started = time.monotonic()
    code = run_logged(cmd, env, results / "pytest.log")
    facts["suite_seconds"] = round(time.monotonic() - started)
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
