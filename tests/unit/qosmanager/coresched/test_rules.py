"""Group ids and per-class params (Koordinator ``getPodEnabledAndGroup`` and ``newParam``), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.apis.extension import LABEL_CORE_SCHED_GROUP, QoSClass
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.isolation.coresched import rules
from koordlet.isolation.coresched.rules import LABEL_CORE_SCHED_POLICY, ClassParam
from tests.unit.qosmanager.fakes import make_pod


def slo(policy: str, **classes: dict[str, Any]) -> NodeSLOSpec:
    strategy: dict[str, Any] = {"policies": {"cpuPolicy": policy}}
    strategy.update({name: {"cpuQOS": cfg} for name, cfg in classes.items()})
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": strategy}))


SEED = slo("coreSched", lsClass={"enable": True, "coreExpeller": True, "schedIdle": 0},
           beClass={"enable": True, "coreExpeller": False, "schedIdle": 1})


@pytest.mark.parametrize(("spec", "qos", "expected"), [
    (SEED, QoSClass.LS, ClassParam(enabled=True, expeller=True, idle=False)),
    (SEED, QoSClass.BE, ClassParam(enabled=True, expeller=False, idle=True)),
    # lsrClass defaults: enable false, coreExpeller true (Koordinator's defaults), schedIdle 0.
    (SEED, QoSClass.LSR, ClassParam(enabled=False, expeller=True, idle=False)),
    (SEED, QoSClass.LSE, ClassParam(enabled=False, expeller=True, idle=False)),
    (SEED, QoSClass.SYSTEM, ClassParam()),
    # Under groupIdentity every flag is off, whatever cpuQOS says.
    (slo("groupIdentity", beClass={"enable": True, "schedIdle": 1}), QoSClass.BE, ClassParam()),
])
def test_class_params(spec: NodeSLOSpec, qos: QoSClass, expected: ClassParam) -> None:
    assert rules.rule_of(spec).param(qos) == expected


@pytest.mark.parametrize(("qos", "labels", "enabled", "group"), [
    ("LS", {}, True, "-expeller"),
    ("LS", {LABEL_CORE_SCHED_GROUP: "g1"}, True, "default/g1-expeller"),
    ("BE", {LABEL_CORE_SCHED_GROUP: "g1"}, True, "default/g1"),
    ("BE", {LABEL_CORE_SCHED_GROUP: "g1", LABEL_CORE_SCHED_POLICY: "exclusive"}, True, "uid-p"),
    ("LS", {LABEL_CORE_SCHED_GROUP: "g1", LABEL_CORE_SCHED_POLICY: "exclusive"}, True, "uid-p-expeller"),
    ("BE", {LABEL_CORE_SCHED_GROUP: "g1", LABEL_CORE_SCHED_POLICY: "none"}, False, "default/g1"),
    ("BE", {LABEL_CORE_SCHED_GROUP: "g1", LABEL_CORE_SCHED_POLICY: "bogus"}, True, "default/g1"),  # unknown = default
    ("LSR", {LABEL_CORE_SCHED_GROUP: "g1"}, False, "default/g1-expeller"),
    ("SYSTEM", {LABEL_CORE_SCHED_GROUP: "g1"}, False, ""),
])
def test_pod_group(qos: str, labels: dict[str, str], enabled: bool, group: str) -> None:
    verdict = rules.pod_group(rules.rule_of(SEED), make_pod("p", qos, labels=labels))
    assert (verdict.enabled, verdict.group) == (enabled, group)


def test_pod_policy_reads_only_known_values() -> None:
    assert rules.pod_policy({LABEL_CORE_SCHED_POLICY: "none"}) == "none"
    assert rules.pod_policy({LABEL_CORE_SCHED_POLICY: "exclusive"}) == "exclusive"
    assert rules.pod_policy({LABEL_CORE_SCHED_POLICY: "Exclusive"}) == ""
    assert rules.pod_policy({}) == ""
