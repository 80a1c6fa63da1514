"""The tenant policy on its own: kubelet's oom_score_adj, per-key namespace lists, the review of one pod and of a
node's pod list, the refusal record (logged once), and the CLOSID arithmetic."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS, QoSClass
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.apis.tenantpolicy import (
    KEY_OOM_SCORE_ADJ,
    KEY_POD_RESCTRL,
    KEY_QOS_LSE,
    KEY_QOS_SYSTEM,
    KEY_RESOURCE_STATUS,
    REFUSALS_KEPT,
    Refusal,
    TenantPolicy,
    exclusive_claims,
    kubelet_oom_score_adj,
    pod_group_room,
)
from koordlet.config.load import load
from koordlet.config.types import TenantConfig
from koordlet.errors import ConfigError
from koordlet.system.kubepaths import KubeQoS

GI = 1 << 30
CAPACITY = 16 * GI
OOM = "koordinator.sh/oom-score-adj"
OOM_SPEC = "koordinator.sh/oom-score-adj-spec"


def pod(name: str = "p", namespace: str = "tenant", *, labels: dict[str, str] | None = None,
        annotations: dict[str, str] | None = None, kube_qos: KubeQoS | None = KubeQoS.BURSTABLE,
        memory: dict[str, int] | None = None, created: str = "2026-01-01T00:00:00Z",
        priority_class_name: str = "") -> Pod:
    containers = tuple(Container(c, f"containerd://{name}-{c}", requests=Resources(memory_bytes=m))
                       for c, m in (memory or {"main": None}).items())
    return Pod(uid=f"uid-{namespace}-{name}", name=name, namespace=namespace, labels=labels or {},
               annotations=annotations or {}, kube_qos=kube_qos, phase="Running", priority=None,
               containers=containers, creation_timestamp=created, priority_class_name=priority_class_name)


def review(policy: TenantPolicy, p: Pod, **kw: object) -> tuple[Pod, list[str]]:
    reviewed, refusals = policy.review(p, memory_capacity_bytes=CAPACITY, **kw)  # type: ignore[arg-type]
    return reviewed, [r.key for r in refusals]


# --- kubelet's values ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kube_qos", "request_bytes", "priority_class", "expected"), [
    (KubeQoS.GUARANTEED, GI, "", -997),
    (KubeQoS.BESTEFFORT, None, "", 1000),
    (KubeQoS.BURSTABLE, None, "", 999),          # no request: 1000 - 0 = 1000 -> 999 (below BestEffort)
    (KubeQoS.BURSTABLE, CAPACITY // 4, "", 750),
    (KubeQoS.BURSTABLE, CAPACITY // 10, "", 901),  # kubelet's integer division: 1000 - 99
    (KubeQoS.BURSTABLE, CAPACITY, "", 3),        # 1000 - 1000 = 0 -> 1000 + (-997)
    (KubeQoS.BURSTABLE, 2 * CAPACITY, "", 3),
    (KubeQoS.BURSTABLE, None, "system-node-critical", -997),
    (None, None, "", 1000),                      # unknown class: never guessed low
])
def test_kubelet_oom_score_adj(kube_qos: KubeQoS | None, request_bytes: int | None, priority_class: str,
                               expected: int) -> None:
    assert kubelet_oom_score_adj(kube_qos, request_bytes, CAPACITY, priority_class) == expected


def test_kubelet_oom_score_adj_without_a_capacity() -> None:
    assert kubelet_oom_score_adj(KubeQoS.BURSTABLE, GI, 0) == 999


# --- namespace lists ----------------------------------------------------------------------------------------


def test_defaults_allow_kube_system_only() -> None:
    policy = TenantPolicy.from_config(TenantConfig())
    assert policy.allows(KEY_QOS_SYSTEM, "kube-system") and not policy.allows(KEY_QOS_SYSTEM, "default")
    assert policy.closid_reserve == 1


def test_per_key_lists_replace_the_global_one() -> None:
    policy = TenantPolicy.from_config(TenantConfig(privileged_namespaces="kube-system,ops",
                                                   qos_lse_namespaces="db", qos_system_namespaces="-",
                                                   oom_score_adj_namespaces="*"))
    assert policy.allows(KEY_QOS_LSE, "db") and not policy.allows(KEY_QOS_LSE, "ops")
    assert not policy.allows(KEY_QOS_SYSTEM, "kube-system")
    assert policy.allows(KEY_OOM_SCORE_ADJ, "anything")
    assert policy.allows("evictionOptOut", "ops") and not policy.allows("evictionOptOut", "db")


def test_unknown_key_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown tenant policy key"):
        TenantPolicy({"qosClassBogus": ["x"]})


# --- one pod ------------------------------------------------------------------------------------------------


def test_an_untouched_pod_is_returned_as_is() -> None:
    p = pod(labels={LABEL_QOS: "LS"}, annotations={OOM: "999"})
    assert TenantPolicy().review(p, memory_capacity_bytes=CAPACITY) == (p, ())


def test_refused_qos_label_falls_back_to_the_kube_class() -> None:
    reviewed, keys = review(TenantPolicy(), pod(labels={LABEL_QOS: "LSE"}, kube_qos=KubeQoS.GUARANTEED))
    assert keys == [KEY_QOS_LSE] and reviewed.qos is QoSClass.LSR and LABEL_QOS not in reviewed.labels
    reviewed, keys = review(TenantPolicy(), pod(labels={LABEL_QOS: "SYSTEM"}))
    assert keys == [KEY_QOS_SYSTEM] and reviewed.qos is QoSClass.LS


@pytest.mark.parametrize(("annotations", "refused"), [
    ({"koordinator.sh/eviction-policy": "[]"}, True),
    ({"koordinator.sh/eviction-priority": "100"}, True),
    ({"koordinator.sh/eviction-priority": "0"}, False),
    ({"koordinator.sh/eviction-priority": "-100"}, False),
    ({"koordinator.sh/eviction-priority": "many"}, False),  # read as 0 by the evictors
])
def test_eviction_opt_out(annotations: dict[str, str], refused: bool) -> None:
    reviewed, keys = review(TenantPolicy(), pod(annotations=annotations))
    assert (keys == ["evictionOptOut"]) is refused and (reviewed.annotations == {}) is refused
    assert review(TenantPolicy(), pod(namespace="kube-system", annotations=annotations))[1] == []


def test_trusted_workloads_keep_every_key() -> None:
    p = pod(namespace="standalone", labels={LABEL_QOS: "SYSTEM"}, annotations={OOM: "-1000"})
    assert TenantPolicy().review(p, memory_capacity_bytes=CAPACITY, trusted=True) == (p, ())


@pytest.mark.parametrize(("annotations", "memory", "refused"), [
    ({OOM: "-1000"}, {"main": None}, True),
    ({OOM: "999"}, {"main": None}, False),
    ({OOM: "749"}, {"main": CAPACITY // 4}, True),
    ({OOM: "750"}, {"main": CAPACITY // 4}, False),
    # The pod default counts for every container: the one with the highest floor decides.
    ({OOM: "750"}, {"big": CAPACITY // 4, "small": None}, True),
    # A per-container spec is judged per container.
    ({OOM_SPEC: json.dumps({"big": 750, "small": 999})}, {"big": CAPACITY // 4, "small": None}, False),
    ({OOM_SPEC: json.dumps({"big": 750, "small": 998})}, {"big": CAPACITY // 4, "small": None}, True),
    # Garbage is the hook's to report, not a refusal.
    ({OOM: "lots"}, {"main": None}, False),
    ({OOM_SPEC: "{"}, {"main": None}, False),
])
def test_oom_score_adj_floor(annotations: dict[str, str], memory: dict[str, int | None], refused: bool) -> None:
    reviewed, keys = review(TenantPolicy(), pod(annotations=annotations, memory=memory))  # type: ignore[arg-type]
    assert (keys == [KEY_OOM_SCORE_ADJ]) is refused
    assert (OOM not in reviewed.annotations and OOM_SPEC not in reviewed.annotations) is (refused or not annotations)


def test_oom_floor_uses_kubelets_view_of_the_pod() -> None:
    # The runtime's request has no memory requests; the informer's pod has.
    runtime = pod(annotations={OOM: "750"}, memory={"main": None})
    kubelet = pod(annotations={OOM: "750"}, memory={"main": CAPACITY // 4})
    assert review(TenantPolicy(), runtime)[1] == [KEY_OOM_SCORE_ADJ]
    assert review(TenantPolicy(), runtime, requests_from=kubelet)[1] == []


def test_pod_resctrl_annotation_only_for_lsr_and_lse() -> None:
    text = {"node.koordinator.sh/resctrl": "{}"}
    assert review(TenantPolicy(), pod(labels={LABEL_QOS: "LS"}, annotations=text))[1] == [KEY_POD_RESCTRL]
    assert review(TenantPolicy(), pod(labels={LABEL_QOS: "LSR"}, annotations=text))[1] == []
    # A refused LSE label makes the pod LSR (Guaranteed): still allowed a group.
    assert review(TenantPolicy(), pod(labels={LABEL_QOS: "LSE"}, annotations=text,
                                      kube_qos=KubeQoS.GUARANTEED))[1] == [KEY_QOS_LSE]
    # A refused SYSTEM label makes it LS: no group.
    assert review(TenantPolicy(), pod(labels={LABEL_QOS: "SYSTEM"}, annotations=text))[1] == [
        KEY_QOS_SYSTEM, KEY_POD_RESCTRL]


def status(cpuset: str) -> dict[str, str]:
    return {ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": cpuset})}


def test_cpuset_within_the_node() -> None:
    reviewed, keys = review(TenantPolicy(), pod(annotations=status("6-9")), node_cpus=range(8))
    assert keys == [KEY_RESOURCE_STATUS] and ANNOTATION_RESOURCE_STATUS not in reviewed.annotations
    assert review(TenantPolicy(), pod(annotations=status("6-7")), node_cpus=range(8))[1] == []
    assert review(TenantPolicy(), pod(annotations=status("6-9")), node_cpus=None)[1] == []  # node unknown
    # Unreadable: the readers report it.
    assert review(TenantPolicy(), pod(annotations={ANNOTATION_RESOURCE_STATUS: "{"}), node_cpus=range(8))[1] == []


def test_cpuset_within_the_pods_cpu_limit() -> None:
    limited = dataclasses.replace(pod(annotations=status("4-7")), containers=(
        Container("a", "", limits=Resources(cpu_milli=1500)), Container("b", "", limits=Resources(cpu_milli=500))))
    _, keys = review(TenantPolicy(), limited, node_cpus=range(8))
    assert keys == [KEY_RESOURCE_STATUS] and "exceed the pod's CPU limit of 2000m" in \
        TenantPolicy().review(limited, memory_capacity_bytes=CAPACITY)[1][0].reason
    two = dataclasses.replace(limited, annotations=status("4-5"))
    assert review(TenantPolicy(), two)[1] == []
    # 1.5 CPUs round up to 2 (koord-scheduler binds whole CPUs).
    odd = dataclasses.replace(two, containers=(Container("a", "", limits=Resources(cpu_milli=1500)),))
    assert review(TenantPolicy(), odd)[1] == []
    # No limit on a container: no quota to escape.
    unlimited = dataclasses.replace(limited, containers=(Container("a", ""), *limited.containers[1:]))
    assert review(TenantPolicy(), unlimited)[1] == []


def test_a_refused_cpuset_keeps_the_numa_resources() -> None:
    text = json.dumps({"cpuset": "0-63", "numaNodeResources": [{"node": 0}]})
    reviewed, keys = review(TenantPolicy(), pod(annotations={ANNOTATION_RESOURCE_STATUS: text}), node_cpus=range(8))
    assert keys == [KEY_RESOURCE_STATUS]
    assert json.loads(reviewed.annotations[ANNOTATION_RESOURCE_STATUS]) == {"numaNodeResources": [{"node": 0}]}


def test_review_all_keeps_exclusive_cpus_to_their_first_owner() -> None:
    old = pod("old", "a", labels={LABEL_QOS: "LSR"}, annotations=status("2-3"), kube_qos=KubeQoS.GUARANTEED,
              created="2026-01-01T00:00:00Z")
    new = pod("new", "b", labels={LABEL_QOS: "LSR"}, annotations=status("3-4"), kube_qos=KubeQoS.GUARANTEED,
              created="2026-01-02T00:00:00Z")
    ls = pod("ls", "c", labels={LABEL_QOS: "LS"}, annotations=status("2"), created="2025-01-01T00:00:00Z")
    shared = pod("shared", "c", labels={LABEL_QOS: "LS"}, annotations=status("5-6"))
    out = TenantPolicy().review_all([(new, False), (ls, False), (old, False), (shared, False)],
                                    memory_capacity_bytes=CAPACITY, node_cpus=range(8))
    keys = {p.name: [r.key for r in refusals] for p, refusals in out}
    assert keys == {"new": [KEY_RESOURCE_STATUS], "ls": [KEY_RESOURCE_STATUS], "old": [], "shared": []}
    assert [p.name for p, _ in out] == ["new", "ls", "old", "shared"]  # order kept
    assert "pod a/old" in out[0][1][0].reason
    assert exclusive_claims(p for p, _ in out) == {2: out[2][0], 3: out[2][0]}


def test_review_all_lets_a_trusted_claim_win() -> None:
    trusted = pod("w", "standalone", labels={LABEL_QOS: "LSE"}, annotations=status("1"),
                  kube_qos=KubeQoS.GUARANTEED, created="2026-06-01T00:00:00Z")
    tenant = pod("t", "x", labels={LABEL_QOS: "LSR"}, annotations=status("1"), kube_qos=KubeQoS.GUARANTEED)
    out = TenantPolicy().review_all([(trusted, True), (tenant, False)], memory_capacity_bytes=CAPACITY,
                                    node_cpus=range(4))
    assert [[r.key for r in refusals] for _, refusals in out] == [[], [KEY_RESOURCE_STATUS]]


# --- the record ---------------------------------------------------------------------------------------------


def test_note_logs_each_key_once_and_the_latest_review_is_shown(caplog: pytest.LogCaptureFixture) -> None:
    policy = TenantPolicy()
    p = pod()
    first = Refusal(KEY_QOS_SYSTEM, "label koordinator.sh/qosClass=SYSTEM", "no")
    other = Refusal(KEY_OOM_SCORE_ADJ, "annotation koordinator.sh/oom-score-adj(-spec)", "low")
    with caplog.at_level(logging.WARNING, logger="koordlet.apis.tenantpolicy"):
        policy.note(p, (first,))
        policy.note(p, (dataclasses.replace(first, reason="other words"),))
        policy.note(p, (first, other))
        policy.note(p, (), latest=False)  # a hook's clean review does not clear the pod list's
        assert policy.refused(p.uid) == (first, other)
        policy.note(p, ())
    assert [r.__dict__["key"] for r in caplog.records] == [KEY_QOS_SYSTEM, KEY_OOM_SCORE_ADJ]
    assert policy.refused(p.uid) == ()


def test_the_record_is_bounded() -> None:
    policy = TenantPolicy()
    refusal = (Refusal(KEY_QOS_SYSTEM, "f", "r"),)
    for i in range(REFUSALS_KEPT + 5):
        policy.note(dataclasses.replace(pod(), uid=f"u{i}"), refusal)
    assert policy.refused("u0") == () and policy.refused(f"u{REFUSALS_KEPT + 4}") == refusal


# --- CLOSIDs ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("num_closids", "groups", "reserve", "allowed"), [
    (16, set(), 1, True),
    (8, set(), 1, True),                                   # 7 free: 1 for the pod, 3 classes, 1 reserve
    (8, {"koordlet-a", "koordlet-b"}, 1, True),            # 5 free
    (8, {"koordlet-a", "koordlet-b", "koordlet-c"}, 1, False),
    (8, {"LSR", "LS", "BE", "koordlet-a", "koordlet-b"}, 1, True),  # classes made: only the reserve is kept
    (8, {"LSR", "LS", "BE", "koordlet-a", "koordlet-b", "koordlet-c"}, 1, False),
    (4, set(), 0, False),                                  # 3 free, all for the classes
])
def test_pod_group_room(num_closids: int, groups: set[str], reserve: int, allowed: bool) -> None:
    assert (pod_group_room(num_closids, groups, reserve) is None) is allowed


# --- the config section -------------------------------------------------------------------------------------


def test_config_section_from_yaml_and_flag(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("tenant:\n  qosLseNamespaces: db, cache\n  podResctrlClosidReserve: 2\n")
    config = load(path, {"tenant.privilegedNamespaces": "kube-system,ops"})
    assert config.tenant == TenantConfig(privileged_namespaces="kube-system,ops", qos_lse_namespaces="db, cache",
                                         pod_resctrl_closid_reserve=2)


@pytest.mark.parametrize(("yaml_text", "message"), [
    ("tenant:\n  qosLseNamespaces: Bad_Name\n", "tenant.qosLseNamespaces: not namespace names"),
    ("tenant:\n  privilegedNamespaces: '-'\n", "tenant.privilegedNamespaces: not namespace names"),
    ("tenant:\n  podResctrlClosidReserve: -1\n", "tenant.podResctrlClosidReserve: must be >= 0"),
    ("tenant:\n  bogus: 1\n", r"tenant: unknown key\(s\) bogus"),
])
def test_config_section_errors_name_the_field(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=message):
        load(path)


def test_every_list_has_a_flag() -> None:
    import argparse

    from koordlet.config.load import add_flags, flags_from_args

    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["--tenant-privileged-namespaces=kube-system,koordinator-system",
                              "--tenant-skip-hook-server-namespaces=koordinator-system",
                              "--tenant-pod-resctrl-closid-reserve=3"])
    config = load(None, flags_from_args(args))
    policy = TenantPolicy.from_config(config.tenant)
    assert policy.allows("qosClassSystem", "koordinator-system") and policy.closid_reserve == 3
    assert not policy.allows("skipHookServer", "kube-system")
