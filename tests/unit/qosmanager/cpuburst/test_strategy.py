"""The cpuburst strategy over fake v1 and v2 trees: what lands in the pod and container cgroups, in which
order, and the decision's numbers.

Worked example used throughout: an 8-CPU node; LS pod ``ls`` with one container ``main`` limited to 2
cores, so its base quota is 2 x 100000 = 200000 us, the ceiling at cfsQuotaBurstPercent 300% is 600000
us, and the burst at cpuBurstPercent 1000% is 2000000 us, capped at the quota.  Node usage 2.0 cores is
a 25% share pool (idle below 45%, cooling from 45%, overload from 50%)."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.apis.pod import Resources
from koordlet.config.types import QoSManagerConfig
from koordlet.metriccache import names
from koordlet.metriccache.cache import labels_of
from koordlet.qosmanager.framework import Decision, Options
from koordlet.qosmanager.plugins import cpuburst
from koordlet.qosmanager.plugins.cpuburst.podconfig import ANNOTATION_CPU_BURST
from koordlet.qosmanager.plugins.cpuburst.strategy import CPUBurst
from koordlet.resourceexecutor import CgroupUpdate, Outcome, Result
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.resources import CPU_CFS_BURST, CPU_CFS_QUOTA
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_node, make_options, make_pod, put_usage

T0 = 1_700_000_000.0
LS = "kubepods/burstable/poduid-ls"
MAIN = f"{LS}/ls-main"


@dataclass
class Recorder:
    scaled: dict[str, float] = field(default_factory=dict)
    forgotten: list[tuple[str, str, str]] = field(default_factory=list)

    def scaled_cfs_quota(self, pod_namespace: str, pod_name: str, container: str, quota_us: float) -> None:
        self.scaled[container] = quota_us

    def forget_container(self, pod_namespace: str, pod_name: str, container: str) -> None:
        self.scaled.pop(container, None)
        self.forgotten.append((pod_namespace, pod_name, container))

    def __getattr__(self, name: str) -> Any:
        return lambda *args: None


@dataclass
class RecordingExecutor:
    """Passes batches to the real executor and keeps (resource, dir, value) of each, in order."""

    inner: Any
    batches: list[list[tuple[str, str, object]]] = field(default_factory=list)
    written: list[list[tuple[str, str, object]]] = field(default_factory=list)
    """Per batch, the updates the executor wrote (not skipped as unchanged, not refused)."""

    def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
        batch = list(updates)
        self.batches.append([(u.key, u.rel_dir, u.value) for u in batch])
        results: list[Result] = self.inner.apply(batch)
        self.written.append([(r.update.key, r.update.rel_dir, r.update.value) for r in results
                             if r.outcome is Outcome.WRITTEN])
        return results

    def forget(self, path: str | None = None) -> None:
        self.inner.forget(path)

    @property
    def last(self) -> list[tuple[str, str, object]]:
        return self.batches[-1] if self.batches else []


def ls_pod(name: str = "ls", qos: str = "LS", *, containers: Sequence[str] = ("main",), limit_milli: int = 2000,
           annotations: Mapping[str, str] | None = None) -> PodMeta:
    return make_pod(name, qos, containers=containers, annotations=annotations,
                    requests=Resources(cpu_milli=limit_milli), limits=Resources(cpu_milli=limit_milli))


@dataclass
class World:
    host: FakeHost
    options: Options
    informer: FakeInformer
    clock: FakeClock
    metrics: Recorder
    executor: RecordingExecutor
    strategy: CPUBurst

    def quota(self, rel: str = MAIN) -> int:
        return int(self.options.reader.read("cpu_cfs_quota", rel))

    def burst(self, rel: str = MAIN) -> int:
        return int(self.options.reader.read("cpu_cfs_burst", rel))

    def set_quota(self, rel: str, quota: int) -> None:
        self.host.write_cgroup(rel, CPU_CFS_QUOTA, quota_text(self.host, quota))

    def run(self, slo_spec: NodeSLOSpec | None = None, *, enabled: bool = True, node: float | None = 2.0,
            pods: Mapping[str, float] | None = None, throttled: Mapping[str, float] | None = None,
            usage: Mapping[str, float] | None = None, advance: float = 1.0) -> Decision:
        """One round ``advance`` seconds after the last, with fresh samples."""
        self.clock.advance(advance)
        put_usage(self.options, node_cpu=node, pod_cpu=pods, container_cpu=usage)
        for cid, ratio in (throttled or {}).items():
            self.options.cache.append(names.CONTAINER_CPU_THROTTLED, labels_of(container=cid), self.clock.now, ratio)
        decision = self.strategy.run_once(slo_spec if slo_spec is not None else slo(), enabled=enabled)
        kernel_normalise(self.host)
        return decision


def slo(policy: str = "auto", **fields: Any) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"cpuBurstStrategy": {"policy": policy, **fields}}))


def quota_text(host: FakeHost, quota: int) -> str:
    if host.mode == "v2":
        return f"{'max' if quota == -1 else quota} 100000\n"
    return f"{quota}\n"


def kernel_normalise(host: FakeHost) -> None:
    """v2 keeps the period when only the quota is written; the fake stores what was written, so do what
    the kernel does."""
    if host.mode != "v2":
        return
    for path in host.cgroup_root.rglob("cpu.max"):
        text = path.read_text().split()
        if len(text) == 1:
            path.write_text(f"{text[0]} 100000\n")


def make_world(host: FakeHost, tmp_path: Path, pods: Sequence[PodMeta] | None = None, *, rng: float = 0.0,
               probes: Mapping[str, bool] | None = None, gates: Mapping[str, bool] | None = None,
               refresh: float = 60.0) -> World:
    """``refresh``: seconds a quota read or written is trusted without reading it again (0: every
    round, as Koordinator)."""
    pod_list = list(pods) if pods is not None else [ls_pod()]
    informer = FakeInformer(pod_list=pod_list, node_info=make_node(8))
    metrics = Recorder()
    clock = FakeClock(T0)
    options = make_options(host, tmp_path, informer, clock=clock, metrics=metrics, probes=probes, gates=gates,
                           config=QoSManagerConfig(resource_force_update_seconds=refresh))
    executor = RecordingExecutor(options.executor)
    options = dataclasses.replace(options, executor=executor)
    for meta in pod_list:
        host.mkdir_cgroup(meta.cgroup_dir)
        limits = [c.limits.cpu_milli or 0 for c in meta.pod.containers]
        pod_quota = sum(limits) * 100 if all(limits) else -1
        host.write_cgroup(meta.cgroup_dir, CPU_CFS_QUOTA, quota_text(host, pod_quota))
        for cmeta, spec in zip(meta.containers, meta.pod.containers, strict=True):
            host.mkdir_cgroup(cmeta.cgroup_dir)
            limit = spec.limits.cpu_milli or 0
            host.write_cgroup(cmeta.cgroup_dir, CPU_CFS_QUOTA, quota_text(host, limit * 100 if limit else -1))
    world = World(host, options, informer, clock, metrics, executor, CPUBurst(options, rng=lambda: rng))
    return world


def without_burst(host: FakeHost) -> None:
    """A kernel older than 5.14: no cpu.cfs_burst_us / cpu.max.burst anywhere."""
    host.set_mode(host.mode, features=("cpu_idle",))


# ---------------------------------------------------------------------------------------------- basics


def test_registered_name_and_factory(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    strategy = cpuburst.new(w.options)
    assert cpuburst.NAME == strategy.name == "cpuburst"
    assert strategy.interval() == 1.0


@pytest.mark.parametrize(
    ("gates", "policy", "annotation", "enabled"),
    [
        ({}, "auto", None, True),  # CPUBurst is on by default
        ({"CPUBurst": False}, "auto", None, False),
        ({}, "none", None, False),
        ({}, "cpuBurstOnly", None, True),
        ({}, "cfsQuotaBurstOnly", None, True),
        # Koordinator's per-pod opt-in works while the node says none
        ({}, "none", '{"policy": "auto"}', True),
        ({}, "none", '{"cpuBurstPercent": 200}', False),  # inherits the node's none
        ({}, "none", "{garbage", False),
        ({"CPUBurst": False}, "none", '{"policy": "auto"}', False),
    ],
)
def test_enabled(fake_cgroup_host: FakeHost, tmp_path: Path, gates: dict[str, bool], policy: str,
                 annotation: str | None, enabled: bool) -> None:
    annotations = {ANNOTATION_CPU_BURST: annotation} if annotation else None
    w = make_world(fake_cgroup_host, tmp_path, [ls_pod(annotations=annotations)], gates=gates)
    assert w.strategy.enabled(slo(policy)) is enabled


# ---------------------------------------------------------------------------------------------- burst


@pytest.mark.parametrize(
    ("containers", "percent", "container_burst", "pod_burst"),
    [
        (("main",), None, 200_000, 200_000),  # 2 x 1000% x 100000 = 2000000, capped at the quota 200000
        (("main",), 50, 100_000, 100_000),  # 2 x 50% x 100000
        (("a", "b"), 50, 100_000, 200_000),  # the pod gets the sum
        (("a", "b"), 1000, 200_000, 400_000),  # each capped at 200000; the pod quota is 400000
    ],
)
def test_cpu_burst_only_sets_burst(fake_cgroup_host: FakeHost, tmp_path: Path, containers: tuple[str, ...],
                                   percent: int | None, container_burst: int, pod_burst: int) -> None:
    w = make_world(fake_cgroup_host, tmp_path, [ls_pod(containers=containers)])
    fields = {} if percent is None else {"cpuBurstPercent": percent}
    decision = w.run(slo("cpuBurstOnly", **fields), throttled={f"ls-{c}": 0.5 for c in containers})
    for c in containers:
        assert w.burst(f"{LS}/ls-{c}") == container_burst
        assert w.quota(f"{LS}/ls-{c}") == 200_000  # no quota scaling under cpuBurstOnly, throttled or not
    assert w.burst(LS) == pod_burst
    assert w.quota(LS) == 200_000 * len(containers)
    assert decision.action == "burst"
    assert decision.numbers["bursts_set"] == len(containers)
    n = len(containers)
    assert decision.summary == f"share pool 25% (idle): {n} burst{'s' if n > 1 else ''} set"
    # the next round changes nothing (and the executor skips the unchanged writes)
    again = w.run(slo("cpuBurstOnly", **fields))
    assert (again.action, again.summary) == ("none", "share pool 25% (idle): no change")


def test_burst_files_hold_the_value_in_both_versions(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.run(slo("cpuBurstOnly", cpuBurstPercent=50))
    name = "cpu.max.burst" if fake_cgroup_host.mode == "v2" else "cpu.cfs_burst_us"
    assert fake_cgroup_host.cgroup_path(MAIN, CPU_CFS_BURST).name == name
    assert fake_cgroup_host.read_cgroup(MAIN, CPU_CFS_BURST).strip() == "100000"


# ---------------------------------------------------------------------------------------------- quota


def test_quota_steps_up_to_the_ceiling_while_throttled(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    seen = []
    for _ in range(8):
        w.run(slo("cfsQuotaBurstOnly"), throttled={"ls-main": 0.2})
        seen.append((w.quota(), w.quota(LS), w.burst()))
    # x1.2 per round, truncated: 497664 x 1.2 = 597196.8; then 716635 is clamped to 600000
    quotas = [240_000, 288_000, 345_600, 414_720, 497_664, 597_196, 600_000, 600_000]
    assert seen == [(q, q, 0) for q in quotas]  # the pod follows; cfsQuotaBurstOnly keeps the burst at 0
    assert w.metrics.scaled == {"ls-main": 600_000.0}


def test_auto_scales_quota_and_keeps_burst_within_it(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    up = w.run(throttled={"ls-main": 0.2})
    assert (w.quota(), w.burst(), w.quota(LS), w.burst(LS)) == (240_000, 240_000, 240_000, 240_000)
    assert up.action == "scale"
    assert up.summary == "share pool 25% (idle): 1 container scaled up, 1 burst set"
    assert up.numbers["changes"] == [{
        "pod": "default/ls", "container": "main", "container_id": "ls-main", "base_us": 200_000,
        "current_us": 200_000, "target_us": 240_000, "burst_us": 240_000, "throttled_ratio": 0.2,
        "operation": "up", "final_operation": "up", "ceil_us": 600_000}]
    # growing: the pod's quota first, then the container's, then the bursts
    assert w.executor.last == [("cpu_cfs_quota", LS, 240_000), ("cpu_cfs_quota", MAIN, 240_000),
                               ("cpu_cfs_burst", MAIN, 240_000), ("cpu_cfs_burst", LS, 240_000)]
    w.run(throttled={"ls-main": 0.2})
    assert (w.quota(), w.burst()) == (288_000, 288_000)
    # overload (4.4 of 8 cores = 55%): 288000 x 0.8 = 230400
    down = w.run(node=4.4, throttled={"ls-main": 0.2}, advance=10)
    assert (w.quota(), w.burst(), w.quota(LS), w.burst(LS)) == (230_400, 230_400, 230_400, 230_400)
    assert down.summary == "share pool 55% (overload): 1 container scaled down, 1 burst set"
    # shrinking: each burst before its quota, the pod's quota last
    assert w.executor.last == [("cpu_cfs_burst", MAIN, 230_400), ("cpu_cfs_quota", MAIN, 230_400),
                               ("cpu_cfs_burst", LS, 230_400), ("cpu_cfs_quota", LS, 230_400)]
    # 184320 is below the base: clamped to 200000, and the metric series goes
    w.run(node=4.4, advance=10)
    assert (w.quota(), w.burst(), w.quota(LS)) == (200_000, 200_000, 200_000)
    assert w.metrics.scaled == {}
    assert w.metrics.forgotten == [("default", "ls", "ls-main")]


@pytest.mark.parametrize(
    ("node", "throttled", "threshold", "extra", "state", "percent", "quota"),
    [
        (2.0, 0.3, None, False, "idle", 25.0, 345_600),  # 288000 x 1.2
        (2.0, 0.0, None, False, "idle", 25.0, 288_000),  # not throttled: remain
        (2.0, None, None, False, "idle", 25.0, 288_000),  # no throttle sample: remain
        (3.6, 0.3, None, False, "cooling", 45.0, 288_000),  # 45% = 0.9 x 50%: no scale up
        (3.96, 0.3, None, False, "cooling", 49.5, 288_000),
        (3.56, 0.3, None, False, "idle", 44.5, 345_600),
        (4.0, 0.3, None, False, "overload", 50.0, 230_400),  # >= 50%: down even when throttled
        (4.0, 0.0, None, False, "overload", 50.0, 230_400),
        (None, 0.3, None, False, "unknown", None, 288_000),  # no node usage: no scale up
        (5.0, 0.3, 80, False, "idle", 62.5, 345_600),  # threshold 80%: cooling only from 72%
        (5.8, 0.3, 80, False, "cooling", 72.5, 288_000),
        # an LSR pod requesting 4 cores leaves 4 in the pool; node 2.5 - LSR 0.5 - BE 0.3 = 1.7: 42.5% idle
        (2.5, 0.3, None, True, "idle", 42.5, 345_600),
        # node 2.9 - 0.5 - 0.3 = 2.1 of 4 cores: 52.5%, overload (without the LSR pod: 32.5%, idle)
        (2.9, 0.3, None, True, "overload", 52.5, 230_400),
    ],
)
def test_share_pool_state_decides_the_step(fake_cgroup_host: FakeHost, tmp_path: Path, node: float | None,
                                           throttled: float | None, threshold: int | None, extra: bool,
                                           state: str, percent: float | None, quota: int) -> None:
    pods = [ls_pod()]
    if extra:
        pods += [ls_pod("lsr", "LSR", limit_milli=4000), ls_pod("be", "BE", limit_milli=1000)]
    w = make_world(fake_cgroup_host, tmp_path, pods)
    w.set_quota(MAIN, 288_000)
    w.set_quota(LS, 288_000)
    fields = {} if threshold is None else {"sharePoolThresholdPercent": threshold}
    decision = w.run(slo("auto", **fields), node=node, pods={"uid-lsr": 0.5, "uid-be": 0.3} if extra else None,
                     throttled=None if throttled is None else {"ls-main": throttled})
    assert decision.numbers["node_state"] == state
    assert decision.numbers["share_pool_usage_percent"] == percent
    assert decision.numbers["share_pool_total_cores"] == (4.0 if extra else 8.0)
    assert (w.quota(), w.quota(LS)) == (quota, quota)
    if state == "unknown":
        # the burst follows the quota it finds: min(2000000, 288000)
        assert decision.summary == "share pool unknown (no fresh node CPU usage): 1 burst set"


def test_cooling_holds_a_quota_that_overload_brought_down(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """Hysteresis: after an overload, the pool must fall below 0.9 x threshold before anything grows."""
    w = make_world(fake_cgroup_host, tmp_path)
    steps = [(2.0, "idle", 240_000), (3.8, "cooling", 240_000), (4.2, "overload", 200_000),
             (3.8, "cooling", 200_000), (3.7, "cooling", 200_000), (3.5, "idle", 240_000)]
    for node, state, quota in steps:
        # 10 s apart, so the 5 s share-pool average sees only this round's sample
        decision = w.run(node=node, throttled={"ls-main": 0.4}, advance=10)
        assert (decision.numbers["node_state"], w.quota()) == (state, quota), node


def test_pod_quota_keeps_its_slack_and_follows_several_containers(fake_cgroup_host: FakeHost,
                                                                  tmp_path: Path) -> None:
    web = ls_pod("web", containers=("a", "b"), limit_milli=1000)  # bases 100000 each
    w = make_world(fake_cgroup_host, tmp_path, [web], refresh=0)
    pod, a, b = "kubepods/burstable/poduid-web", "kubepods/burstable/poduid-web/web-a", \
        "kubepods/burstable/poduid-web/web-b"
    w.set_quota(pod, 250_000)  # pod overhead: 50000 beyond its containers
    w.run(slo("cfsQuotaBurstOnly"), throttled={"web-a": 0.5, "web-b": 0.0})
    assert (w.quota(a), w.quota(b), w.quota(pod)) == (120_000, 100_000, 270_000)
    w.run(slo("cfsQuotaBurstOnly"), throttled={"web-a": 0.5, "web-b": 0.5})
    assert (w.quota(a), w.quota(b), w.quota(pod)) == (144_000, 120_000, 314_000)
    # a pod quota rewritten behind our back is repaired from the sum (the executor is told to forget
    # its cached write), not compounded
    w.set_quota(pod, 200_000)
    w.run(slo("cfsQuotaBurstOnly"), advance=10)
    assert w.quota(pod) == 314_000


def test_quota_reset_behind_our_back_is_written_again(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, refresh=0)
    w.run(throttled={"ls-main": 0.3})
    assert w.quota() == 240_000
    w.set_quota(MAIN, 200_000)  # kubelet applied the pod's spec again
    w.run(throttled={"ls-main": 0.3})
    # 240000 again, within the executor's 60 s force-update window: written, not skipped as unchanged
    assert (w.quota(), w.quota(LS)) == (240_000, 240_000)


def test_known_values_spare_reads_and_writes_until_the_refresh(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """A quota read or written is trusted for the refresh interval (the executor's force-update
    interval); steady rounds then neither read nor write anything."""
    w = make_world(fake_cgroup_host, tmp_path)
    w.run(throttled={"ls-main": 0.3})
    assert w.quota() == 240_000
    w.set_quota(MAIN, 200_000)  # behind our back
    batches = len(w.executor.batches)
    for _ in range(3):
        decision = w.run(advance=10)  # not throttled: remain
        assert decision.summary == "share pool 25% (idle): no change"
    # No quota update (quotas unchanged, the one changed behind our back not read yet); the bursts go
    # to the executor, which skips them as unchanged.
    assert all(key == "cpu_cfs_burst" for batch in w.executor.batches[batches:] for key, _, _ in batch)
    assert w.executor.written[batches:] == [[]] * 3
    assert w.quota() == 200_000  # not read yet
    w.run(advance=30, throttled={"ls-main": 0.3})  # 60 s after the write: read again, 200000 x 1.2
    assert (w.quota(), w.burst(), w.quota(LS)) == (240_000, 240_000, 240_000)


# ---------------------------------------------------------------------------------------------- tokens


def test_token_bucket_exhaustion_and_refill(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    # period 10 s at 300%: capacity 2000; rng 0.1 -> starts at int(2000 x 0.05) = 100 tokens
    w = make_world(fake_cgroup_host, tmp_path, rng=0.1)
    spec = slo("cfsQuotaBurstOnly", cfsQuotaBurstPeriodSeconds=10)
    rounds = [
        (3.0, 100, 240_000),  # 150% of 2 cores; first round, nothing elapsed: 100 > 0 -> up
        (3.0, 50, 288_000),  # 1 s at 150% spends 50
        (3.0, 0, 230_400),  # empty: down although throttled and idle
        (3.0, -50, 200_000),  # 184320 -> the base
        (0.5, 25, 240_000),  # 25% saves 75 per second: positive again -> up
        (1.6, 25, 288_000),  # 80%: the bucket stands still
    ]
    for usage, tokens, quota in rounds:
        decision = w.run(spec, throttled={"ls-main": 0.3}, usage={"ls-main": usage})
        assert w.quota() == quota
        (change,) = decision.numbers["changes"]
        assert (change["tokens"], change["token_capacity"]) == (tokens, 2000)


def test_token_bucket_resets_when_its_config_changes_and_expires(fake_cgroup_host: FakeHost,
                                                                 tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, rng=0.1)
    w.run(slo("cfsQuotaBurstOnly", cfsQuotaBurstPeriodSeconds=10), usage={"ls-main": 3.0})
    assert w.strategy._buckets["ls-main"].capacity == 2000
    # 20 s at 150%: capacity 20 x 100 = 2000 too, so the bucket keeps its count (100 - 50 = 50)
    w.run(slo("cfsQuotaBurstOnly", cfsQuotaBurstPeriodSeconds=20, cfsQuotaBurstPercent=200),
          usage={"ls-main": 3.0})
    assert w.strategy._buckets["ls-main"].tokens == 50
    # 10 s at 200%: capacity 1000 -> a new bucket at int(1000 x 0.05) = 50
    w.run(slo("cfsQuotaBurstOnly", cfsQuotaBurstPeriodSeconds=10, cfsQuotaBurstPercent=200),
          usage={"ls-main": 3.0})
    bucket = w.strategy._buckets["ls-main"]
    assert (bucket.capacity, bucket.tokens, bucket.last_update) == (1000, 50, w.clock.now)
    # unlimited period: no bucket is used, and the old one is recycled 2 periods later
    w.run(slo("cfsQuotaBurstOnly"), advance=20)
    assert "ls-main" in w.strategy._buckets
    w.run(slo("cfsQuotaBurstOnly"), advance=1)
    assert w.strategy._buckets == {}


# ---------------------------------------------------------------------------------------------- pods


def test_annotation_opts_one_pod_in(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    pods = [ls_pod("opt", annotations={ANNOTATION_CPU_BURST: '{"policy": "auto", "cpuBurstPercent": 50}'}),
            ls_pod("plain")]
    w = make_world(fake_cgroup_host, tmp_path, pods)
    spec = slo("none")
    assert w.strategy.enabled(spec)
    decision = w.run(spec, throttled={"opt-main": 0.3, "plain-main": 0.3})
    opt, plain = "kubepods/burstable/poduid-opt", "kubepods/burstable/poduid-plain"
    # 2 x 50% x 100000 = 100000 (below the quota 240000)
    assert (w.quota(f"{opt}/opt-main"), w.burst(f"{opt}/opt-main"), w.quota(opt), w.burst(opt)) == (
        240_000, 100_000, 240_000, 100_000)
    assert (w.quota(f"{plain}/plain-main"), w.burst(f"{plain}/plain-main"), w.quota(plain)) == (200_000, 0, 200_000)
    assert decision.summary == "share pool 25% (idle): 1 container scaled up, 1 burst set"


def test_annotation_none_resets_a_scaled_pod(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, [ls_pod(annotations={ANNOTATION_CPU_BURST: '{"policy": "none"}'})])
    w.set_quota(MAIN, 288_000)
    w.set_quota(LS, 288_000)
    w.host.write_cgroup(MAIN, CPU_CFS_BURST, "288000\n")
    decision = w.run(throttled={"ls-main": 0.3})
    assert (w.quota(), w.burst(), w.quota(LS), w.burst(LS)) == (200_000, 0, 200_000, 0)
    assert decision.summary == "share pool 25% (idle): 1 container reset to the base quota"
    assert decision.numbers["reset"] == 1


def test_garbage_annotation_uses_the_node_strategy(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, [ls_pod(annotations={ANNOTATION_CPU_BURST: "{oops"})])
    decision = w.run(throttled={"ls-main": 0.3})
    assert (w.quota(), w.burst()) == (240_000, 240_000)  # the node's auto
    error = ("pod default/ls: koordinator.sh/cpuBurst is not JSON (Expecting property name enclosed in double "
             "quotes: line 1 column 2 (char 1)): '{oops'")
    assert decision.numbers["bad_annotations"] == [error]
    assert decision.summary == ("share pool 25% (idle): 1 container scaled up, 1 burst set; bad annotation "
                                f"ignored ({error})")


def test_lse_lsr_be_pods_are_left_alone(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    pods = [ls_pod("lse", "LSE"), ls_pod("lsr", "LSR"), ls_pod("be", "BE"), ls_pod("sys", "SYSTEM")]
    unlabelled = ls_pod("plain", "LSR")  # kube Guaranteed, no koordinator label: burstable, as in Koordinator
    pods.append(dataclasses.replace(unlabelled, pod=dataclasses.replace(unlabelled.pod, labels={})))
    w = make_world(fake_cgroup_host, tmp_path, pods)
    # the LSE and LSR pods take 4 of the 8 cores out of the pool: 1.0 of 4 is 25%, idle
    decision = w.run(node=1.0, throttled={f"{n}-main": 0.5 for n in ("lse", "lsr", "be", "sys", "plain")})
    touched = {rel for _, rel, _ in w.executor.last}
    assert touched == {"kubepods/burstable/poduid-sys", "kubepods/burstable/poduid-sys/sys-main",
                       "kubepods/poduid-plain", "kubepods/poduid-plain/plain-main"}
    for name, qos_dir in (("lse", "kubepods"), ("lsr", "kubepods"), ("be", "kubepods/besteffort")):
        assert w.quota(f"{qos_dir}/poduid-{name}/{name}-main") == 200_000
        assert w.burst(f"{qos_dir}/poduid-{name}/{name}-main") == 0
    assert w.quota("kubepods/poduid-plain/plain-main") == 240_000
    assert decision.numbers["scaled_up"] == 2


def test_containers_without_limit_or_id_are_skipped(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    nolimit = make_pod("nolimit", "LS", requests=Resources(cpu_milli=1000))
    pending = ls_pod("pending")
    pending = dataclasses.replace(pending, containers=tuple(dataclasses.replace(c, container_id="")
                                                            for c in pending.containers))
    w = make_world(fake_cgroup_host, tmp_path, [nolimit, pending, ls_pod()])
    decision = w.run(throttled={"ls-main": 0.3, "nolimit-main": 0.3, "pending-main": 0.3})
    assert {rel for _, rel, _ in w.executor.last} == {LS, MAIN}
    assert decision.numbers["containers"] == 1


# ---------------------------------------------------------------------------------------------- lifecycle


def test_gone_containers_are_forgotten(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    # period 60 s at 300%: capacity 12000; rng 0.5 starts each bucket at 3000
    w = make_world(fake_cgroup_host, tmp_path, [ls_pod(), ls_pod("web")], rng=0.5, refresh=0)
    spec = slo("auto", cfsQuotaBurstPeriodSeconds=60)
    w.run(spec, throttled={"ls-main": 0.3, "web-main": 0.3}, usage={"ls-main": 1.0, "web-main": 1.0})
    assert w.metrics.scaled == {"ls-main": 240_000.0, "web-main": 240_000.0}
    assert set(w.strategy._buckets) == {"ls-main", "web-main"}
    # the runtime removed web's container cgroup before the informer noticed: a skip, not an error
    shutil.rmtree(fake_cgroup_host.cgroup_path("kubepods/burstable/poduid-web/web-main", CPU_CFS_QUOTA).parent)
    decision = w.run(spec, advance=10)
    assert decision.numbers["gone"] == 1
    assert "failed_writes" not in decision.numbers and "read_problems" not in decision.numbers
    # ... then the pod leaves the list
    w.informer.pod_list = [p for p in w.informer.pod_list if p.pod.name != "web"]
    w.run(spec, advance=10)
    assert w.metrics.scaled == {"ls-main": 240_000.0}
    assert w.metrics.forgotten == [("default", "web", "web-main")]
    assert set(w.strategy._buckets) == {"ls-main"}
    known = w.strategy._known
    assert known.get(CPU_CFS_BURST, MAIN) == 240_000
    assert known.get(CPU_CFS_BURST, "kubepods/burstable/poduid-web/web-main") is None
    assert known.get(CPU_CFS_QUOTA, "kubepods/burstable/poduid-web") is None
    assert set(w.strategy._pod_slack) == {"uid-ls"}


def test_disable_restores_base_quota_and_zero_burst(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, [ls_pod(), ls_pod("idle")])
    w.run(throttled={"ls-main": 0.3})
    w.run(throttled={"ls-main": 0.3})
    idle = "kubepods/burstable/poduid-idle"
    assert (w.quota(), w.burst(), w.quota(LS), w.burst(LS)) == (288_000, 288_000, 288_000, 288_000)
    assert w.burst(f"{idle}/idle-main") == 200_000  # burst capped at the unscaled quota
    decision = w.run(slo("none"), enabled=False)
    assert (w.quota(), w.burst(), w.quota(LS), w.burst(LS)) == (200_000, 0, 200_000, 0)
    assert (w.quota(f"{idle}/idle-main"), w.burst(f"{idle}/idle-main"), w.burst(idle)) == (200_000, 0, 0)
    assert decision.action == "recover"
    assert decision.summary == "cpu burst off: 1 container back to the base quota, 2 bursts cleared"
    assert w.metrics.scaled == {}
    # bursts before quotas, the pod's quota after its container's
    assert w.executor.last[:4] == [("cpu_cfs_burst", MAIN, 0), ("cpu_cfs_quota", MAIN, 200_000),
                                   ("cpu_cfs_burst", LS, 0), ("cpu_cfs_quota", LS, 200_000)]
    assert w.strategy._buckets == {} and w.strategy._reported == {}


def test_disable_after_a_restart_undoes_what_the_files_show(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.set_quota(MAIN, 345_600)
    w.set_quota(LS, 345_600)
    w.host.write_cgroup(MAIN, CPU_CFS_BURST, "345600\n")
    w.host.write_cgroup(LS, CPU_CFS_BURST, "345600\n")
    decision = w.run(slo("none"), enabled=False)
    assert (w.quota(), w.burst(), w.quota(LS), w.burst(LS)) == (200_000, 0, 200_000, 0)
    assert decision.numbers == {"reset": 1, "bursts_cleared": 1, "gone": 0}


def test_disable_leaves_quotas_below_the_base_alone(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.set_quota(MAIN, 150_000)  # another owner's (cpu normalization lowers quotas)
    decision = w.run(slo("none"), enabled=False)
    assert w.quota() == 150_000
    assert w.executor.last == []
    assert decision.summary == "cpu burst off: 0 containers back to the base quota, 0 bursts cleared"


# ---------------------------------------------------------------------------------------------- kernels


def test_host_without_cfs_burst_scales_quota_and_says_so_once(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    without_burst(fake_cgroup_host)
    w = make_world(fake_cgroup_host, tmp_path)
    first = w.run(throttled={"ls-main": 0.3})
    assert (w.quota(), w.quota(LS)) == (240_000, 240_000)
    path = fake_cgroup_host.cgroup_path(MAIN, CPU_CFS_BURST)
    reason = f"{path}: file absent although its cgroup exists (kernel lacks it)"
    assert first.summary == ("share pool 25% (idle): 1 container scaled up; cfs burst unsupported, not set any "
                             f"more ({reason})")
    assert first.numbers["cfs_burst_unsupported"] == reason
    assert "failed_writes" not in first.numbers
    second = w.run(throttled={"ls-main": 0.3})
    assert w.quota() == 288_000
    assert second.summary == "share pool 25% (idle): 1 container scaled up"
    assert second.numbers["cfs_burst_unsupported"] == reason
    assert [r for r, _, _ in w.executor.last] == ["cpu_cfs_quota", "cpu_cfs_quota"]
    assert not path.exists()


def test_probe_saying_no_burst_skips_burst_from_the_start(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, probes={"cpu_cfs_burst": False})
    decision = w.run(slo("cpuBurstOnly"))
    assert w.executor.batches == []
    assert w.burst() == 0
    assert decision.summary.endswith("; cfs burst unsupported, not set any more (the cpu_cfs_burst probe found no "
                                     "cpu.cfs_burst_us / cpu.max.burst)")


def test_refused_burst_value_is_a_failure_not_unsupported(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    """EINVAL on a burst file that exists (the executor's UNSUPPORTED for that value) is reported as a
    failed write; burst stays in use for the other containers and later rounds."""
    w = make_world(fake_cgroup_host, tmp_path)

    class Refusing(RecordingExecutor):
        def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
            results = super().apply(updates)
            return [dataclasses.replace(r, outcome=Outcome.UNSUPPORTED, error="Invalid argument")
                    if r.update.key == "cpu_cfs_burst" and r.update.rel_dir == MAIN else r for r in results]

    refusing = Refusing(w.executor.inner)
    w.strategy.options = dataclasses.replace(w.options, executor=refusing)
    decision = w.run(slo("cpuBurstOnly"))
    assert "cfs_burst_unsupported" not in decision.numbers
    path = fake_cgroup_host.cgroup_path(MAIN, CPU_CFS_BURST)
    assert decision.numbers["failed_writes"] == [f"{path}: unsupported (Invalid argument)"]
    # the pod's burst was written, the container's refused: no container burst counts as set
    assert decision.summary == (f"share pool 25% (idle): no change; 1 of 2 writes failed (first: {path}: "
                                "unsupported (Invalid argument))")
    w.run(slo("cpuBurstOnly", cpuBurstPercent=50))
    assert ("cpu_cfs_burst", MAIN, 100_000) in refusing.last


# ---------------------------------------------------------------------------------------------- bad input


def test_garbage_quota_file_skips_that_container(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path, [ls_pod(), ls_pod("web")])
    w.host.write_cgroup(MAIN, CPU_CFS_QUOTA, "garbage\n")
    decision = w.run(throttled={"ls-main": 0.3, "web-main": 0.3})
    (problem,) = decision.numbers["read_problems"]
    assert problem.startswith("default/ls/main: cannot read cpu_cfs_quota: ")
    assert f"1 skipped (first: {problem})" in decision.summary
    assert w.quota("kubepods/burstable/poduid-web/web-main") == 240_000
    assert all(rel not in (LS, MAIN) for _, rel, _ in w.executor.last)


def test_garbage_pod_quota_keeps_container_quotas(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    w = make_world(fake_cgroup_host, tmp_path)
    w.host.write_cgroup(LS, CPU_CFS_QUOTA, "garbage\n")
    decision = w.run(throttled={"ls-main": 0.3})
    assert w.quota() == 200_000
    assert w.burst() == 200_000  # burst still set, capped at the current quota
    assert decision.numbers["read_problems"][0].startswith("default/ls: cannot read cpu_cfs_quota: ")
    assert w.executor.last == [("cpu_cfs_burst", MAIN, 200_000)]
