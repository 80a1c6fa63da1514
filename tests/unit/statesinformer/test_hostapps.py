"""Host applications: where their cgroups are (upstream ``GetHostAppCgroupRelativePath``), which ones BE
suppression covers (``NonBEHostAppFilter``), and NodeMetric ``hostApplicationMetric``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import (
    HostApplicationMetricInfo,
    MemoryCollectPolicy,
    NodeMetricCollectPolicy,
    NodeMetricStatus,
    ResourceMap,
)
from koordlet.apis.nodeslo import HostApplicationSpec, NodeSLOSpec
from koordlet.errors import ConfigError
from koordlet.metriccache import CacheSettings, MetricCache, names
from koordlet.statesinformer import hostapps
from koordlet.statesinformer.nodemetric import build_node_metric
from koordlet.system.kubepaths import CgroupDriver

NOW = 1_700_000_000.0
MIB = 1 << 20


def app(raw: dict[str, Any]) -> HostApplicationSpec:
    apps = NodeSLOSpec.from_json({"hostApplications": [raw]}).host_applications
    assert apps is not None
    return apps[0]


@pytest.mark.parametrize(("raw", "driver", "parent", "expected"), [
    # No cgroupPath: by QoS class, at the hierarchy root.
    ({"name": "nginx", "qos": "LS"}, CgroupDriver.CGROUPFS, "", "host-latency-sensitive/nginx"),
    ({"name": "redis", "qos": "LSR"}, CgroupDriver.CGROUPFS, "", "host-latency-sensitive/redis"),
    ({"name": "batch", "qos": "BE"}, CgroupDriver.SYSTEMD, "", "host-best-effort/batch"),
    ({"name": "plain"}, CgroupDriver.CGROUPFS, "", "plain"),
    # The sample host-application-nginx-ls.yaml.
    ({"name": "nginx", "qos": "LS", "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/",
                                                   "relativePath": "nginx/"}},
     CgroupDriver.CGROUPFS, "kubelet", "host-latency-sensitive/nginx"),
    # The sample host-application-yarn-be.yaml, under each driver and below kubelet's cgroup root.
    ({"name": "yarn-task", "qos": "BE", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}},
     CgroupDriver.CGROUPFS, "", "kubepods/besteffort/hadoop-yarn"),
    ({"name": "yarn-task", "qos": "BE", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}},
     CgroupDriver.SYSTEMD, "", "kubepods.slice/kubepods-besteffort.slice/hadoop-yarn"),
    ({"name": "x", "cgroupPath": {"base": "KubepodsBurstable", "parentDir": "/a/", "relativePath": "/b"}},
     CgroupDriver.CGROUPFS, "kubelet", "kubelet/kubepods/burstable/a/b"),
    ({"name": "x", "cgroupPath": {"base": "Kubepods", "relativePath": "g"}}, CgroupDriver.CGROUPFS, "", "kubepods/g"),
    # No base: the hierarchy root, as upstream's default.
    ({"name": "x", "cgroupPath": {"relativePath": "a//b/./c"}}, CgroupDriver.CGROUPFS, "", "a/b/c"),
])
def test_cgroup_dir(raw: dict[str, Any], driver: CgroupDriver, parent: str, expected: str) -> None:
    assert hostapps.cgroup_dir(app(raw), driver, parent) == expected


@pytest.mark.parametrize(("raw", "error"), [
    ({"name": "x", "cgroupPath": {"relativePath": "../../etc"}},
     "spec.hostApplications[0].cgroupPath.relativePath: must not contain '..', got '../../etc'"),
    ({"name": "x", "cgroupPath": {"parentDir": "a/../.."}},
     "spec.hostApplications[0].cgroupPath.parentDir: must not contain '..', got 'a/../..'"),
    ({"qos": "LS"}, "spec.hostApplications[0].name: must be a non-empty name without '/', got None"),
    ({"name": "a/b"}, "spec.hostApplications[0].name: must be a non-empty name without '/', got 'a/b'"),
])
def test_bad_paths_and_names_are_refused(raw: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as info:
        NodeSLOSpec.from_json({"hostApplications": [raw]})
    assert str(info.value) == error


@pytest.mark.parametrize(("raw", "suppressed"), [
    ({"name": "y", "qos": "BE", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "y"}}, True),
    ({"name": "y", "qos": "BE"}, False),  # host-best-effort/y: not in the besteffort tree
    ({"name": "y", "qos": "BE", "cgroupPath": {"base": "KubepodsBurstable", "relativePath": "y"}}, False),
    ({"name": "y", "qos": "LS", "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "y"}}, False),
])
def test_suppressed_with_be(raw: dict[str, Any], suppressed: bool) -> None:
    assert hostapps.suppressed_with_be(app(raw)) is suppressed


def test_unique_keeps_the_first_of_a_name() -> None:
    apps = NodeSLOSpec.from_json({"hostApplications": [{"name": "a", "qos": "LS"}, {"name": "a", "qos": "BE"},
                                                       {"name": "b"}]}).host_applications
    assert [(a.name, a.qos) for a in hostapps.unique(apps)] == [("a", "LS"), ("b", None)]


class NoPods:
    def pods(self) -> list[Any]:
        return []


@pytest.fixture
def cache(tmp_path: Path) -> MetricCache:
    return MetricCache(CacheSettings(path=tmp_path / "m.db", interval_seconds=1.0, default_window_seconds=1800.0),
                       lambda: NOW)


@pytest.mark.parametrize(("policy", "memory"), [
    (MemoryCollectPolicy.WITHOUT_PAGE_CACHE, "100Mi"),
    (MemoryCollectPolicy.WITH_PAGE_CACHE, "300Mi"),
    (MemoryCollectPolicy.WITH_HOT_PAGE_CACHE, "100Mi"),  # kidled is not collected: degrades as upstream
])
def test_host_application_metric(cache: MetricCache, policy: MemoryCollectPolicy, memory: str) -> None:
    """Averages over the aggregate window (300 s): yarn's CPU 0.25 and 0.75 -> 500m; nginx 1.0 -> 1.
    Sorted by name; an application without samples (ghost) is left out; priority and QoS as written."""
    for t, cpu in ((NOW - 100, 0.25), (NOW - 50, 0.75)):
        cache.append(names.HOST_APP_CPU_USAGE, hostapps.labels("yarn-task"), t, cpu)
        cache.append(names.HOST_APP_MEMORY_USAGE, hostapps.labels("yarn-task"), t, 10.0 * MIB)
        cache.append(names.HOST_APP_MEMORY_WITH_PAGE_CACHE, hostapps.labels("yarn-task"), t, 20.0 * MIB)
        cache.append(names.HOST_APP_CPU_USAGE, hostapps.labels("nginx"), t, 1.0)
        cache.append(names.HOST_APP_MEMORY_USAGE, hostapps.labels("nginx"), t, 100.0 * MIB)
        cache.append(names.HOST_APP_MEMORY_WITH_PAGE_CACHE, hostapps.labels("nginx"), t, 300.0 * MIB)
    apps = NodeSLOSpec.from_json({"hostApplications": [
        {"name": "yarn-task", "priority": "koord-batch", "qos": "BE",
         "cgroupPath": {"base": "KubepodsBesteffort", "relativePath": "hadoop-yarn/"}},
        {"name": "nginx", "priority": "koord-prod", "qos": "LS"},
        {"name": "ghost", "qos": "LS"}]}).host_applications or ()
    status = build_node_metric(cache, NoPods(), NodeMetricCollectPolicy(node_memory_collect_policy=policy), NOW,
                               host_apps=apps)
    document = status.to_json()["hostApplicationMetric"]
    yarn_memory = "20Mi" if policy is MemoryCollectPolicy.WITH_PAGE_CACHE else "10Mi"
    assert document == [
        {"name": "nginx", "usage": {"resources": {"cpu": "1", "memory": memory}}, "priority": "koord-prod",
         "qos": "LS"},
        {"name": "yarn-task", "usage": {"resources": {"cpu": "500m", "memory": yarn_memory}},
         "priority": "koord-batch", "qos": "BE"},
    ]
    assert NodeMetricStatus.from_json(status.to_json()).host_application_metric == status.host_application_metric


def test_no_host_applications_leaves_the_field_out(cache: MetricCache) -> None:
    status = build_node_metric(cache, NoPods(), NodeMetricCollectPolicy(), NOW)
    assert status.host_application_metric == () and "hostApplicationMetric" not in status.to_json()


def test_status_json_round_trip_and_bad_input() -> None:
    info = HostApplicationMetricInfo("nginx", ResourceMap(1500, 64 * MIB), PriorityClass.PROD, QoSClass.LS)
    parsed = NodeMetricStatus.from_json({"hostApplicationMetric": [info.to_json()]})
    assert parsed.host_application_metric == (info,)
    with pytest.raises(Exception, match=r"status.hostApplicationMetric\[0\].qos: unknown QoS class 'GOLD'"):
        NodeMetricStatus.from_json({"hostApplicationMetric": [{"name": "x", "qos": "GOLD"}]})
