"""The NRI answer's range checks: the same ranges koord-runtime-proxy applies to a hook server's answer."""

from __future__ import annotations

from typing import Any

import pytest

from koordlet.apis.proto.nri.v1alpha1 import api_pb2
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hook
from koordlet.runtimehooks.framework import Adjustment
from koordlet.runtimehooks.nri import convert
from runtimeproxy.intercept import check_resources


def adjustment(**values: object) -> Adjustment:
    adj = Adjustment()
    for key, value in values.items():
        adj.values[key] = value
        adj.owners[key] = "test"
    return adj


# (adjustment values, the proxy's LinuxContainerResources fields, valid)
CASES: list[tuple[dict[str, object], dict[str, Any], bool]] = [
    ({"cpu_shares": 2, "cpu_quota": -1, "cpu_period": 100_000}, {"cpu_shares": 2, "cpu_quota": -1,
                                                                  "cpu_period": 100_000}, True),
    ({"cpu_shares": 262144}, {"cpu_shares": 262144}, True),
    ({"cpu_shares": 262145}, {"cpu_shares": 262145}, False),
    ({"cpu_shares": 1}, {"cpu_shares": 1}, False),
    ({"cpu_quota": 999}, {"cpu_quota": 999}, False),
    ({"cpu_quota": -2}, {"cpu_quota": -2}, False),
    ({"cpu_quota": 1000}, {"cpu_quota": 1000}, True),
    ({"cpu_period": 999}, {"cpu_period": 999}, False),
    ({"cpu_period": 1_000_001}, {"cpu_period": 1_000_001}, False),
    ({"cpu_period": 1_000_000}, {"cpu_period": 1_000_000}, True),
    ({"memory_limit": 1 << 30}, {"memory_limit_in_bytes": 1 << 30}, True),
    ({"memory_limit": -5}, {"memory_limit_in_bytes": -5}, False),
    ({"oom_score_adj": -1000}, {"oom_score_adj": -1000}, True),
    ({"oom_score_adj": -1001}, {"oom_score_adj": -1001}, False),
    ({"oom_score_adj": 1001}, {"oom_score_adj": 1001}, False),
    ({"cpuset_cpus": "0-3,6"}, {"cpuset_cpus": "0-3,6"}, True),
    ({"cpuset_cpus": "3-1"}, {"cpuset_cpus": "3-1"}, False),
    ({"cpuset_cpus": "0-3;rm -rf"}, {"cpuset_cpus": "0-3;rm -rf"}, False),
    ({"cpuset_mems": "x"}, {"cpuset_mems": "x"}, False),
]


@pytest.mark.parametrize(("values", "proxy_fields", "valid"), CASES)
def test_nri_answers_are_checked_as_the_proxy_checks(values: dict[str, object], proxy_fields: dict[str, Any],
                                                     valid: bool) -> None:
    assert (check_resources(hook.LinuxContainerResources(**proxy_fields)) is None) is valid
    if valid:
        convert.container_adjustment(adjustment(**values))
        convert.container_updates("c1", adjustment(**values))
        return
    with pytest.raises(convert.InvalidAdjustment, match="invalid adjustment"):
        convert.container_adjustment(adjustment(**values))
    if "oom_score_adj" not in values:  # ContainerUpdate carries no oom_score_adj
        with pytest.raises(convert.InvalidAdjustment):
            convert.container_updates("c1", adjustment(**values))


def test_unlimited_memory_passes_as_nri_carries_it() -> None:
    # NRI sends -1 as is (runc: unlimited); the proxy's CRI field uses 0 for it instead.
    adjust = convert.container_adjustment(adjustment(memory_limit=-1))
    assert adjust.linux.resources.memory.limit.value == -1


def test_every_problem_is_named() -> None:
    with pytest.raises(convert.InvalidAdjustment) as info:
        convert.container_adjustment(adjustment(cpu_shares=1, cpu_quota=5, oom_score_adj=-5000))
    message = str(info.value)
    assert "cpu.shares 1" in message and "cpu.quota 5" in message and "oom_score_adj -5000" in message


@pytest.mark.parametrize("text", ["9" * 5000, "1-" + "9" * 5000, "0-3\n", "0" * 70_000])
def test_hostile_cpulists_are_refused_without_crashing(text: str) -> None:
    assert convert.resource_problems(api_pb2.LinuxResources(cpu=api_pb2.LinuxCPU(cpus=text)))


@pytest.mark.parametrize("text", ["1-" + "9" * 5000, "0-3\n"])
def test_the_proxy_refuses_hostile_cpulists_too(text: str) -> None:
    assert check_resources(hook.LinuxContainerResources(cpuset_cpus=text)) is not None
