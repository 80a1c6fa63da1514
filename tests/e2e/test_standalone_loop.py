"""Scenario f: the same loop on a host without Kubernetes.  ``koordlet run --standalone`` (a real process) with
two configured workloads in plain cgroups: an LS load step suppresses the BE workload's own cgroup within one
round, and memory pressure kills the BE workload's processes while the LS workload runs on."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import host_cgroup_version
from tests.e2e.harness import KoordletView, Proc, Report, console_script, free_port, measure_cores, wait_for
from tests.e2e.node import GiB, MiB, mem_available_bytes, mem_total_bytes
from tests.fixtures.isolation import merge, private_settings
from tests.fixtures.realcgroup import RealCgroups

PERIOD_US = 100_000
WAIT_SECONDS = 60.0
BURN = "while True: pass"


def hold_and_burn(nbytes: int) -> str:
    """Python for a BE process: keeps ``nbytes`` resident (every page written) and burns a core."""
    return f"data = bytearray({nbytes})\nfor i in range(0, len(data), 4096): data[i] = 1\n{BURN}"


def nodeslo(**overrides: Any) -> str:
    strategy = {"enable": True, "cpuSuppressThresholdPercent": 65, "cpuSuppressPolicy": "cfsQuota",
                "memoryEvictThresholdPercent": 99, **overrides}
    return yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                           "metadata": {"name": "slo-controller-config", "namespace": "koordinator-system"},
                           "data": {"resource-threshold-config": json.dumps({"clusterStrategy": strategy})}})


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[tuple[KoordletView, RealCgroups, Proc, Path]]:
    if os.geteuid() != 0:
        pytest.skip("the standalone scenario needs root: real cgroups and processes")
    cgroups = RealCgroups(f"koord-e2e-sa-{secrets.token_hex(4)}", host_cgroup_version())
    run_dir = Path(tempfile.mkdtemp(prefix="ke2e-sa-"))
    try:
        for name in ("be", "ls"):
            cgroups.mkdir(name)
        slo_file = run_dir / "slo-controller-config.yaml"
        slo_file.write_text(nodeslo())
        metrics_port = free_port()
        # Private state, sockets and kube parent (below the test's own prefix; no kubepods there): nothing of the
        # host's own agent is touched.
        config = merge(private_settings(run_dir, f"{cgroups.name}/kubepods"), {
            "standalone": True, "nodeName": "e2e-standalone",
            "discoverKubepods": False, "featureGates": {"BEMemoryEvict": True},
            "server": {"addr": f"127.0.0.1:{metrics_port}", "debugSocket": str(run_dir / "debug.sock")},
            "runtimeHooks": {"enableNri": False, "enableServer": False},
            "collector": {"memoryIntervalSeconds": 1},
            "qos": {"nodesloFile": str(slo_file), "evictor": "kill"},
            "workloads": [{"name": "batch", "cgroupPath": f"{cgroups.name}/be", "qosClass": "BE", "priority": 5000},
                          {"name": "web", "cgroupPath": f"{cgroups.name}/ls", "qosClass": "LS", "priority": 9000}],
        })
        (run_dir / "koordlet.yaml").write_text(yaml.safe_dump(config))
        proc = Proc("koordlet-standalone", [*console_script("koordlet"), "run", "--config",
                                            str(run_dir / "koordlet.yaml")], run_dir).start()
        try:
            view = KoordletView(run_dir / "debug.sock", metrics_port)
            wait_for("the standalone koordlet running", view.ready, WAIT_SECONDS, [proc])
            yield view, cgroups, proc, slo_file
            proc.check_alive()
        finally:
            proc.stop()
    finally:
        cgroups.cleanup()
        shutil.rmtree(run_dir, ignore_errors=True)


def _suppress(view: KoordletView) -> dict[str, Any] | None:
    decision = view.last_decision("cpusuppress")
    return decision if decision is not None and "quota_us" in decision["numbers"] else None


def _system_cores(decision: dict[str, Any]) -> float:
    """What the suppress formula subtracted for the system: max(system usage, reserved)."""
    return max(decision["numbers"]["system_used_cores"], decision["numbers"]["reserved_cores"])


def _memory(view: KoordletView) -> dict[str, Any] | None:
    decision = view.last_decision("memoryevict")
    return decision if decision is not None and "usage_percent" in decision["numbers"] else None


def test_f_standalone_workloads_are_suppressed_and_evicted(standalone: Any, e2e_report: Report) -> None:
    view, cgroups, proc, slo_file = standalone
    held = min(max(GiB, mem_total_bytes() // 12), mem_available_bytes() // 3) // MiB * MiB
    be_pid = cgroups.spawn("be", hold_and_burn(held))
    ls_idle = cgroups.spawn("ls", "import signal; signal.pause()")
    be_dir = f"{cgroups.name}/be"

    # Steady before the step: LS idle in koordlet's own figures, and BE's quota no longer stepping up.
    steady = wait_for("a steady cfsQuota round on the BE workload with LS idle",
                      lambda: (d := _suppress(view)) is not None and d["numbers"]["ls_used_cores"] < 0.25
                      and not d["numbers"]["stepped"] and d, 2 * WAIT_SECONDS, [proc])
    quota_before = steady["numbers"]["quota_us"]
    loaded_at = time.time()
    ls_busy = cgroups.spawn("ls", BURN)

    def first_loaded_round() -> dict[str, Any] | None:
        for decision in view.decisions("cpusuppress"):
            if decision["at"] > loaded_at and decision["numbers"].get("ls_used_cores", 0) >= 0.4:
                return decision
        return None

    cut = wait_for("the first round that sees the LS load", first_loaded_round, WAIT_SECONDS, [proc])
    # The host is shared: the system's usage moves BE's quota too, so the cut is compared with the steady
    # quota at the cut's system usage (both as koordlet measured them).
    system_freed = _system_cores(steady) - _system_cores(cut)
    assert cut["action"] == "suppress" and cut["numbers"]["quota_us"] < quota_before + system_freed * PERIOD_US, \
        (steady, cut)
    wait_for("the BE workload's quota in the kernel",
             lambda: 0 < cgroups.cpu_quota("be")[0] <= cut["numbers"]["quota_us"], 10, [proc])
    limit_cores = cgroups.cpu_quota("be")[0] / PERIOD_US
    be_cores = measure_cores(be_dir, 3.0)
    cgroups.kill(ls_busy)
    stopped = time.time()
    regrown = wait_for("the BE workload's quota growing back",
                       lambda: (d := _suppress(view)) is not None and d["at"] > stopped
                       and d["numbers"]["quota_us"] >= 0.9 * quota_before and d, 2 * WAIT_SECONDS, [proc])
    assert be_cores <= limit_cores * 1.15 + 0.05, f"BE used {be_cores:.2f} cores under {limit_cores:.2f}"

    measured = wait_for("koordlet measuring the BE workload's memory",
                        lambda: (d := _memory(view)) and d["numbers"]["used_bytes"] > held and d, WAIT_SECONDS, [proc])
    usage_pct = measured["numbers"]["usage_percent"]
    held_pct = held * 100 / measured["numbers"]["capacity_bytes"]
    # Under what koordlet measures, above what is left once the BE workload is gone.
    threshold = max(int(usage_pct - held_pct / 2), 3)
    began = time.time()
    slo_file.write_text(nodeslo(memoryEvictThresholdPercent=threshold))
    wait_for("the BE workload killed", lambda: not _alive(be_pid), WAIT_SECONDS, [proc])
    killed_at = time.time()
    calm = wait_for("a memoryevict round below the threshold",
                    lambda: (d := _memory(view)) and d["at"] > killed_at and d["action"] == "none" and d,
                    WAIT_SECONDS, [proc])
    evictions = view.evictions()
    slo_file.write_text(nodeslo())
    e2e_report.record("f_standalone", "standalone", quota_before_us=quota_before,
                      quota_cut_us=cut["numbers"]["quota_us"], ls_cores_seen=round(cut["numbers"]["ls_used_cores"], 3),
                      be_cores_after_cut=round(be_cores, 3), be_limit_cores=round(limit_cores, 3),
                      reaction_seconds=round(cut["at"] - loaded_at, 2),
                      regrow_seconds=round(regrown["at"] - stopped, 2),
                      memory_usage_percent=usage_pct, memory_threshold_percent=threshold,
                      usage_percent_after=calm["numbers"]["usage_percent"],
                      eviction_latency_seconds=round(killed_at - began, 2),
                      evictions=[e["pod"] for e in evictions])
    assert _alive(ls_idle), "the LS workload was killed"
    assert [e["pod"] for e in evictions if e["outcome"] == "evicted"] == ["standalone/batch"], evictions


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child stays a zombie until reaped: count it as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False
