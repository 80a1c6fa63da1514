"""cpuburst on the real hierarchy of each cgroup version: v1 ``cpu.cfs_burst_us`` on the host, v2
``cpu.max.burst`` in the guest (both kernel >= 5.14).

One LS pod, one container with a 500m CPU limit, whose cgroups carry the quotas kubelet gives them
(50 ms per 100 ms period, pod and container).  With ``cpuBurstOnly`` the strategy sets the container's burst
to limit x ``cpuBurstPercent``% x 100 ms and the pod's to the sum, never above the quota (the kernel refuses
a burst above the quota with EINVAL, Koordinator #2778); the expected values are worked out here from that
rule, not by the strategy's arithmetic, and read back from the kernel.

The burst then takes effect: a process that sleeps and then spins for more than a period's quota runs
beyond the quota on the runtime saved while it slept, which the kernel counts in ``cpu.stat`` (nr_bursts,
burst time).  Switched off, the strategy puts the burst back to 0 and the same process is throttled at the
quota with no burst counted."""

from __future__ import annotations

import time
from pathlib import Path

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Resources
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.cpuburst import CPUBurst
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import AuditLog, ResourceExecutor
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import detect_layout
from koordlet.system.node import read_node_info
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until
from tests.unit.qosmanager.fakes import FakeInformer, make_pod

LIMIT_MILLI = 500
PERIOD_US = 100_000
QUOTA_US = LIMIT_MILLI * PERIOD_US // 1000
"""What kubelet writes for a 500m limit, for the container and (its only one) the pod."""
BURSTS = 3
"""Bursts (or throttled periods) the workload must show before a phase is judged."""

# Sleeps long enough for the saved runtime to refill (a few periods), then spins 1.2 periods of CPU time:
# more than one period's quota, so the first period of the spin runs on the saved burst.
BURSTY = """
import time
while True:
    time.sleep(0.3)
    end = time.thread_time() + 0.12
    while time.thread_time() < end:
        pass
"""


def slo(percent: int) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json(
        {"cpuBurstStrategy": {"policy": "cpuBurstOnly", "cpuBurstPercent": percent}}))


def expected_burst_us(percent: int) -> int:
    """Koordinator's static burst (``calcStaticCPUBurstVal``: limit cores x percent / 100 x period), capped
    at the quota (``calcSafeCPUBurstVal``)."""
    return min(LIMIT_MILLI * percent * PERIOD_US // (1000 * 100), QUOTA_US)


def test_burst_written_held_and_used(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    burst_file = "cpu.max.burst" if real_cgroups.version == 2 else "cpu.cfs_burst_us"
    prefix = real_cgroups.name
    pod = make_pod("burst", "LS", limits=Resources(cpu_milli=LIMIT_MILLI), kube_parent=prefix)
    pod_rel = pod.cgroup_dir.removeprefix(prefix + "/")
    container_rel = pod.containers[0].cgroup_dir.removeprefix(prefix + "/")
    real_cgroups.mkdir(container_rel)
    for rel in (pod_rel, container_rel):
        real_cgroups.set_cpu_quota(rel, QUOTA_US, PERIOD_US)
    paths = HostPaths()
    layout = detect_layout(paths)
    options = Options(
        layout=layout, driver=CgroupDriver.CGROUPFS, informer=FakeInformer([pod], read_node_info(paths, native)),
        cache=MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time),
        executor=ResourceExecutor(layout, time.monotonic, AuditLog(tmp_path / "audit")),
        evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout), config=QoSManagerConfig(),
        collector=CollectorConfig(), gates={}, clock=time.time, decisions=DecisionLog(), kube_parent=prefix)
    strategy = CPUBurst(options)

    def bursts() -> tuple[str, str]:
        return (real_cgroups.path("cpu", container_rel) / burst_file).read_text().strip(), (
            real_cgroups.path("cpu", pod_rel) / burst_file).read_text().strip()

    assert bursts() == ("0", "0")
    decision = strategy.run_once(slo(50))
    assert "failed_writes" not in decision.numbers, decision.summary
    assert decision.numbers["bursts_set"] == 1, decision.summary
    assert bursts() == (str(expected_burst_us(50)),) * 2  # 25000 us: half the 50 ms quota
    assert real_cgroups.cpu_quota(container_rel) == real_cgroups.cpu_quota(pod_rel) == (QUOTA_US, PERIOD_US)
    print(f"burst 50%: {burst_file} container/pod = {bursts()}")

    pid = real_cgroups.spawn(container_rel, BURSTY)
    wait_until(f"{BURSTS} CFS bursts of the container", lambda: real_cgroups.cpu_bursts(container_rel)[0] >= BURSTS,
               timeout=30)
    nr_bursts, burst_ns = real_cgroups.cpu_bursts(container_rel)
    # Each burst is time run beyond the quota in one period, at most the burst itself.
    assert 0 < burst_ns <= nr_bursts * expected_burst_us(50) * 1000, (nr_bursts, burst_ns)
    print(f"burst 50%: nr_bursts {nr_bursts}, burst time {burst_ns / 1e6:.1f} ms "
          f"({burst_ns / nr_bursts / 1e6:.1f} ms per burst, burst {expected_burst_us(50) / 1000:.0f} ms)")

    # 300% of the limit is 150 ms, three times the quota: the kernel would refuse it, so it is capped.
    decision = strategy.run_once(slo(300))
    assert "failed_writes" not in decision.numbers, decision.summary
    assert bursts() == (str(expected_burst_us(300)),) * 2 == (str(QUOTA_US),) * 2
    print(f"burst 300%: {burst_file} container/pod = {bursts()}")

    # Off: the bursts go back to 0 and the same workload is throttled at the quota without bursting.
    strategy.run_once(slo(50), enabled=False)
    assert bursts() == ("0", "0")
    bursts_before = real_cgroups.cpu_bursts(container_rel)
    throttled_before = real_cgroups.cpu_throttling(container_rel)[1]
    wait_until(f"{BURSTS} throttled periods without burst",
               lambda: real_cgroups.cpu_throttling(container_rel)[1] >= throttled_before + BURSTS, timeout=30)
    assert real_cgroups.cpu_bursts(container_rel) == bursts_before
    print(f"burst off: throttled {real_cgroups.cpu_throttling(container_rel)[1] - throttled_before} periods, "
          f"bursts stayed {bursts_before}")
    real_cgroups.kill(pid)
