"""The colocation loop on one node, each runtime variant: admission to eviction, every figure read from the
kernel or the API objects, and recorded in the run's report.

Scenarios run in this file's order on the node of their variant (a module-scoped fixture): a. pods start with
their cgroups set, e. a ConfigMap edit reaches the node, d. NodeMetric drives batch allocatable, b. an LS load
step suppresses BE, c. memory pressure evicts BE through the companion with PDBs honoured.
"""

from __future__ import annotations

import calendar
import json
import time
from typing import Any

import pytest

from tests.e2e.harness import (
    Report,
    cfs_quota,
    cgroup_exists,
    cpu_shares,
    cpuset_cpus,
    measure_cores,
    memory_limit,
    wait_for,
)
from tests.e2e.node import (
    AGGREGATE_SECONDS,
    BATCH_CPU,
    BATCH_MEMORY,
    BUSY,
    REPORT_INTERVAL_SECONDS,
    RESOURCE_STATUS,
    KubeNode,
    MiB,
    container,
    cpu_count,
    hold_memory,
    pod_manifest,
)
from tests.fixtures.containerd import unified_cgroups
from tests.fixtures.realcgroup import kubelet_cpu_weight

PERIOD_US = 100_000
SUPPRESS_INTERVAL_SECONDS = 1.0
"""koordlet's default ``qos.cpuSuppressIntervalSeconds``, which the node runs with."""
LOAD_SECONDS = 60.0
"""Upper bound for a reaction the node owes within seconds; the figure itself is measured and reported."""


def shares_as_kernel(shares: int) -> int:
    """What the kernel file holds for ``shares``: v1 cpu.shares, v2 the weight runc derives from them."""
    return kubelet_cpu_weight(shares) if unified_cgroups() else shares


def cgroup_values(rel_dir: str) -> dict[str, Any]:
    quota, _period = cfs_quota(rel_dir)
    return {"cpu_shares": cpu_shares(rel_dir), "cfs_quota_us": quota, "memory_limit": memory_limit(rel_dir)}


def pinned_cpu() -> int:
    return cpu_count() - 1


def shared_pool() -> str:
    """Every CPU but the one the LSR pod is bound to, as a cpu list."""
    last = pinned_cpu()
    return "0" if last == 1 else f"0-{last - 1}"


BE_BURN = pod_manifest("be-burn", [container("burn", BUSY,
                                             requests={BATCH_CPU: "500", BATCH_MEMORY: "128Mi"},
                                             limits={BATCH_CPU: "1000", BATCH_MEMORY: "256Mi"})],
                       qos="BE", priority_class="koord-batch", priority=5900)
LS_WEB = pod_manifest("ls-web", [container("web", "sleep 1000000", requests={"cpu": "200m", "memory": "64Mi"},
                                           limits={"cpu": "1", "memory": "128Mi"})],
                      qos="LS", priority_class="koord-prod", priority=9000)


def lsr_pinned() -> dict[str, Any]:
    return pod_manifest("lsr-pinned", [container("pinned", "sleep 1000000", requests={"cpu": "1", "memory": "64Mi"},
                                                 limits={"cpu": "1", "memory": "64Mi"})],
                        qos="LSR", priority_class="koord-prod", priority=9500,
                        annotations={RESOURCE_STATUS: json.dumps({"cpuset": str(pinned_cpu())})})


def ls_load(name: str, memory_bytes: int = 0) -> dict[str, Any]:
    script = BUSY if not memory_bytes else f"({hold_memory(memory_bytes)}) & {BUSY}"
    return pod_manifest(name, [container("load", script, requests={"cpu": "500m", "memory": "64Mi"},
                                         limits={"memory": str(memory_bytes + 256 * MiB)})],
                        qos="LS", priority_class="koord-prod", priority=9000)


# ------------------------------------------------------------------------------------------------ a


def test_a_pods_start_with_their_cgroups(node: KubeNode, e2e_report: Report) -> None:
    started = time.monotonic()
    for manifest in (lsr_pinned(), LS_WEB, BE_BURN):
        node.create_pod(manifest)
    created_seconds = time.monotonic() - started
    batch_mem = 256 * MiB
    # (pod, container or "" for the pod cgroup) -> what must be in the kernel.  BE: batchresource from the
    # batch resources (kubelet gave the BestEffort pod shares 2 and no limits); LS/LSR: kubelet's values,
    # the LS container on the shared pool, the LSR container on its bound CPU with no CFS quota.
    expected: dict[tuple[str, str], dict[str, Any]] = {
        ("be-burn", ""): {"cpu_shares": shares_as_kernel(512), "cfs_quota_us": 100_000, "memory_limit": batch_mem},
        ("be-burn", "burn"): {"cpu_shares": shares_as_kernel(512), "cfs_quota_us": 100_000,
                              "memory_limit": batch_mem},
        ("ls-web", ""): {"cpu_shares": shares_as_kernel(204), "cfs_quota_us": 100_000, "memory_limit": 128 * MiB},
        ("ls-web", "web"): {"cpu_shares": shares_as_kernel(204), "cfs_quota_us": 100_000,
                            "memory_limit": 128 * MiB, "cpuset": shared_pool()},
        ("lsr-pinned", ""): {"cpu_shares": shares_as_kernel(1024), "cfs_quota_us": -1, "memory_limit": 64 * MiB},
        ("lsr-pinned", "pinned"): {"cpu_shares": shares_as_kernel(1024), "cfs_quota_us": -1,
                                   "memory_limit": 64 * MiB, "cpuset": str(pinned_cpu())},
    }

    def actual() -> dict[tuple[str, str], dict[str, Any]]:
        seen = {}
        be_group = cfs_quota(node.be_dir)[0]
        for (pod, name), want in expected.items():
            rel = node.container_dir(pod, name) if name else node.pod_dir(pod)
            values = cgroup_values(rel)
            if "cpuset" in want:
                values["cpuset"] = cpuset_cpus(rel)
            if pod.startswith("be-") and be_group > 0 and 0 < values["cfs_quota_us"] <= be_group:
                # A busy host: cpusuppress limits the BE group already, and on v1 the batch quota below it is
                # fitted under the group's (the kernel refuses a child's quota above its parent's).
                values["cfs_quota_us"] = want["cfs_quota_us"] if not unified_cgroups() else values["cfs_quota_us"]
            seen[(pod, name)] = values
        return seen

    began = time.monotonic()
    try:
        wait_for("every pod and container cgroup at its expected values",
                 lambda: actual() == expected, LOAD_SECONDS, node.procs)
    except AssertionError:
        diff = {f"{p}/{c or '(pod)'}": {"want": w, "got": actual()[(p, c)]} for (p, c), w in expected.items()
                if actual()[(p, c)] != w}
        raise AssertionError(f"cgroups differ from the table: {json.dumps(diff, indent=1)}") from None
    e2e_report.record("a_pods_start", node.variant, pods_created_seconds=round(created_seconds, 2),
                      cgroups_converged_seconds=round(time.monotonic() - began, 2),
                      cgroups={f"{p}/{c or '(pod)'}": v for (p, c), v in expected.items()})


# ------------------------------------------------------------------------------------------------ e


def test_e_config_edit_is_in_force_within_2s(node: KubeNode, e2e_report: Report) -> None:
    def threshold() -> int | None:
        return (node.view.slo()["spec"].get("resourceUsedThresholdWithBE") or {}).get("cpuSuppressThresholdPercent")

    figures = []
    for value in (60, 65):
        began = time.monotonic()
        node.set_thresholds(cpuSuppressThresholdPercent=value)
        wait_for(f"cpuSuppressThresholdPercent {value} on the node", lambda v=value: threshold() == v, 10,
                 node.procs)
        figures.append(round(time.monotonic() - began, 3))
    e2e_report.record("e_config_propagation", node.variant, propagation_seconds=figures)
    assert max(figures) <= 2.0, f"a ConfigMap edit took {max(figures)} s to reach the node (budget 2 s)"


# ------------------------------------------------------------------------------------------------ d


def _batch(node: KubeNode) -> tuple[int, int] | None:
    allocatable = node.node_allocatable()
    if BATCH_CPU not in allocatable or BATCH_MEMORY not in allocatable:
        return None
    return int(allocatable[BATCH_CPU]), int(allocatable[BATCH_MEMORY])


def _metric_time(node: KubeNode) -> str:
    metric = node.apiserver.get("nodemetrics", "e2e-node") or {}
    return str((metric.get("status") or {}).get("updateTime", ""))


def test_d_nodemetric_sets_batch_allocatable(node: KubeNode, e2e_report: Report) -> None:
    first = wait_for("batch-cpu and batch-memory on the Node", lambda: _batch(node), 3 * REPORT_INTERVAL_SECONDS,
                     node.procs)
    # The LS step: usage (a core and ~768 MiB) far above the pod's requests (500m, 64Mi).  The companion
    # records a new pod's request from its pod watch and counts it at the node's next calculation (the next
    # NodeMetric report, within one report interval); the usage reaches the Node with a later NodeMetric, which
    # must come within one report interval and move the Node in the same pass.
    load_memory = min(node.kubepods_memory_limit // 4, 768 * MiB)
    before = _batch(node)
    assert before is not None
    metric_before = _metric_time(node)
    began = time.monotonic()
    # On a busy host the system usage the companion saw can leave no batch CPU at all: a request cannot lower
    # 0, so the request step is only checked where there is batch CPU to take (the usage step below holds on
    # memory either way).
    cpu_at_floor = before[0] == 0
    node.create_pod(ls_load("ls-load-d", load_memory))
    try:
        by_request = before if cpu_at_floor else wait_for(
            "the LS pod's request counted", lambda: (b := _batch(node)) is not None and b[0] < before[0] and b,
            REPORT_INTERVAL_SECONDS + 10, node.procs)
    except AssertionError:
        node.delete_pod("ls-load-d")  # a busy LS pod left behind would fail the scenarios after this one
        raise
    stamps = [metric_before]

    def lowered_by_usage() -> tuple[int, int] | None:
        stamp = _metric_time(node)
        if stamp != stamps[-1]:
            stamps.append(stamp)
        now = _batch(node)
        if now is not None and now[0] <= by_request[0] and now[1] <= by_request[1] - load_memory // 2:
            return now
        return None

    try:
        after = wait_for("batch allocatable lowered by the LS usage", lowered_by_usage,
                         2 * REPORT_INTERVAL_SECONDS + 10, node.procs)
    except AssertionError as exc:
        node.delete_pod("ls-load-d")  # a busy LS pod left behind would fail the scenarios after this one
        metric = node.apiserver.get("nodemetrics", "e2e-node") or {}
        raise AssertionError(f"{exc}\nbefore {before}, after the request {by_request}, now {_batch(node)}; "
                             f"load {load_memory} bytes; NodeMetric: {json.dumps(metric.get('status'))[:3000]}"
                             ) from None
    lowered_wall, lowered_at = time.time(), time.monotonic()
    # The companion writes the Node, then the NodeMetric object of the same report: its updateTime is when
    # koordlet built the report that moved the Node (the one before is a whole interval older).
    carried = wait_for("the NodeMetric of that report",
                       lambda: (t := _metric_time(node)) and lowered_wall - REPORT_INTERVAL_SECONDS / 2
                       <= _rfc3339(t) <= lowered_wall + 1 and t, 10, node.procs)
    built_at = _rfc3339(carried)
    node.delete_pod("ls-load-d")
    e2e_report.record("d_batch_allocatable", node.variant, first_batch_cpu_milli=first[0],
                      first_batch_memory_bytes=first[1],
                      before_load={"batch_cpu_milli": before[0], "batch_memory_bytes": before[1]},
                      after_request={"batch_cpu_milli": by_request[0], "batch_memory_bytes": by_request[1]},
                      after_usage={"batch_cpu_milli": after[0], "batch_memory_bytes": after[1]},
                      batch_cpu_at_floor_before_load=cpu_at_floor,
                      load_memory_bytes=load_memory, load_to_lowered_seconds=round(lowered_at - began, 2),
                      nodemetric_built_to_node_seconds=round(lowered_wall - built_at, 2),
                      reports_after_load=len({*stamps, carried} - {metric_before}),
                      report_interval_seconds=REPORT_INTERVAL_SECONDS, aggregate_seconds=AGGREGATE_SECONDS)
    # updateTime has whole seconds: the latency is known to within one.
    assert lowered_wall - built_at <= REPORT_INTERVAL_SECONDS, (
        f"the Node changed {lowered_wall - built_at:.1f} s after its NodeMetric was built "
        f"(interval {REPORT_INTERVAL_SECONDS} s)")
    assert lowered_at - began <= 2 * REPORT_INTERVAL_SECONDS + 5, "the usage took more than two reports"


def _rfc3339(text: str) -> float:
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


# ------------------------------------------------------------------------------------------------ b


def _suppress(node: KubeNode) -> dict[str, Any] | None:
    decision = node.view.last_decision("cpusuppress")
    if decision is None or "quota_us" not in decision["numbers"]:
        return None
    return decision


def test_b_ls_load_step_cuts_be_within_one_interval(node: KubeNode, e2e_report: Report) -> None:
    # Steady before the step: LS idle in koordlet's own figures, and BE's quota no longer stepping up.
    steady = wait_for("a steady cfsQuota round with LS idle",
                      lambda: (d := _suppress(node)) is not None and d["numbers"]["ls_used_cores"] < 0.25
                      and not d["numbers"]["stepped"] and d, 2 * LOAD_SECONDS, node.procs)
    quota_before = steady["numbers"]["quota_us"]
    be_before = measure_cores(node.pod_dir("be-burn"), 3.0)
    began = time.time()
    node.create_pod(ls_load("ls-load-b"))
    loaded_at = time.time()

    def first_loaded_round() -> dict[str, Any] | None:
        for decision in node.view.decisions("cpusuppress"):
            if decision["at"] > loaded_at and decision["numbers"].get("ls_used_cores", 0) >= 0.4:
                return decision
        return None

    try:
        cut = wait_for("the first suppress round that sees the LS load", first_loaded_round, LOAD_SECONDS,
                       node.procs)
        numbers = cut["numbers"]
        # Cut: lower than before, or already at the floor the suppression wants to go under (a busy host's
        # system usage can have pushed BE there before the step).
        at_floor = numbers["quota_us"] == quota_before and numbers["suppress_cores"] * PERIOD_US <= quota_before
        # Or the system's own load had already squeezed BE to within the strategy's minimum step of where the LS
        # load puts it: the round keeps the quota (a smaller change is not worth a write).
        within_step = (cut["action"] == "none" and numbers.get("skipped") is True
                       and numbers["quota_us"] <= quota_before
                       and abs(numbers["quota_us"] - numbers["target_quota_us"]) < numbers["min_delta_us"])
        assert within_step or (cut["action"] == "suppress" and (numbers["quota_us"] < quota_before or at_floor)), (
            f"the first round that saw LS at {numbers['ls_used_cores']:.2f} cores did not cut BE: {cut}")
        target_cores = numbers["quota_us"] / PERIOD_US
        wait_for("BE's quota in the kernel", lambda: cfs_quota(node.be_dir)[0] <= numbers["quota_us"], 10,
                 node.procs)
        quota_now = cfs_quota(node.be_dir)[0]
        be_cut = measure_cores(node.pod_dir("be-burn"), 3.0)
        limit_cores = quota_now / PERIOD_US
    finally:
        node.delete_pod("ls-load-b")  # a busy LS pod left behind would starve the scenarios after this one
    stopped = time.time()
    regrown = wait_for("BE's quota growing back after LS stopped",
                       lambda: (d := _suppress(node)) is not None and d["at"] > stopped
                       and d["numbers"]["quota_us"] >= 0.9 * quota_before and d, 2 * LOAD_SECONDS, node.procs)
    e2e_report.record("b_load_step", node.variant, quota_before_us=quota_before, be_cores_before=round(be_before, 3),
                      ls_cores_seen=round(cut["numbers"]["ls_used_cores"], 3), quota_cut_us=cut["numbers"]["quota_us"],
                      target_cores=round(target_cores, 3), be_cores_after_cut=round(be_cut, 3),
                      reaction_seconds_from_pod_start=round(cut["at"] - began, 2),
                      regrow_seconds=round(regrown["at"] - stopped, 2), quota_regrown_us=regrown["numbers"]["quota_us"],
                      suppress_interval_seconds=SUPPRESS_INTERVAL_SECONDS)
    # The kernel holds BE to its quota: what it used is within the quota plus measurement slack.
    assert be_cut <= limit_cores * 1.15 + 0.05, f"BE used {be_cut:.2f} cores under a {limit_cores:.2f}-core quota"


# ------------------------------------------------------------------------------------------------ c


def _memory_decision(node: KubeNode) -> dict[str, Any] | None:
    decision = node.view.last_decision("memoryevict")
    return decision if decision is not None and "usage_percent" in decision["numbers"] else None


def test_c_memory_pressure_evicts_be_through_the_companion(node: KubeNode, e2e_report: Report) -> None:
    limit = node.kubepods_memory_limit
    big = limit // 5 // MiB * MiB
    for name, priority, held, labels in (("be-mem-pdb", 5000, 32 * MiB, {"app": "protected"}),
                                         ("be-mem", 5500, big, {})):
        node.create_pod(pod_manifest(name, [container("hold", hold_memory(held),
                                                      requests={BATCH_CPU: "100", BATCH_MEMORY: "64Mi"},
                                                      limits={BATCH_CPU: "500", BATCH_MEMORY: str(held + 128 * MiB)})],
                                     qos="BE", priority_class="koord-batch", priority=priority, labels=labels))
    node.apiserver.seed({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                         "metadata": {"name": "protected", "namespace": "default"},
                         "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "protected"}}}})
    measured = wait_for("koordlet measuring the memory of the BE pods",
                        lambda: (d := _memory_decision(node)) and d["numbers"]["used_bytes"] >= big + 16 * MiB and d,
                        LOAD_SECONDS, node.procs)
    usage_pct = measured["numbers"]["usage_percent"]
    be_mem_dir = node.pod_dir("be-mem")
    assert node.view.series_of_pod("be-mem"), "koordlet exports no series of be-mem to watch disappear"
    # Pressure: the threshold just under what koordlet measures; evicting be-mem brings usage well below it.
    threshold = max(int(usage_pct) - 4, 3)
    began = time.time()
    node.set_thresholds(memoryEvictThresholdPercent=threshold)
    wait_for("be-mem evicted through the API", lambda: node.apiserver.get("pods", "be-mem", "default") is None,
             LOAD_SECONDS, node.procs)
    evicted_at = time.time()
    wait_for("be-mem killed and removed by the kubelet", lambda: "be-mem" in node.deleted_at, LOAD_SECONDS,
             node.procs)
    wait_for("be-mem's cgroups gone", lambda: not cgroup_exists(be_mem_dir), 30, node.procs)
    wait_for("be-mem's series gone from /metrics", lambda: not node.view.series_of_pod("be-mem"), 30, node.procs)
    series_gone_at = time.time()
    assert node.view.eviction_detail("be-mem"), "the eviction is recorded by pod for five minutes"
    # The episode is over once a later round finds usage below the threshold.
    calm = wait_for("a memoryevict round below the threshold after the eviction",
                    lambda: (d := _memory_decision(node)) and d["at"] > evicted_at and d["action"] == "none" and d,
                    LOAD_SECONDS, node.procs)
    evictions = node.apiserver.evictions
    granted = [e for e in evictions if not e["blocked"]]
    refused = [e for e in evictions if e["blocked"]]
    node.set_thresholds()
    e2e_report.record("c_memory_eviction", node.variant, kubepods_limit_bytes=limit,
                      usage_percent_before=usage_pct, threshold_percent=threshold,
                      usage_percent_after=calm["numbers"]["usage_percent"],
                      eviction_latency_seconds=round(evicted_at - began, 2),
                      pod_removed_seconds=round(node.deleted_at["be-mem"] - began, 2),
                      series_gone_seconds=round(series_gone_at - began, 2),
                      granted=[e["name"] for e in granted], refused_by_pdb=sorted({e["name"] for e in refused}))
    assert [e["name"] for e in granted] == ["be-mem"], f"one eviction per episode, of be-mem: {evictions}"
    assert all(e["name"] == "be-mem-pdb" and e["budget"] == "protected" for e in refused), evictions
    assert node.has_pod("be-mem-pdb") and node.apiserver.get("pods", "be-mem-pdb", "default") is not None
    for ls in ("ls-web", "lsr-pinned"):
        assert node.has_pod(ls), f"LS pod {ls} was touched"
    assert not [e for e in evictions if e["name"].startswith("ls")], evictions


@pytest.fixture(autouse=True)
def _components_alive(node: KubeNode) -> Any:
    yield
    node.check_alive()
