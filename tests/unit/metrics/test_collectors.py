"""Scrape-time collectors: upstream names and labels, pods that go, stale samples, registry isolation."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from koordlet.apis.pod import Container, Pod
from koordlet.metriccache import CacheSettings, MetricCache, labels_of, names
from koordlet.metrics import KoordletMetrics, MaxAges
from koordlet.metrics.cpi import CPICollector
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.system.kubepaths import KubeQoS

NOW = 1_700_000_000.0
NODE = "node-1"


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Pods:
    def __init__(self, pods: Sequence[PodMeta] = ()) -> None:
        self.list = list(pods)

    def pods(self) -> Sequence[PodMeta]:
        return self.list


def meta(uid: str, name: str, container_ids: Sequence[str] = ("c1",), *, started: bool = True) -> PodMeta:
    containers = tuple(Container(f"ctr-{cid}", f"containerd://{cid}" if started else "") for cid in container_ids)
    pod = Pod(uid=uid, name=name, namespace="ns", labels={}, annotations={}, kube_qos=KubeQoS.BURSTABLE,
              phase="Running", priority=None, containers=containers)
    return PodMeta(pod=pod, cgroup_dir=f"kubepods/burstable/pod{uid}", containers=tuple(
        ContainerMeta(f"ctr-{cid}", cid if started else "", f"kubepods/burstable/pod{uid}/{cid}")
        for cid in container_ids))


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(collector: Collector) -> Samples:
    """Every sample of the text exposition, keyed by (sample name, sorted labels)."""
    text = generate_latest(collector).decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def names_in(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> MetricCache:
    return MetricCache(CacheSettings(path=tmp_path / "m.db"), clock)


@pytest.fixture
def pods() -> Pods:
    return Pods([meta("uid-a", "pod-a", ("c1", "c2")), meta("uid-b", "pod-b")])


@pytest.fixture
def metrics(cache: MetricCache, pods: Pods) -> KoordletMetrics:
    return KoordletMetrics(node_name=NODE, cache=cache, pods=pods, process_metrics=False)


def fill(cache: MetricCache, t: float) -> None:
    cache.append(names.NODE_CPU_USAGE, labels_of(), t, 3.5)
    cache.append(names.NODE_MEMORY_USAGE, labels_of(), t, 8e9)
    for uid, containers in (("uid-a", ("c1", "c2")), ("uid-b", ("c1",))):
        cache.append(names.POD_CPU_USAGE, labels_of(pod=uid), t, 0.25)
        cache.append(names.POD_MEMORY_USAGE, labels_of(pod=uid), t, 1e8)
        for resource, full in (("cpu", False), ("memory", True), ("io", True)):
            cache.append(names.POD_PSI, labels_of(pod=uid, resource=resource, kind="some"), t, 1.5)
            if full:
                cache.append(names.POD_PSI, labels_of(pod=uid, resource=resource, kind="full"), t, 0.5)
        for cid in containers:
            key = labels_of(pod=uid, container=cid)
            cache.append(names.CONTAINER_CPU_USAGE, key, t, 0.125)
            cache.append(names.CONTAINER_MEMORY_USAGE, key, t, 5e7)
            cache.append(names.CONTAINER_PSI, labels_of(dict(key), resource="cpu", kind="some"), t, 2.0)
            cache.append(names.CONTAINER_CPI, key, t, 1.25)


def pod_labels(uid: str, name: str) -> dict[str, str]:
    return {"node": NODE, "pod_uid": uid, "pod_name": name, "pod_namespace": "ns"}


def container_labels(uid: str, name: str, cid: str) -> dict[str, str]:
    return {**pod_labels(uid, name), "container_id": f"containerd://{cid}", "container_name": f"ctr-{cid}"}


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def test_families_carry_koordinator_names_help_and_labels(metrics: KoordletMetrics, cache: MetricCache) -> None:
    fill(cache, NOW)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(metrics.merged).decode())}
    expected = {
        # name: (type, help, label names) as in koordinator pkg/koordlet/metrics/*.go
        "koordlet_node_used_cpu_cores": ("gauge", "Number of cpu cores used by node in realtime", {"node"}),
        "koordlet_node_used_memory_bytes": ("gauge", "Memory used by node in realtime", {"node"}),
        "koordlet_pod_psi": ("gauge", "Pod psi collected by koordlet",
                             {"node", "pod_uid", "pod_name", "pod_namespace", "psi_resource_type", "psi_precision",
                              "psi_degree", "cpu_full_supported"}),
        "koordlet_container_psi": ("gauge", "Container psi collected by koordlet",
                                   {"node", "container_id", "container_name", "pod_uid", "pod_name", "pod_namespace",
                                    "psi_resource_type", "psi_precision", "psi_degree", "cpu_full_supported"}),
        "koordlet_container_cpi": ("gauge", "Container cpi collected by koordlet",
                                   {"node", "container_id", "container_name", "pod_uid", "pod_name", "pod_namespace",
                                    "cpi_field"}),
        # This project's per-pod/per-container usage, labelled like koordlet_container_resource_requests.
        "koordlet_pod_resource_usage": ("gauge", "pod resource usage collected by koordlet",
                                        {"node", "pod_uid", "pod_name", "pod_namespace", "resource", "unit"}),
        "koordlet_container_resource_usage": ("gauge", "container resource usage collected by koordlet",
                                              {"node", "container_id", "container_name", "pod_uid", "pod_name",
                                               "pod_namespace", "resource", "unit"}),
    }
    for name, (kind, help_text, label_names) in expected.items():
        family = families[name]
        assert (family.type, family.documentation) == (kind, help_text), name
        assert family.samples, name
        assert {k for s in family.samples for k in s.labels} == label_names, name


def test_values_and_label_values(metrics: KoordletMetrics, cache: MetricCache) -> None:
    fill(cache, NOW)
    samples = scrape(metrics.merged)
    assert samples[key("koordlet_node_used_cpu_cores", node=NODE)] == 3.5
    assert samples[key("koordlet_node_used_memory_bytes", node=NODE)] == 8e9
    assert samples[key("koordlet_pod_resource_usage", **pod_labels("uid-a", "pod-a"), resource="cpu",
                       unit="core")] == 0.25
    assert samples[key("koordlet_pod_resource_usage", **pod_labels("uid-a", "pod-a"), resource="memory",
                       unit="byte")] == 1e8
    assert samples[key("koordlet_container_resource_usage", **container_labels("uid-a", "pod-a", "c2"),
                       resource="memory", unit="byte")] == 5e7
    assert samples[key("koordlet_container_cpi", **container_labels("uid-b", "pod-b", "c1"), cpi_field="cpi")] == 1.25
    psi = {k: v for k, v in samples.items() if k[0] == "koordlet_pod_psi" and ("pod_uid", "uid-a") in k[1]}
    # The cache's "memory" is Koordinator's "mem"; cpu has no "full" line here, so cpu_full_supported=false.
    assert {(dict(k[1])["psi_resource_type"], dict(k[1])["psi_degree"], dict(k[1])["cpu_full_supported"], v)
            for k, v in psi.items()} == {
        ("cpu", "some", "false", 1.5), ("mem", "some", "true", 1.5), ("mem", "full", "true", 0.5),
        ("io", "some", "true", 1.5), ("io", "full", "true", 0.5)}
    assert {dict(k[1])["psi_precision"] for k in psi} == {"avg10"}
    assert samples[key("koordlet_container_psi", **container_labels("uid-a", "pod-a", "c1"), psi_resource_type="cpu",
                       psi_precision="avg10", psi_degree="some", cpu_full_supported="false")] == 2.0


def pod_uids(samples: Samples, metric: str) -> set[str]:
    return {dict(labels)["pod_uid"] for name, labels in samples if name == metric}


def test_a_pod_removed_from_the_informer_disappears_from_the_next_scrape(
        metrics: KoordletMetrics, cache: MetricCache, pods: Pods) -> None:
    fill(cache, NOW)
    per_pod = ("koordlet_pod_resource_usage", "koordlet_container_resource_usage", "koordlet_pod_psi",
               "koordlet_container_psi", "koordlet_container_cpi")
    before = scrape(metrics.external)
    assert all(pod_uids(before, m) == {"uid-a", "uid-b"} for m in per_pod)

    pods.list = [p for p in pods.list if p.uid != "uid-b"]  # the informer's next sync
    after = scrape(metrics.external)
    assert all(pod_uids(after, m) == {"uid-a"} for m in per_pod)  # even though the cache still has uid-b


def test_stale_samples_are_not_exported(metrics: KoordletMetrics, cache: MetricCache, clock: Clock) -> None:
    fill(cache, NOW)
    cache.append(names.POD_PSI, labels_of(pod="uid-a", resource="cpu", kind="some"), NOW + 20, 9.0)

    clock.now = NOW + 3.0  # the default max age of usage: three 1 s intervals
    assert key("koordlet_node_used_cpu_cores", node=NODE) in scrape(metrics.merged)

    clock.now = NOW + 3.5  # usage collection stalled: usage series vanish, PSI (10 s cadence) stays
    samples = scrape(metrics.merged)
    assert not {"koordlet_node_used_cpu_cores", "koordlet_node_used_memory_bytes", "koordlet_pod_resource_usage",
                "koordlet_container_resource_usage"} & names_in(samples)
    assert {"koordlet_pod_psi", "koordlet_container_psi", "koordlet_container_cpi"} <= names_in(samples)

    clock.now = NOW + 31  # past PSI's 30 s: only the one fresh PSI sample is left
    psi = {k: v for k, v in scrape(metrics.merged).items() if k[0].endswith("_psi")}
    assert list(psi.values()) == [9.0]
    assert dict(next(iter(psi))[1])["pod_uid"] == "uid-a"

    clock.now = NOW + 181  # CPI's 180 s max age
    assert "koordlet_container_cpi" not in names_in(scrape(metrics.merged))


def test_max_ages_follow_the_collect_intervals() -> None:
    assert MaxAges.from_intervals(2.0, 5.0, 30.0) == MaxAges(6.0, 15.0, 90.0)
    with pytest.raises(ValueError, match=r"MaxAges\.psi_seconds must be positive"):
        MaxAges(psi_seconds=0)


def test_containers_without_a_runtime_id_are_skipped(cache: MetricCache) -> None:
    pending = meta("uid-p", "pending", ("c9",), started=False)
    metrics = KoordletMetrics(node_name=NODE, cache=cache, pods=Pods([pending]), process_metrics=False)
    cache.append(names.POD_CPU_USAGE, labels_of(pod="uid-p"), NOW, 0.1)
    cache.append(names.CONTAINER_CPU_USAGE, labels_of(pod="uid-p", container=""), NOW, 0.1)
    samples = scrape(metrics.external)
    assert names_in(samples) == {"koordlet_pod_resource_usage"}


def test_container_id_keeps_the_scheme_only_for_the_same_container(cache: MetricCache) -> None:
    # kubelet's status still names the old container while the cgroup tree already has the new one.
    pod = Pod(uid="uid-r", name="restarted", namespace="ns", labels={}, annotations={}, kube_qos=KubeQoS.BURSTABLE,
              phase="Running", priority=None, containers=(Container("main", "containerd://old"),))
    restarted = PodMeta(pod=pod, cgroup_dir="kubepods/burstable/poduid-r",
                        containers=(ContainerMeta("main", "new", "kubepods/burstable/poduid-r/new"),))
    metrics = KoordletMetrics(node_name=NODE, cache=cache, pods=Pods([restarted]), process_metrics=False)
    cache.append(names.CONTAINER_CPU_USAGE, labels_of(pod="uid-r", container="new"), NOW, 0.1)
    (labels,) = [dict(k[1]) for k in scrape(metrics.external) if k[0] == "koordlet_container_resource_usage"]
    assert (labels["container_id"], labels["container_name"]) == ("new", "main")


def test_cpi_field_map_exports_raw_counters(cache: MetricCache, pods: Pods) -> None:
    registry = CollectorRegistry()
    registry.register(CPICollector(cache, pods, NODE, 60.0, {"cycles": "cycles_series",
                                                             "instructions": "instructions_series"}))
    cache.append("cycles_series", labels_of(pod="uid-b", container="c1"), NOW, 2e9)
    cache.append("instructions_series", labels_of(pod="uid-b", container="c1"), NOW, 1e9)
    samples = scrape(registry)
    assert samples[key("koordlet_container_cpi", **container_labels("uid-b", "pod-b", "c1"), cpi_field="cycles")] == 2e9
    assert samples[key("koordlet_container_cpi", **container_labels("uid-b", "pod-b", "c1"),
                       cpi_field="instructions")] == 1e9


def test_internal_and_external_hold_koordinators_split(metrics: KoordletMetrics, cache: MetricCache) -> None:
    fill(cache, NOW)
    metrics.lifecycle.record_start(NOW)
    internal, external = names_in(scrape(metrics.internal)), names_in(scrape(metrics.external))
    assert {"koordlet_start_time", "koordlet_node_used_cpu_cores", "koordlet_node_used_memory_bytes"} <= internal
    assert {"koordlet_pod_psi", "koordlet_container_psi", "koordlet_container_cpi", "koordlet_pod_resource_usage",
            "koordlet_container_resource_usage"} <= external
    assert not internal & external
    assert names_in(scrape(metrics.merged)) == internal | external


def test_each_daemon_has_its_own_registries(cache: MetricCache, pods: Pods) -> None:
    # No global REGISTRY: two instances in one process register the same names without clashing.
    first = KoordletMetrics(node_name="n1", cache=cache, pods=pods)
    second = KoordletMetrics(node_name="n2", cache=cache, pods=pods)
    first.lifecycle.record_start(1.0)
    assert scrape(second.internal).get(key("koordlet_start_time", node="n2")) is None
    assert scrape(first.internal)[key("koordlet_start_time", node="n1")] == 1.0
    assert "process_resident_memory_bytes" in names_in(scrape(first.internal))


def test_a_duplicate_collector_is_refused_at_registration(metrics: KoordletMetrics) -> None:
    with pytest.raises(ValueError, match="koordlet_node_metric_node_usage"):
        metrics.internal.register(metrics.node_metric)


def test_host_application_usage_as_koordinator_labels_it(cache: MetricCache, pods: Pods, clock: Clock) -> None:
    """``koordlet_host_application_resource_usage`` (Koordinator metrics/host_application.go): the NodeSLO's
    applications with fresh samples; one whose cgroup is gone (no samples) or that left the NodeSLO is absent."""
    from koordlet.apis.nodeslo import HostApplicationSpec

    apps = [HostApplicationSpec(name="nginx", priority="koord-prod", qos="LS"),
            HostApplicationSpec(name="ghost", qos="BE")]
    metrics = KoordletMetrics(node_name=NODE, cache=cache, pods=pods, process_metrics=False, host_apps=lambda: apps)
    cache.append(names.HOST_APP_CPU_USAGE, labels_of(host_app="nginx"), NOW, 0.75)
    cache.append(names.HOST_APP_MEMORY_USAGE, labels_of(host_app="nginx"), NOW, 3e8)
    name = "koordlet_host_application_resource_usage"
    labels = {"node": NODE, "host_application_name": "nginx", "priority_class": "koord-prod", "qos": "LS"}
    samples = {k: v for k, v in scrape(metrics.external).items() if k[0] == name}
    assert samples == {key(name, resource="cpu", **labels): 0.75, key(name, resource="memory", **labels): 3e8}
    apps.pop(0)
    assert not [k for k in scrape(metrics.external) if k[0] == name]
