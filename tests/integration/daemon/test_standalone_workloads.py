"""A standalone agent (no Kubernetes) runs the QoS loop on its configured workloads over real cgroups: a BE
workload's own cgroup is suppressed by cpuset and by CFS quota (and the kernel throttles it), recovered
when suppression is switched off, and killed under memory pressure; the LS workload beside it keeps its
cpuset and quota and survives.

Each workload is a child process in its own cgroup under the test's prefix (``<prefix>/be``,
``<prefix>/ls``), configured as ``workloads: [{cgroupPath: ...}]``; the kubepods parent points into the
prefix too and discovery is off, so the agent touches nothing else on the host.  Thresholds are derived
from what this node has and measures (its CPU count, its memory usage), so the test holds on any size of
machine and on a busy one."""

from __future__ import annotations

import json
from pathlib import Path

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import Agent, build_agent
from koordlet.metriccache import names
from koordlet.metriccache.cache import pod_labels
from koordlet.qosmanager.framework import Decision
from koordlet.statesinformer.standalone import workload_uid
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from koordlet.system.validators import format_cpulist, parse_cpulist
from tests.fixtures import isolation
from tests.fixtures.agentrun import running
from tests.fixtures.fixedpods import alive
from tests.fixtures.realcgroup import RealCgroups
from tests.fixtures.waiting import wait_until

BUSY = "while True: pass"
SLEEP = "import signal; signal.pause()"
HOLD = """
import signal
block = bytearray({size})
block[::4096] = b"\\x01" * len(block[::4096])
signal.pause()  # holds the memory until killed
"""
MIB = 1 << 20
TIMEOUT = 30.0
"""Give-up bound for a round to act and the kernel to show it (the TCG v2 guest is slow)."""


def write_nodeslo(path: Path, **threshold: object) -> None:
    path.write_text("kind: NodeSLO\nspec:\n  resourceUsedThresholdWithBE: " + json.dumps(threshold) + "\n")


def write_config(tmp_path: Path, groups: RealCgroups, nodeslo: Path, **extra: object) -> Path:
    prefix = groups.name
    return isolation.write_config(tmp_path / "koordlet.yaml", isolation.private_settings(
        tmp_path, prefix, standalone=True, discoverKubepods=False,
        runtimeHooks={"enableServer": False, "enableNri": False}, collector={"memoryIntervalSeconds": 1},
        workloads=[{"name": "be", "cgroupPath": f"{prefix}/be", "qosClass": "BE", "priority": 5000},
                   {"name": "ls", "cgroupPath": f"{prefix}/ls", "qosClass": "LS", "priority": 9000}],
        qos={"nodesloFile": str(nodeslo), "evictor": "kill", "beMinCpusetCpus": 1, "memoryEvictCoolTimeSeconds": 1},
        **extra))


def last(agent: Agent, strategy: str) -> Decision | None:
    return agent.qos.options.decisions.last(strategy)


def test_be_workload_cgroup_is_suppressed_by_cpuset_and_quota_ls_is_not(real_cgroups: RealCgroups,
                                                                        tmp_path: Path) -> None:
    groups = real_cgroups
    for rel in ("be", "ls"):
        groups.mkdir(rel)
    groups.spawn("be", BUSY)
    ls_pid = groups.spawn("ls", SLEEP)
    node = read_node_info(HostPaths(), native)
    # BE's share of the node under 0.5 cores whatever the CPU count: BE gets 1 CPU (the configured minimum)
    # and a quota under half a core, so its busy loop is throttled.
    percent = max(50 // node.cpu_count, 1)
    # Every CPU: what BE's cpuset is recovered to (v1 copied it from the parent; a v2 child starts empty,
    # meaning its parent's).
    all_cpus = format_cpulist(node.online_cpus)
    ls_before = (groups.cpuset_cpus("ls"), groups.cpu_quota("ls"))
    nodeslo = tmp_path / "nodeslo.yaml"
    write_nodeslo(nodeslo, enable=True, cpuSuppressThresholdPercent=percent, cpuSuppressPolicy="cpuset")
    config = write_config(tmp_path, groups, nodeslo)
    with running(build_agent(load(config), tmp_path / "state", node)) as agent:
        def cpuset_cut() -> Decision | None:
            d = last(agent, "cpusuppress")
            return d if d is not None and d.action == "suppress" and d.numbers.get("policy") == "cpuset" \
                and groups.cpuset_cpus("be") == d.numbers["be_cpuset"] else None

        decision = wait_until("BE's cpuset cut in the kernel", cpuset_cut, TIMEOUT)
        assert decision.numbers["targets"] == [f"{groups.name}/be"]
        assert len(parse_cpulist(groups.cpuset_cpus("be"))) < len(parse_cpulist(all_cpus)), decision.summary
        assert groups.cpu_quota("be")[0] == -1  # the quota policy is not in use
        assert (groups.cpuset_cpus("ls"), groups.cpu_quota("ls")) == ls_before

        write_nodeslo(nodeslo, enable=True, cpuSuppressThresholdPercent=percent, cpuSuppressPolicy="cfsQuota")

        def quota_cut() -> Decision | None:
            d = last(agent, "cpusuppress")
            return d if d is not None and d.numbers.get("policy") == "cfsQuota" \
                and groups.cpu_quota("be")[0] == d.numbers["quota_us"] else None

        decision = wait_until("BE's quota set in the kernel", quota_cut, TIMEOUT)
        quota = groups.cpu_quota("be")[0]
        # At most the threshold's cores (half a core or less): at most, since an idle node's system usage can
        # round to nothing.  The busy loop wants a whole core, so the kernel throttles it either way.
        assert 0 < quota <= round(decision.numbers["threshold_cores"] * 100_000) <= 50_000, decision.summary
        assert decision.numbers["quota_shares_us"] == {f"{groups.name}/be": quota}
        wait_until("BE's cpuset recovered", lambda: groups.cpuset_cpus("be") == all_cpus, TIMEOUT)
        throttled = groups.cpu_throttling("be")[1]
        wait_until("the kernel throttling BE's busy loop",
                   lambda: groups.cpu_throttling("be")[1] >= throttled + 3, TIMEOUT)
        assert (groups.cpuset_cpus("ls"), groups.cpu_quota("ls")) == ls_before
        assert groups.cpu_throttling("ls")[1] == 0

        write_nodeslo(nodeslo, enable=False)
        wait_until("BE's quota recovered", lambda: groups.cpu_quota("be")[0] == -1, TIMEOUT)
        assert groups.cpuset_cpus("be") == all_cpus
        assert (groups.cpuset_cpus("ls"), groups.cpu_quota("ls")) == ls_before
        assert alive(ls_pid)


def test_memory_pressure_kills_the_be_workload_not_ls(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    groups = real_cgroups
    for rel in ("be", "ls"):
        groups.mkdir(rel)
    node = read_node_info(HostPaths(), native)
    # 2% of the node: with it held, the node's usage is at least 2% and half of it a valid threshold.
    be_bytes = max(64 * MIB, node.memory_total_bytes // 50)
    ls_pid = groups.spawn("ls", HOLD.format(size=32 * MIB))
    be_pid = groups.spawn("be", HOLD.format(size=be_bytes))
    nodeslo = tmp_path / "nodeslo.yaml"
    write_nodeslo(nodeslo, enable=False)
    config = write_config(tmp_path, groups, nodeslo, featureGates={"BEMemoryEvict": True})
    with running(build_agent(load(config), tmp_path / "state", node)) as agent:
        def be_measured() -> float | None:
            sample = agent.cache.latest(names.POD_MEMORY_USAGE, pod_labels(workload_uid("be")), 5.0)
            return sample[1] if sample is not None and sample[1] >= be_bytes * 0.9 else None

        wait_until("the agent to measure the BE workload's memory", be_measured, TIMEOUT)
        node_used = wait_until("a node memory sample",
                               lambda: agent.cache.latest(names.NODE_MEMORY_USAGE, (), 5.0), TIMEOUT)[1]
        capacity = agent.informer.node().memory_total_bytes
        usage_percent = int(node_used) * 100 // capacity
        # Half the usage the node measured: crossed now, and still crossed if other software on the host
        # frees memory meanwhile.
        threshold = max(usage_percent // 2, 1)
        write_nodeslo(nodeslo, enable=True, memoryEvictThresholdPercent=threshold,
                      memoryEvictLowerPercent=threshold - 1)
        wait_until("the BE workload's process killed", lambda: not alive(be_pid), TIMEOUT)

        def evictions() -> list[Decision]:
            return [d for d in agent.qos.options.decisions.history() if d.strategy == "memoryevict"
                    and d.action == "evict"]

        # The strategy kills first and records its decision after: on a slow guest the test can see the
        # process gone before the round that killed it has finished.
        evicted = wait_until("the memoryevict decision recorded", evictions, TIMEOUT)
        assert [e["pod"] for e in evicted[0].numbers["evicted"]] == ["standalone/be"], evicted[0].summary
        # Rounds after the cooldown, usage still over the threshold: the BE workload is pending (still
        # listed), so it is not evicted again, and LS is never a candidate.
        evicted_at = evicted[0].at

        def later_round() -> bool:
            d = last(agent, "memoryevict")
            return d is not None and d.at > evicted_at + agent.qos.options.config.memory_evict_cool_time_seconds + 1

        wait_until("memoryevict rounds after the cooldown", later_round, TIMEOUT)
        attempts = agent.qos.options.evictor.recent(10)
        assert [(a.pod, a.outcome, a.backend) for a in attempts] == [("standalone/be", "evicted", "standalone")]
        assert alive(ls_pid)
        final = last(agent, "memoryevict")
        assert final is not None
        # Either usage fell below the threshold with BE's memory freed, or the killed workload is pending.
        assert "nothing to evict" in final.summary or final.numbers["pending_pods"] == ["standalone/be"], \
            final.summary
