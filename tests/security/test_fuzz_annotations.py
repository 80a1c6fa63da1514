"""Fuzzing of the pod labels and annotations koordlet reads: every one is written by the pod's owner, a tenant.

Each reader is called on pods whose labels and annotations come from strategies shaped like the real values
(JSON objects with the real field names, integers around the limits, cpu lists) mixed with garbage and JSON
nested past the recursion limit.  Contracts, from what the callers catch:

- hooks (``runtimehooks/hooks/*``) raise ``KoordletError`` naming the pod, so the hook runner applies the
  failure policy;
- ``apis.extension.resource_status_cpus`` raises ``ValueError``; resctrl's ``annotation.parse`` ``PlanError``;
  ``parse_node_reservation`` ``ParseError``;
- the QoS manager's per-pod configs (cgreconcile, cpuburst), eviction picking, core scheduling, the QoS and
  priority helpers and the tenant policy never raise (a bad value is reported and ignored).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.apis import extension
from koordlet.apis.nodeslo import CPUBurstStrategy, MemoryQOSCfg, default_cpu_burst_strategy
from koordlet.apis.pod import Container, Pod, Resources
from koordlet.companion.batchresource import parse_node_reservation
from koordlet.errors import KoordletError, ParseError
from koordlet.isolation.coresched import rules as coresched
from koordlet.isolation.resctrl import annotation as resctrl_annotation
from koordlet.isolation.resctrl.schemata import PlanError
from koordlet.qosmanager import evictpick
from koordlet.qosmanager.plugins.cgreconcile import podconfig as memory_podconfig
from koordlet.qosmanager.plugins.cpuburst import podconfig as burst_podconfig
from koordlet.runtimehooks.hooks import batchresource as batch_hook
from koordlet.runtimehooks.hooks import cpuset as cpuset_hook
from koordlet.runtimehooks.hooks import groupidentity, oomscoreadj
from koordlet.system.kubepaths import KubeQoS
from tests.security.fuzzkit import (
    cpulist_text,
    decode,
    fuzz_settings,
    junk_json,
    quantity_value,
    scalars,
    shaped,
    strategy_for,
)

DEEP = "[" * 3000
"""JSON nested past the interpreter's recursion limit (``json.loads`` raises RecursionError on it)."""

_CONTAINERS = ("main", "sidecar")


def _json_text(values: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
    """Annotation text: the JSON of ``values``, junk JSON, deep nesting, or any text."""
    return st.one_of(st.builds(json.dumps, values), st.builds(json.dumps, values), st.builds(json.dumps, junk_json(6)),
                     st.just(DEEP), st.just("{\"a\": " + DEEP), st.text(max_size=20))


_int_text = st.one_of(st.integers(-2000, 2000).map(str), st.sampled_from(["", "-1000", "-1001", "+5", "1e3", " 5",
                                                                          "9" * 5000, "\uff11\uff12", "0x10", "-0"]),
                      st.text(max_size=8))
_container_name = st.one_of(st.sampled_from(_CONTAINERS), st.text(max_size=6))
_resources = st.dictionaries(st.sampled_from(["kubernetes.io/batch-cpu", "kubernetes.io/batch-memory", "cpu"]),
                             quantity_value, max_size=3)
_resctrl_range = st.one_of(st.lists(st.integers(-5, 105), min_size=0, max_size=3), scalars)

ANNOTATION_VALUES: dict[str, st.SearchStrategy[str]] = {
    extension.ANNOTATION_RESOURCE_STATUS: _json_text(shaped({
        "cpuset": cpulist_text,
        "numaNodeResources": st.lists(shaped({"node": st.integers(-1, 9), "resources": _resources}), max_size=2)})),
    extension.ANNOTATION_EXTENDED_RESOURCE_SPEC: _json_text(shaped({"containers": st.dictionaries(
        _container_name, shaped({"requests": _resources, "limits": _resources}), max_size=2)})),
    oomscoreadj.ANNOTATION_OOM_SCORE_ADJ: _int_text,
    oomscoreadj.ANNOTATION_OOM_SCORE_ADJ_SPEC: _json_text(st.dictionaries(
        _container_name, st.one_of(st.integers(-2000, 2000), scalars), max_size=2)),
    groupidentity.ANNOTATION_CPU_QOS: _json_text(shaped({"groupIdentity": st.integers(-3, 3),
                                                         "enable": st.booleans()})),
    memory_podconfig.ANNOTATION_MEMORY_QOS: _json_text(st.builds(
        lambda cfg, policy: {**cfg, "policy": policy}, strategy_for(MemoryQOSCfg),
        st.one_of(st.sampled_from(["default", "auto", "none", ""]), scalars, st.lists(scalars, max_size=1)))),
    burst_podconfig.ANNOTATION_CPU_BURST: _json_text(strategy_for(CPUBurstStrategy)),
    resctrl_annotation.ANNOTATION_RESCTRL: _json_text(shaped({
        "llc": shaped({"schemata": shaped({"range": _resctrl_range}),
                       "schemataPerCache": st.lists(shaped({"cacheID": st.integers(-1, 4), "range": _resctrl_range}),
                                                    max_size=2)}),
        "mb": shaped({"schemata": shaped({"percent": st.integers(-5, 105)}),
                      "schemataPerCache": st.lists(shaped({"cacheID": st.integers(-1, 4),
                                                           "percent": st.integers(-5, 105)}), max_size=2)})})),
    evictpick.ANNOTATION_EVICTION_POLICY: _json_text(st.lists(st.sampled_from(["cpuEvict", "memoryEvict", "x"]),
                                                              max_size=2)),
    evictpick.ANNOTATION_EVICTION_PRIORITY: _int_text,
}
LABEL_VALUES: dict[str, st.SearchStrategy[str]] = {
    extension.LABEL_QOS: st.sampled_from(["LSE", "LSR", "LS", "BE", "SYSTEM", "", "ls", "NONE"]),
    extension.LABEL_PRIORITY_CLASS: st.sampled_from(["koord-prod", "koord-mid", "koord-batch", "koord-free", "x"]),
    extension.LABEL_CORE_SCHED_GROUP: st.text(max_size=20),
    coresched.LABEL_CORE_SCHED_POLICY: st.sampled_from(["none", "exclusive", "", "x"]),
    extension.LABEL_EVICTION_ENABLED: st.sampled_from(["true", "false", "True", ""]),
    evictpick.LABEL_PRIORITY: _int_text,
}


def _maybe(values: dict[str, st.SearchStrategy[str]]) -> st.SearchStrategy[dict[str, str]]:
    return st.fixed_dictionaries({}, optional=values)


pods = st.builds(
    lambda namespace, labels, annotations, kube_qos, priority: Pod(
        uid="0c0ffee0-0000-4000-8000-000000000001", name="p", namespace=namespace, labels=labels,
        annotations=annotations, kube_qos=kube_qos, phase="Running", priority=priority,
        containers=tuple(Container(name, f"containerd://{name}", Resources(cpu_milli=500, memory_bytes=1 << 30),
                                   Resources(cpu_milli=1000, memory_bytes=2 << 30)) for name in _CONTAINERS),
        creation_timestamp="2024-01-02T03:04:05Z"),
    st.sampled_from(["default", "kube-system", "tenant-a"]), _maybe(LABEL_VALUES), _maybe(ANNOTATION_VALUES),
    st.one_of(st.none(), st.sampled_from(list(KubeQoS))), st.one_of(st.none(), st.integers(-10, 10_000)),
)


def _readers() -> dict[str, tuple[Callable[[Pod], Any], tuple[type[BaseException], ...]]]:
    policy_module: Any
    try:
        from koordlet.apis import tenantpolicy as policy_module
    except ImportError:  # the tenant policy arrives with issue 18
        policy_module = None
    readers: dict[str, tuple[Callable[[Pod], Any], tuple[type[BaseException], ...]]] = {
        "extension.resource_status_cpus": (lambda pod: extension.resource_status_cpus(pod.annotations), (ValueError,)),
        "extension.pod_qos/priority_class": (
            lambda pod: (extension.pod_qos(pod.labels, pod.kube_qos),
                         extension.priority_class(pod.priority, pod.labels), pod.qos, pod.priority_class), ()),
        "hook cpuset.resource_status": (cpuset_hook.resource_status, (KoordletError,)),
        "hook oomscoreadj.oom_score_adj": (
            lambda pod: [oomscoreadj.oom_score_adj(pod, name) for name in _CONTAINERS], (KoordletError,)),
        "hook groupidentity.pod_cpu_qos": (groupidentity.pod_cpu_qos, (KoordletError,)),
        "hook batchresource.pod_batch_resources": (batch_hook.pod_batch_resources, (KoordletError,)),
        "qosmanager cgreconcile memoryQOS parse": (
            lambda pod: [memory_podconfig.parse(pod.key, text, pod.qos, None) for text in
                         [pod.annotations.get(memory_podconfig.ANNOTATION_MEMORY_QOS)] if text is not None], ()),
        "qosmanager cpuburst parse": (
            lambda pod: [burst_podconfig.parse(pod.key, text, default_cpu_burst_strategy()) for text in
                         [pod.annotations.get(burst_podconfig.ANNOTATION_CPU_BURST)] if text is not None], ()),
        "qosmanager resctrl annotation.parse": (
            lambda pod: [resctrl_annotation.parse(text) for text in
                         [pod.annotations.get(resctrl_annotation.ANNOTATION_RESCTRL)] if text is not None],
            (PlanError,)),
        "qosmanager evictpick annotations": (
            lambda pod: (evictpick.policy_refusal(pod, "cpuEvict"), evictpick.eviction_priority(pod),
                         evictpick.label_priority(pod, 0), evictpick.eviction_enabled(pod)), ()),
        "qosmanager coresched labels": (
            lambda pod: (coresched.pod_policy(pod.labels),
                         coresched.scoped_group(pod.namespace, pod.labels.get(extension.LABEL_CORE_SCHED_GROUP, ""))),
            ()),
    }
    if policy_module is not None:
        readers["tenantpolicy.TenantPolicy.review"] = (
            lambda pod: policy_module.TenantPolicy().review_all([(pod, False)], memory_capacity_bytes=64 << 30,
                                                                node_cpus=range(8)), ())
    return readers


READERS = _readers()




_HUGE_INT = "9" * 5000
_INT_KEYS = (oomscoreadj.ANNOTATION_OOM_SCORE_ADJ, evictpick.ANNOTATION_EVICTION_PRIORITY)
_WORST_JSON = Pod("u", "p", "default", {}, {key: DEEP for key in ANNOTATION_VALUES if key not in _INT_KEYS},
                  KubeQoS.BURSTABLE, "Running", None, containers=(Container("main", "containerd://main"),))
"""Every JSON annotation nested past the recursion limit."""
_WORST_INT = Pod("u", "p", "default", {evictpick.LABEL_PRIORITY: _HUGE_INT}, dict.fromkeys(_INT_KEYS, _HUGE_INT),
                 KubeQoS.BURSTABLE, "Running", None, containers=(Container("main", "containerd://main"),))
"""Every integer label and annotation past Python's 4300-digit conversion limit."""


@pytest.mark.parametrize("reader", sorted(READERS))
@fuzz_settings(250)
@given(pod=pods)
@example(pod=_WORST_JSON)
@example(pod=_WORST_INT)
def test_pod_labels_and_annotations(reader: str, pod: Pod) -> None:
    call, allowed = READERS[reader]
    decode(f"annotation {reader}", lambda: call(pod), allowed)


node_annotations = _maybe({
    extension.ANNOTATION_NODE_RESERVATION: _json_text(shaped({
        "resources": st.dictionaries(st.sampled_from(["cpu", "memory", "x"]), quantity_value, max_size=2),
        "reservedCPUs": cpulist_text})),
    cpuset_hook.ANNOTATION_NODE_CPU_SHARED_POOLS: _json_text(st.lists(shaped({
        "socket": st.integers(-1, 2), "node": st.integers(-1, 2), "cpuset": cpulist_text}), max_size=3)),
})


@fuzz_settings(200)
@given(annotations=node_annotations)
@example(annotations={extension.ANNOTATION_NODE_RESERVATION: DEEP})
def test_node_reservation(annotations: dict[str, str]) -> None:
    """The companion's batch calculation reads the Node's reservation annotation."""
    decode("node annotation reservation (companion)", lambda: parse_node_reservation("node-a", annotations),
           (ParseError,))


@fuzz_settings(200)
@given(annotations=node_annotations)
@example(annotations={cpuset_hook.ANNOTATION_NODE_CPU_SHARED_POOLS: DEEP})
def test_node_cpu_shared_pools(annotations: dict[str, str]) -> None:
    """The cpuset hook reads the Node's shared-pools annotation for every LS pod."""
    pod = Pod("u", "p", "default", {}, {}, KubeQoS.BURSTABLE, "Running", None)
    raw = annotations.get(cpuset_hook.ANNOTATION_NODE_CPU_SHARED_POOLS)
    if raw is not None:
        decode("node annotation cpu-shared-pools (cpuset hook)", lambda: cpuset_hook.shared_pools(raw, pod),
               (KoordletError,))
