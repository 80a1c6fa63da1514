"""NodeSLOSpec: Koordinator's JSON names and defaults, Go's decoding rules, validation with field paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from koordlet.apis.nodeslo import (
    MEMORY_EVICT_LOWER_GAP_PERCENT,
    NodeSLOSpec,
    ResctrlQOSCfg,
    ResourceThresholdStrategy,
    default_nodeslo_spec,
    merge_json,
)
from koordlet.errors import ConfigError

CRS = "reference/koordinator-samples/crs"


def dig(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = obj[part]
    return obj


# ------------------------------------------------------------------------------------------ defaults

DEFAULTS = [
    ("resourceUsedThresholdWithBE.enable", False),
    ("resourceUsedThresholdWithBE.cpuSuppressThresholdPercent", 65),
    ("resourceUsedThresholdWithBE.cpuSuppressPolicy", "cpuset"),
    ("resourceUsedThresholdWithBE.memoryEvictThresholdPercent", 70),
    ("resourceUsedThresholdWithBE.cpuEvictPolicy", "evictByRealLimit"),
    ("resourceQOSStrategy.policies.cpuPolicy", "groupIdentity"),
    ("resourceQOSStrategy.policies.netQOSPolicy", "tc"),
    ("resourceQOSStrategy.lsrClass.cpuQOS.groupIdentity", 2),
    ("resourceQOSStrategy.lsClass.cpuQOS.groupIdentity", 2),
    ("resourceQOSStrategy.beClass.cpuQOS.groupIdentity", -1),
    ("resourceQOSStrategy.systemClass.cpuQOS.groupIdentity", 0),
    ("resourceQOSStrategy.lsClass.cpuQOS.coreExpeller", True),
    ("resourceQOSStrategy.beClass.cpuQOS.coreExpeller", False),
    ("resourceQOSStrategy.beClass.cpuQOS.schedIdle", 0),
    ("resourceQOSStrategy.beClass.resctrlQOS.catRangeStartPercent", 0),
    ("resourceQOSStrategy.beClass.resctrlQOS.catRangeEndPercent", 30),
    ("resourceQOSStrategy.beClass.resctrlQOS.mbaPercent", 100),
    ("resourceQOSStrategy.lsClass.resctrlQOS.catRangeEndPercent", 100),
    ("resourceQOSStrategy.lsrClass.resctrlQOS.catRangeEndPercent", 100),
    ("resourceQOSStrategy.systemClass.resctrlQOS.catRangeEndPercent", 100),
    ("resourceQOSStrategy.lsClass.memoryQOS.wmarkRatio", 95),
    ("resourceQOSStrategy.lsClass.memoryQOS.wmarkScalePermill", 20),
    ("resourceQOSStrategy.lsClass.memoryQOS.wmarkMinAdj", -25),
    ("resourceQOSStrategy.lsrClass.memoryQOS.wmarkMinAdj", -25),
    ("resourceQOSStrategy.beClass.memoryQOS.wmarkMinAdj", 50),
    ("resourceQOSStrategy.beClass.memoryQOS.wmarkRatio", 95),
    ("resourceQOSStrategy.beClass.memoryQOS.minLimitPercent", 0),
    ("resourceQOSStrategy.lsClass.memoryQOS.oomKillGroup", 0),
    ("resourceQOSStrategy.lsClass.networkQOS.ingressLimit", 0),
    ("cpuBurstStrategy.policy", "none"),
    ("cpuBurstStrategy.cpuBurstPercent", 1000),
    ("cpuBurstStrategy.cfsQuotaBurstPercent", 300),
    ("cpuBurstStrategy.cfsQuotaBurstPeriodSeconds", -1),
    ("cpuBurstStrategy.sharePoolThresholdPercent", 50),
    ("systemStrategy.totalNetworkBandwidth", "0"),
    ("extensions", {}),
]


@pytest.mark.parametrize(("path", "expected"), DEFAULTS)
def test_defaults(path: str, expected: Any) -> None:
    assert dig(default_nodeslo_spec().to_json(), path) == expected


def test_every_class_feature_is_disabled_by_default() -> None:
    qos = default_nodeslo_spec().to_json()["resourceQOSStrategy"]
    switches = [(cls, feature, cfg["enable"]) for cls, features in qos.items() if cls != "policies"
                for feature, cfg in features.items()]
    assert len(switches) == 4 * 5 + 1  # LSR/LS/BE/SYSTEM x 5 features, plus the root's block IO
    assert all(enabled is False for _, _, enabled in switches)


def test_unset_kernel_knobs_and_lower_percent_stay_unset() -> None:
    spec = default_nodeslo_spec()
    assert spec.system_strategy is not None and spec.system_strategy.min_free_kbytes_factor is None
    threshold = spec.resource_used_threshold_with_be
    assert threshold is not None and threshold.memory_evict_lower_percent is None
    assert MEMORY_EVICT_LOWER_GAP_PERCENT == 2


def test_with_defaults_keeps_set_fields_and_fills_the_rest() -> None:
    spec = NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 50},
                                  "resourceQOSStrategy": {"beClass": {"cpuQOS": {"enable": True}}}}).with_defaults()
    out = spec.to_json()
    assert dig(out, "resourceUsedThresholdWithBE.cpuSuppressThresholdPercent") == 50
    assert dig(out, "resourceUsedThresholdWithBE.enable") is True
    assert dig(out, "resourceUsedThresholdWithBE.memoryEvictThresholdPercent") == 70
    assert dig(out, "resourceQOSStrategy.beClass.cpuQOS") == {"enable": True, "groupIdentity": -1, "schedIdle": 0,
                                                              "coreExpeller": False}
    assert dig(out, "cpuBurstStrategy.cpuBurstPercent") == 1000


# ------------------------------------------------------------------------------------------ decoding


@pytest.mark.parametrize(("obj", "path", "expected"), [
    ({"resourceQOSStrategy": {"lsClass": {"resctrlQOS": {"MBAPercent": 40}}}},
     "resourceQOSStrategy.lsClass.resctrlQOS.mbaPercent", 40),
    ({"resourceUsedThresholdWithBE": {"CPUEvictTimeWindowSeconds": 60}},
     "resourceUsedThresholdWithBE.cpuEvictTimeWindowSeconds", 60),
    ({"resourceQOSStrategy": {"beClass": {"networkQOS": {"IngressLimit": "200M"}}}},
     "resourceQOSStrategy.beClass.networkQOS.ingressLimit", "200M"),
    ({"RESOURCEQOSSTRATEGY": {"Policies": {"NetQosPolicy": "terway-qos"}}},
     "resourceQOSStrategy.policies.netQOSPolicy", "terway-qos"),
    # A later duplicate wins, as encoding/json assigns keys in order.
    ({"cpuBurstStrategy": {"cpuBurstPercent": 10, "CPUBurstPercent": 20}}, "cpuBurstStrategy.cpuBurstPercent", 20),
])
def test_keys_match_case_insensitively(obj: dict[str, Any], path: str, expected: Any) -> None:
    assert dig(NodeSLOSpec.from_json(obj).to_json(), path) == expected


def test_absent_and_null_fields_are_none_and_unknown_keys_are_ignored() -> None:
    spec = NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressPolicy": None,
                                                                  "noSuchField": 1}, "unknown": {}})
    threshold = spec.resource_used_threshold_with_be
    assert threshold == ResourceThresholdStrategy(enable=True)
    assert spec.resource_qos_strategy is None and spec.host_applications is None
    assert spec.to_json() == {"resourceUsedThresholdWithBE": {"enable": True}}


def test_empty_enum_string_is_unset_as_go_omitempty_drops_it() -> None:
    spec = NodeSLOSpec.from_json({"resourceUsedThresholdWithBE": {"cpuSuppressPolicy": ""}})
    assert spec.to_json() == {"resourceUsedThresholdWithBE": {}}
    assert dig(spec.with_defaults().to_json(), "resourceUsedThresholdWithBE.cpuSuppressPolicy") == "cpuset"


FULL_SPEC: dict[str, Any] = {
    "resourceUsedThresholdWithBE": {
        "enable": True, "cpuSuppressThresholdPercent": 60, "cpuSuppressMinPercent": 10,
        "cpuSuppressPolicy": "cfsQuota", "memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 65,
        "cpuEvictBESatisfactionUpperPercent": 80, "cpuEvictBESatisfactionLowerPercent": 60,
        "cpuEvictBEUsageThresholdPercent": 90, "cpuEvictTimeWindowSeconds": 60, "cpuEvictThresholdPercent": 60,
        "cpuEvictLowerPercent": 40, "cpuEvictPolicy": "evictByAllocatable", "evictEnabledPriorityThreshold": 5999,
        "cpuAllocatableEvictThresholdPercent": 110, "cpuAllocatableEvictLowerPercent": 100,
        "memoryAllocatableEvictThresholdPercent": 110, "memoryAllocatableEvictLowerPercent": 100,
        "allocatableEvictPriorityThreshold": 5999},
    "resourceQOSStrategy": {
        "policies": {"cpuPolicy": "coreSched", "netQOSPolicy": "terway-qos"},
        "beClass": {
            "cpuQOS": {"enable": True, "groupIdentity": -1, "schedIdle": 1, "coreExpeller": False},
            "memoryQOS": {"enable": True, "minLimitPercent": 20, "lowLimitPercent": 40, "throttlingPercent": 80,
                          "wmarkRatio": 90, "wmarkScalePermill": 20, "wmarkMinAdj": 50, "pageCacheLimitEnable": 1,
                          "pageCacheLimitSync": 0, "pageCacheLimitSize": 1048576, "priorityEnable": 1,
                          "priority": 12, "oomKillGroup": 1},
            "blkioQOS": {"enable": True, "blocks": [
                {"name": "ackdistro-pool", "type": "volumegroup", "ioCfg": {"ioWeightPercent": 60}},
                {"name": "/dev/sdb", "type": "device",
                 "ioCfg": {"readBPS": 102400000, "readIOPS": 20480, "writeBPS": 204800004, "writeIOPS": 10240}}]},
            "resctrlQOS": {"enable": True, "catRangeStartPercent": 0, "catRangeEndPercent": 30, "mbaPercent": 50},
            "networkQOS": {"enable": True, "ingressRequest": "10M", "ingressLimit": 100, "egressRequest": 30,
                           "egressLimit": "1Gi"}},
        "cgroupRoot": {"blkioQOS": {"enable": True, "blocks": [{"name": "pool", "type": "podvolume", "ioCfg": {
            "readLatency": 3000, "writeLatency": 3000, "readLatencyPercent": 95, "writeLatencyPercent": 95,
            "enableUserModel": True, "modelReadBPS": 1, "modelWriteBPS": 2, "modelReadSeqIOPS": 3,
            "modelWriteSeqIOPS": 4, "modelReadRandIOPS": 5, "modelWriteRandIOPS": 6}}]}}},
    "cpuBurstStrategy": {"policy": "auto", "cpuBurstPercent": 1000, "cfsQuotaBurstPercent": 300,
                         "cfsQuotaBurstPeriodSeconds": -1, "sharePoolThresholdPercent": 50},
    "systemStrategy": {"minFreeKbytesFactor": 100, "watermarkScaleFactor": 150, "memcgReapBackGround": 1,
                       "schedGroupIdentityEnabled": 1, "schedIdleSaverWmark": 1000,
                       "schedFeatures": {"ID_ABSOLUTE_EXPEL": True}, "pageCacheLimitEnabled": 0,
                       "totalNetworkBandwidth": "600M"},
    "extensions": {"plugin": {"nested": [1, 2]}},
    "hostApplications": [{"name": "nginx", "priority": "koord-prod", "qos": "LS", "strategy": {},
                          "cgroupPath": {"base": "CgroupRoot", "parentDir": "host-latency-sensitive/",
                                         "relativePath": "nginx/"}}],
}


def test_round_trip_of_every_field() -> None:
    spec = NodeSLOSpec.from_json(FULL_SPEC)
    assert spec.to_json() == FULL_SPEC
    assert NodeSLOSpec.from_json(spec.to_json()) == spec
    assert spec.resource_qos_strategy is not None and spec.resource_qos_strategy.be_class is not None
    blkio = spec.resource_qos_strategy.be_class.blkio_qos
    assert blkio is not None and blkio.blocks is not None and blkio.blocks[1].io_cfg is not None
    assert blkio.blocks[1].io_cfg.write_bps == 204800004


def test_round_trip_of_defaults_and_immutability() -> None:
    spec = default_nodeslo_spec()
    assert NodeSLOSpec.from_json(spec.to_json()) == spec
    assert spec.with_defaults() == spec
    with pytest.raises(AttributeError):
        spec.extensions = {}  # type: ignore[misc]
    held = NodeSLOSpec.from_json(FULL_SPEC)
    out = held.to_json()
    out["extensions"]["plugin"]["nested"].append(3)
    assert held.to_json()["extensions"] == {"plugin": {"nested": [1, 2]}}


def test_merge_json_merges_objects_and_replaces_lists() -> None:
    base = {"a": {"b": 1, "c": [1, 2]}, "d": 1}
    assert merge_json(base, {"a": {"c": [3]}, "e": 2}) == {"a": {"b": 1, "c": [3]}, "d": 1, "e": 2}
    assert base == {"a": {"b": 1, "c": [1, 2]}, "d": 1}


# ------------------------------------------------------------------------------------------ validation

RT = "resourceUsedThresholdWithBE"
QOS = "resourceQOSStrategy"

INVALID = [
    ({RT: {"cpuSuppressThresholdPercent": 120}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: must be 0..100, got 120"),
    ({RT: {"memoryEvictThresholdPercent": -1}},
     "spec.resourceUsedThresholdWithBE.memoryEvictThresholdPercent: must be 0..100, got -1"),
    ({RT: {"cpuSuppressPolicy": "quota"}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressPolicy: must be one of cpuset, cfsQuota, got 'quota'"),
    ({RT: {"cpuEvictPolicy": "byUsage"}},
     "spec.resourceUsedThresholdWithBE.cpuEvictPolicy: must be one of evictByRealLimit, evictByAllocatable, "
     "got 'byUsage'"),
    ({RT: {"cpuSuppressThresholdPercent": "65"}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: must be an integer, got '65'"),
    ({RT: {"cpuSuppressThresholdPercent": 65.0}},
     "spec.resourceUsedThresholdWithBE.cpuSuppressThresholdPercent: must be an integer, got 65.0"),
    ({RT: {"enable": "true"}}, "spec.resourceUsedThresholdWithBE.enable: must be true or false, got 'true'"),
    ({RT: {"enable": 1}}, "spec.resourceUsedThresholdWithBE.enable: must be true or false, got 1"),
    ({RT: {"cpuEvictTimeWindowSeconds": 0}},
     "spec.resourceUsedThresholdWithBE.cpuEvictTimeWindowSeconds: must be >= 1, got 0"),
    ({RT: {"memoryEvictThresholdPercent": 70, "memoryEvictLowerPercent": 70}},
     "spec.resourceUsedThresholdWithBE.memoryEvictLowerPercent: must be less than memoryEvictThresholdPercent (70), "
     "got 70"),
    ({RT: {"cpuEvictBESatisfactionUpperPercent": 60, "cpuEvictBESatisfactionLowerPercent": 80}},
     "spec.resourceUsedThresholdWithBE.cpuEvictBESatisfactionLowerPercent: must be less than "
     "cpuEvictBESatisfactionUpperPercent (60), got 80"),
    ({RT: {"cpuEvictThresholdPercent": 40, "cpuEvictLowerPercent": 60}},
     "spec.resourceUsedThresholdWithBE.cpuEvictLowerPercent: must be less than cpuEvictThresholdPercent (40), "
     "got 60"),
    ({QOS: {"policies": {"cpuPolicy": "bvt"}}},
     "spec.resourceQOSStrategy.policies.cpuPolicy: must be one of groupIdentity, coreSched, got 'bvt'"),
    ({QOS: {"policies": {"netQOSPolicy": "ebpf"}}},
     "spec.resourceQOSStrategy.policies.netQOSPolicy: must be one of tc, terway-qos, got 'ebpf'"),
    ({QOS: {"beClass": {"cpuQOS": {"groupIdentity": 3}}}},
     "spec.resourceQOSStrategy.beClass.cpuQOS.groupIdentity: must be -1..2, got 3"),
    ({QOS: {"beClass": {"cpuQOS": {"groupIdentity": -2}}}},
     "spec.resourceQOSStrategy.beClass.cpuQOS.groupIdentity: must be -1..2, got -2"),
    ({QOS: {"beClass": {"cpuQOS": {"schedIdle": 2}}}},
     "spec.resourceQOSStrategy.beClass.cpuQOS.schedIdle: must be 0..1, got 2"),
    ({QOS: {"lsClass": {"resctrlQOS": {"catRangeStartPercent": 50, "catRangeEndPercent": 30}}}},
     "spec.resourceQOSStrategy.lsClass.resctrlQOS.catRangeStartPercent: must be less than catRangeEndPercent (30), "
     "got 50"),
    ({QOS: {"lsClass": {"resctrlQOS": {"catRangeStartPercent": 30, "catRangeEndPercent": 30}}}},
     "spec.resourceQOSStrategy.lsClass.resctrlQOS.catRangeStartPercent: must be less than catRangeEndPercent (30), "
     "got 30"),
    ({QOS: {"lsClass": {"resctrlQOS": {"catRangeEndPercent": 101}}}},
     "spec.resourceQOSStrategy.lsClass.resctrlQOS.catRangeEndPercent: must be 0..100, got 101"),
    ({QOS: {"lsClass": {"resctrlQOS": {"MBAPercent": 200}}}},
     "spec.resourceQOSStrategy.lsClass.resctrlQOS.mbaPercent: must be 0..100, got 200"),
    ({QOS: {"lsClass": {"memoryQOS": {"wmarkMinAdj": -26}}}},
     "spec.resourceQOSStrategy.lsClass.memoryQOS.wmarkMinAdj: must be -25..50, got -26"),
    ({QOS: {"lsClass": {"memoryQOS": {"wmarkScalePermill": 0}}}},
     "spec.resourceQOSStrategy.lsClass.memoryQOS.wmarkScalePermill: must be 1..1000, got 0"),
    ({QOS: {"lsClass": {"memoryQOS": {"priority": 13}}}},
     "spec.resourceQOSStrategy.lsClass.memoryQOS.priority: must be 0..12, got 13"),
    ({QOS: {"lsClass": {"networkQOS": {"ingressRequest": "50Q"}}}},
     "spec.resourceQOSStrategy.lsClass.networkQOS.ingressRequest: must be a percentage 0..100 or a non-negative "
     "Kubernetes quantity such as '50M', got '50Q'"),
    ({QOS: {"lsClass": {"networkQOS": {"egressLimit": 101}}}},
     "spec.resourceQOSStrategy.lsClass.networkQOS.egressLimit: a percentage must be 0..100, got 101"),
    ({QOS: {"lsClass": {"networkQOS": {"egressLimit": "-5M"}}}},
     "spec.resourceQOSStrategy.lsClass.networkQOS.egressLimit: must be a percentage 0..100 or a non-negative "
     "Kubernetes quantity such as '50M', got '-5M'"),
    ({QOS: {"beClass": {"blkioQOS": {"blocks": [{"type": "disk"}]}}}},
     "spec.resourceQOSStrategy.beClass.blkioQOS.blocks[0].type: must be one of device, volumegroup, podvolume, "
     "got 'disk'"),
    ({QOS: {"beClass": {"blkioQOS": {"blocks": [{"ioCfg": {"ioWeightPercent": 0}}]}}}},
     "spec.resourceQOSStrategy.beClass.blkioQOS.blocks[0].ioCfg.ioWeightPercent: must be 1..100, got 0"),
    ({QOS: {"beClass": {"blkioQOS": {"blocks": {}}}}},
     "spec.resourceQOSStrategy.beClass.blkioQOS.blocks: must be a list, got an object"),
    ({QOS: {"beClass": []}}, "spec.resourceQOSStrategy.beClass: must be an object, got a list"),
    ({"cpuBurstStrategy": {"policy": "always"}},
     "spec.cpuBurstStrategy.policy: must be one of none, cpuBurstOnly, cfsQuotaBurstOnly, auto, got 'always'"),
    ({"cpuBurstStrategy": {"cfsQuotaBurstPercent": 99}},
     "spec.cpuBurstStrategy.cfsQuotaBurstPercent: must be >= 100, got 99"),
    ({"cpuBurstStrategy": {"cpuBurstPercent": 10001}},
     "spec.cpuBurstStrategy.cpuBurstPercent: must be 1..10000, got 10001"),
    ({"cpuBurstStrategy": {"cfsQuotaBurstPeriodSeconds": -2}},
     "spec.cpuBurstStrategy.cfsQuotaBurstPeriodSeconds: must be >= -1, got -2"),
    ({"systemStrategy": {"watermarkScaleFactor": 401}},
     "spec.systemStrategy.watermarkScaleFactor: must be 1..400, got 401"),
    ({"systemStrategy": {"minFreeKbytesFactor": 0}}, "spec.systemStrategy.minFreeKbytesFactor: must be >= 1, got 0"),
    ({"systemStrategy": {"totalNetworkBandwidth": "1000Q"}},
     "spec.systemStrategy.totalNetworkBandwidth: must be a Kubernetes quantity such as '600M', got '1000Q'"),
    ({"systemStrategy": {"schedFeatures": {"X": 1}}}, "spec.systemStrategy.schedFeatures.X: must be true or false, "
                                                      "got 1"),
    ({"hostApplications": [{"qos": "GOLD"}]},
     "spec.hostApplications[0].qos: must be one of LSE, LSR, LS, BE, SYSTEM, got 'GOLD'"),
    ({"hostApplications": [{"cgroupPath": {"base": "Root"}}]},
     "spec.hostApplications[0].cgroupPath.base: must be one of CgroupRoot, Kubepods, KubepodsBurstable, "
     "KubepodsBesteffort, got 'Root'"),
    ({"extensions": []}, "spec.extensions: must be an object, got a list"),
]


@pytest.mark.parametrize(("obj", "message"), INVALID)
def test_invalid_values_name_the_field_path_and_value(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        NodeSLOSpec.from_json(obj)
    assert str(info.value) == message
    assert isinstance(info.value, ValueError)


def test_where_prefixes_the_path() -> None:
    with pytest.raises(ConfigError, match=r"^nodeslo/test-node\.spec\.cpuBurstStrategy\.policy: "):
        NodeSLOSpec.from_json({"cpuBurstStrategy": {"policy": "x"}}, where="nodeslo/test-node.spec")
    with pytest.raises(ConfigError, match=r"^spec: must be an object, got 'x'$"):
        NodeSLOSpec.from_json("x")


@pytest.mark.parametrize("value", [0, 100, "50M", "100Mi", "1G", "0"])
def test_valid_bandwidths(value: int | str) -> None:
    spec = NodeSLOSpec.from_json({QOS: {"lsClass": {"networkQOS": {"ingressRequest": value}}}})
    assert dig(spec.to_json(), f"{QOS}.lsClass.networkQOS.ingressRequest") == value


def test_boundaries_are_inclusive() -> None:
    ok = ResctrlQOSCfg.from_json({"catRangeStartPercent": 0, "catRangeEndPercent": 100, "mbaPercent": 0})
    assert (ok.cat_range_start_percent, ok.cat_range_end_percent, ok.mba_percent) == (0, 100, 0)
    spec = NodeSLOSpec.from_json({RT: {"cpuSuppressThresholdPercent": 100, "memoryEvictThresholdPercent": 0}})
    assert spec.to_json()[RT] == {"cpuSuppressThresholdPercent": 100, "memoryEvictThresholdPercent": 0}


# ------------------------------------------------------------------------------------------ documented NodeSLOs


def load_cr_spec(shared_dir: Path, name: str) -> dict[str, Any]:
    doc = yaml.safe_load((shared_dir / CRS / name).read_text())
    assert doc["kind"] == "NodeSLO" and doc["apiVersion"] == "slo.koordinator.sh/v1alpha1"
    spec: dict[str, Any] = doc["spec"]
    return spec


def test_cr_template_resource_threshold(shared_dir: Path) -> None:
    spec = NodeSLOSpec.from_json(load_cr_spec(shared_dir, "nodeslo-template-resource-threshold.yaml"))
    assert spec.to_json() == {
        "resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 65,
                                        "cpuSuppressPolicy": "cpuset", "memoryEvictThresholdPercent": 70},
        "resourceQOSStrategy": {}, "cpuBurstStrategy": {}, "systemStrategy": {}, "extensions": {}}
    # The empty sections are present but unset: the defaults fill them.
    assert dig(spec.with_defaults().to_json(), "cpuBurstStrategy.policy") == "none"


def test_cr_after_quickstart_edit(shared_dir: Path) -> None:
    spec = NodeSLOSpec.from_json(load_cr_spec(shared_dir, "nodeslo-after-quickstart-edit.yaml"))
    threshold = spec.resource_used_threshold_with_be
    assert threshold == ResourceThresholdStrategy(enable=True, cpu_suppress_threshold_percent=60,
                                                  cpu_suppress_policy="cpuset", memory_evict_threshold_percent=60)
    assert spec.extensions == {}


def test_cr_reference_sample(shared_dir: Path) -> None:
    spec = NodeSLOSpec.from_json(load_cr_spec(shared_dir, "nodeslo-crd-reference-sample.yaml")).with_defaults()
    out = spec.to_json()
    assert dig(out, f"{RT}.cpuSuppressThresholdPercent") == 70
    assert dig(out, f"{RT}.memoryEvictThresholdPercent") == 75
    assert dig(out, f"{RT}.enable") is True
    assert dig(out, f"{QOS}.beClass.cpuQOS") == {"enable": True, "groupIdentity": 1, "schedIdle": 0,
                                                  "coreExpeller": False}
    memory = dig(out, f"{QOS}.beClass.memoryQOS")
    assert (memory["enable"], memory["minLimitPercent"], memory["lowLimitPercent"], memory["throttlingPercent"]) == (
        True, 20, 40, 80)
    assert memory["wmarkMinAdj"] == 50  # untouched BE default


def test_every_nodeslo_cr_is_covered(shared_dir: Path) -> None:
    names = {p.name for p in (shared_dir / CRS).glob("nodeslo-*.yaml")}
    assert names == {"nodeslo-template-resource-threshold.yaml", "nodeslo-after-quickstart-edit.yaml",
                     "nodeslo-crd-reference-sample.yaml"}
