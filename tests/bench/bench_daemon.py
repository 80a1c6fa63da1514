"""Overhead of the whole daemon: CPU and memory of ``koordlet run`` watching 200 pods x 5 containers.

Builds a real cgroup v1 tree (cpu, cpuacct, cpuset, memory and unified) under a unique prefix that holds a
``kubepods`` tree of 200 pods with 5 containers each, starts a few processes in some containers, runs the
installed ``koordlet`` in standalone mode with every collector on (1 s interval, PSI and CPI gates on),
lets it warm up, then measures its CPU time and RSS over the measuring window.  Everything it made is
removed at the end.  Targets (issue 3): <= 2% of one core, <= 80 MB RSS.  Run as root:

    python -m tests.bench.bench_daemon [--pods 200] [--containers 5] [--seconds 60] [--memory-interval 1] [--check]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil

ROOT = Path("/sys/fs/cgroup")
SUBSYSTEMS = ("cpu", "cpuacct", "cpuset", "memory", "unified")
QOS_DIRS = ("kubepods/burstable", "kubepods/besteffort", "kubepods")


def build_tree(prefix: str, pods: int, containers: int) -> tuple[list[Path], list[str]]:
    """Returns (directories created, container dirs relative to the prefix)."""
    created: list[Path] = []
    leaves: list[str] = []
    for p in range(pods):
        uid = f"{p:08x}-0000-4000-8000-{secrets.token_hex(6)}"
        pod_rel = f"{QOS_DIRS[p % 3]}/pod{uid}"
        for _c in range(containers):
            leaves.append(f"{pod_rel}/{secrets.token_hex(32)}")
    for subsystem in SUBSYSTEMS:
        base = ROOT / subsystem / prefix
        for rel in ["", "kubepods", "kubepods/burstable", "kubepods/besteffort", *leaves]:
            parts = rel.split("/") if rel else []
            for depth in range(len(parts) + 1):
                target = base.joinpath(*parts[:depth])
                if not target.exists():
                    target.mkdir()
                    created.append(target)
                    if subsystem == "cpuset":
                        for knob in ("cpuset.cpus", "cpuset.mems"):
                            (target / knob).write_text((target.parent / knob).read_text())
    return created, leaves


def remove_tree(created: list[Path]) -> None:
    for path in sorted(created, key=lambda p: len(p.parts), reverse=True):
        deadline = time.monotonic() + 10
        while path.exists():
            try:
                path.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def spawn(prefix: str, rel: str, code: str) -> subprocess.Popen[bytes]:
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", f"import os; os.read({read_fd}, 1)\n{code}"], pass_fds=(read_fd,))
    os.close(read_fd)
    for subsystem in SUBSYSTEMS:
        (ROOT / subsystem / prefix / rel / "cgroup.procs").write_text(str(proc.pid))
    os.write(write_fd, b"x")
    os.close(write_fd)
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--containers", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--warmup", type=float, default=15.0)
    parser.add_argument("--memory-interval", type=float, default=None,
                        help="pod/container memory.stat interval in seconds (default: the agent's, 5 s)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        print("bench_daemon: needs root to create cgroups", file=sys.stderr)
        return 2
    koordlet = shutil.which("koordlet") or str(Path(sys.executable).parent / "koordlet")
    prefix = f"koordlet-bench-{os.getpid()}-{secrets.token_hex(3)}"
    workdir = Path(f"/tmp/{prefix}")
    workdir.mkdir()
    created, leaves = build_tree(prefix, args.pods, args.containers)
    procs: list[subprocess.Popen[bytes]] = []
    agent: subprocess.Popen[bytes] | None = None
    try:
        # Some containers with processes: a few busy at a fraction of a core, the rest sleeping.
        for i, rel in enumerate(leaves[:: max(1, len(leaves) // 20)]):
            busy = "import time\nwhile True:\n t=time.time()\n while time.time()-t<0.01: pass\n time.sleep(0.09)"
            code = busy if i % 4 == 0 else "import signal; signal.pause()"
            procs.append(spawn(prefix, rel, code))
        config = workdir / "koordlet.yaml"
        # Private state, sockets, kubelet dir and CRI endpoint (tests/fixtures/isolation.py's private_settings,
        # which needs pytest): the benchmark never meets the host's own agent.
        config.write_text(json.dumps({
            "stateDir": str(workdir / "state"),
            "logFormat": "json",
            "server": {"addr": "127.0.0.1:0", "debugSocket": ""},
            "host": {"cgroupKubeParent": prefix, "varLibKubeletRootDir": str(workdir / "kubelet")},
            "qos": {"runtimeEndpoint": f"unix://{workdir / 'no-runtime.sock'}",
                    "terwayQosDir": str(workdir / "terway")},
            "runtimeHooks": {"nriSocketPath": str(workdir / "no-nri.sock"), "serverSocket": str(workdir / "hook.sock"),
                             "registrationDir": str(workdir / "hookserver.d")},
            "collector": {"resUsedIntervalSeconds": 1, "psiIntervalSeconds": 10, "cpiIntervalSeconds": 60,
                          **({"memoryIntervalSeconds": args.memory_interval} if args.memory_interval else {})},
        }))
        log = open(workdir / "koordlet.log", "wb")  # noqa: SIM115 - closed with the agent below
        agent = subprocess.Popen([koordlet, "run", "--standalone", "--config", str(config), "--cgroup-kube-parent",
                                  prefix], stdout=log, stderr=log)
        proc = psutil.Process(agent.pid)
        time.sleep(args.warmup)
        if agent.poll() is not None:
            print((workdir / "koordlet.log").read_text()[-4000:], file=sys.stderr)
            return 2
        cpu_before = proc.cpu_times()
        wall_before = time.monotonic()
        rss_max = 0
        while time.monotonic() - wall_before < args.seconds:
            rss_max = max(rss_max, proc.memory_info().rss)
            time.sleep(1.0)
        cpu_after = proc.cpu_times()
        wall = time.monotonic() - wall_before
        used = (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system)
        text = (workdir / "koordlet.log").read_text()
        serving = [json.loads(line) for line in text.splitlines() if '"serving metrics"' in line]
        port = serving[0]["address"].rsplit(":", 1)[1] if serving else None
        series = 0
        if port:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            series = sum(1 for line in body.splitlines() if line and not line.startswith("#"))
    finally:
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
        for p in procs:
            p.kill()
            p.wait(10)
        remove_tree(created)
        shutil.rmtree(workdir, ignore_errors=True)

    cpu_percent = used / wall * 100
    memory = f"{args.memory_interval:g} s" if args.memory_interval else "the default 5 s"
    print(f"{args.pods} pods x {args.containers} containers ({len(leaves)} container cgroups, {len(procs)} with "
          f"processes), 1 s interval (memory.stat every {memory}), all collectors on, {wall:.0f} s measured "
          f"after {args.warmup:.0f} s warm-up")
    print(f"  daemon CPU   {cpu_percent:6.2f} % of one core   target <= 2%:  {'met' if cpu_percent <= 2 else 'MISSED'}")
    print(f"  daemon RSS   {rss_max / 2**20:6.1f} MiB (max)       target <= 80 MB: "
          f"{'met' if rss_max <= 80e6 else 'MISSED'}")
    print(f"  /metrics     {series} series")
    missed = cpu_percent > 2 or rss_max > 80e6
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
