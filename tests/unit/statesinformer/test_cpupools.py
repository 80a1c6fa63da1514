"""The node's CPU shared pools (``node.koordinator.sh/cpu-shared-pools``) and kubelet's pinned CPUs, from
the pods, the reservation and kubelet's ``cpu_manager_state``.

Worked example (8 CPUs on 2 NUMA nodes / sockets with HT: NUMA 0 = 0,1,4,5; NUMA 1 = 2,3,6,7):

* pod ``lse`` (LSE) bound to CPU 2 and pod ``lsr`` (LSR) bound to CPU 6: out of the pool;
* Guaranteed pod ``g`` without a QoS label: kubelet pinned its container ``main`` to CPU 3: out;
* Guaranteed pod ``ls-g`` labelled LS: kubelet pinned it to CPU 7 but the cpuset hook places it on the
  shared pool, so CPU 7 stays (upstream ``calGuaranteedCpu`` skips pods Koordinator manages);
* an entry of a pod the list does not hold (kubelet not done cleaning up) pinned CPU 5: out;
* kubelet reserves CPU 0: out.

Pools: NUMA 0 = 1,4 and NUMA 1 = 7."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS, LABEL_QOS
from koordlet.config.load import load
from koordlet.errors import ParseError
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import cpuset
from koordlet.statesinformer.cpumanager import KubeletCPUManager, PinnedContainer, parse_cpu_manager_state
from koordlet.statesinformer.cpupools import CPUPools, kubelet_pinned, pools_annotation, shared_pools
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.informer import StatesInformer
from koordlet.statesinformer.reservation import Reservation
from koordlet.system.kubepaths import CgroupDriver
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import make_node, make_pod


def bound(cpus: str) -> dict[str, str]:
    return {ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": cpus})}


PODS = (
    make_pod("lse", "LSE", annotations=bound("2")),
    make_pod("lsr", "LSR", annotations=bound("6")),
    make_pod("g", "LSR", labels={LABEL_QOS: ""}),
    make_pod("ls-g", "LSR", labels={LABEL_QOS: "LS"}),
    make_pod("be", "BE"),
)
STATE = {"policyName": "static", "defaultCpuSet": "0-2,4,6",
         "entries": {"uid-g": {"main": "3"}, "uid-ls-g": {"main": "7"}, "uid-gone": {"app": "5"}},
         "checksum": 1234567}
STATIC = Reservation(cpus=(0,), cpu_manager_policy="static")
EXPECTED = '[{"socket":0,"node":0,"cpuset":"1,4"},{"socket":1,"node":1,"cpuset":"7"}]'


def test_state_file_format() -> None:
    state = parse_cpu_manager_state(json.dumps(STATE), "/k/cpu_manager_state")
    assert (state.policy_name, state.default_cpus) == ("static", (0, 1, 2, 4, 6))
    assert state.assignments == (PinnedContainer("uid-g", "main", (3,)), PinnedContainer("uid-gone", "app", (5,)),
                                 PinnedContainer("uid-ls-g", "main", (7,)))
    none = parse_cpu_manager_state('{"policyName":"none","defaultCpuSet":"","checksum":1353318690}', "f")
    assert (none.policy_name, none.assignments) == ("none", ())


@pytest.mark.parametrize(("text", "message"), [
    ("", "empty"),
    ("{not json", "not JSON"),
    ("[]", "expected a JSON object"),
    ('{"defaultCpuSet": "0-3"}', "policyName: expected a policy name"),
    ('{"policyName": "static", "defaultCpuSet": "0-x"}', "defaultCpuSet '0-x': bad list element"),
    ('{"policyName": "static", "entries": ["a"]}', "entries: expected an object of pod uid"),
    ('{"policyName": "static", "entries": {"cid": "1-2"}}', r"entries\['cid'\]: .*older kubelet's v1 checkpoint"),
    ('{"policyName": "static", "entries": {"u": {"c": 3}}}', r"entries\['u'\]\['c'\]: expected a cpu list"),
])
def test_garbage_state_names_the_file_and_the_field(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=f"^/k/cpu_manager_state: .*{message}"):
        parse_cpu_manager_state(text, "/k/cpu_manager_state")


def test_pinned_skips_pods_koordinator_places_and_finds_cgroup_dirs() -> None:
    state = parse_cpu_manager_state(json.dumps(STATE), "f")
    pinned = kubelet_pinned(state, PODS)
    assert [(p.pod_uid, p.cpus, p.cgroup_dir) for p in pinned] == [
        ("uid-g", (3,), "kubepods/poduid-g/g-main"),
        ("uid-gone", (5,), ""),
    ]
    assert kubelet_pinned(None, PODS) == ()


def test_worked_example() -> None:
    pinned = kubelet_pinned(parse_cpu_manager_state(json.dumps(STATE), "f"), PODS)
    pools = shared_pools(make_node(8, numa_nodes=2), PODS, (0,), pinned)
    assert pools_annotation(pools) == EXPECTED
    # Nothing bound, pinned or reserved: every CPU of each NUMA node.
    assert pools_annotation(shared_pools(make_node(8, numa_nodes=2), (), (), ())) == (
        '[{"socket":0,"node":0,"cpuset":"0-1,4-5"},{"socket":1,"node":1,"cpuset":"2-3,6-7"}]')
    # A NUMA node with nothing left has no entry.
    assert pools_annotation(shared_pools(make_node(4, numa_nodes=2), (), (1, 3), ())) == (
        '[{"socket":0,"node":0,"cpuset":"0,2"}]')


def test_garbage_resource_status_binds_nothing() -> None:
    odd = make_pod("odd", "LSE", annotations={ANNOTATION_RESOURCE_STATUS: "{oops"})
    assert pools_annotation(shared_pools(make_node(2), (odd,), (), ())) == '[{"socket":0,"node":0,"cpuset":"0-1"}]'


@dataclass
class Sources:
    """What the informer hands :class:`CPUPools`."""

    state: Path
    pods: tuple[PodMeta, ...] = PODS
    reservation: Reservation = STATIC
    ready: bool = True

    def pools(self) -> CPUPools:
        return CPUPools(str(self.state), lambda: make_node(8, numa_nodes=2), lambda: self.pods,
                        lambda: self.reservation, lambda: self.ready)

    def write(self, body: Any) -> None:
        """Like kubelet: a new file renamed over the old one."""
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(body if isinstance(body, str) else json.dumps(body))
        os.replace(tmp, self.state)


@pytest.fixture
def sources(tmp_path: Path) -> Sources:
    src = Sources(tmp_path / "cpu_manager_state")
    src.write(STATE)
    return src


def test_pools_and_pins_from_the_state_file(sources: Sources) -> None:
    pools = sources.pools()
    assert pools.annotation() == EXPECTED
    manager = pools.cpu_manager()
    assert (manager.policy, manager.pinned_cpus, manager.pinned_dirs, manager.error) == (
        "static", frozenset({3, 5}), ("kubepods/poduid-g/g-main",), "")


def test_recomputed_when_pods_reservation_or_file_change(sources: Sources) -> None:
    pools = sources.pools()
    assert pools.annotation() == EXPECTED
    # Only lse left: lsr's CPU 6 is free; kubelet has not cleaned the entries of g and ls-g yet, and
    # ls-g, no longer listed, is no longer known to be placed by Koordinator: its CPU 7 counts as pinned.
    sources.pods = PODS[:1]
    assert pools.annotation() == '[{"socket":0,"node":0,"cpuset":"1,4"},{"socket":1,"node":1,"cpuset":"6"}]'
    sources.reservation = replace(STATIC, cpus=())
    assert pools.annotation() == '[{"socket":0,"node":0,"cpuset":"0-1,4"},{"socket":1,"node":1,"cpuset":"6"}]'
    sources.write({**STATE, "entries": {}})
    assert pools.annotation() == '[{"socket":0,"node":0,"cpuset":"0-1,4-5"},{"socket":1,"node":1,"cpuset":"3,6-7"}]'
    assert pools.cpu_manager().pinned == ()


def test_garbage_state_file_keeps_the_last_good_pools_and_says_why(sources: Sources,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    pools = sources.pools()
    assert pools.annotation() == EXPECTED
    sources.write('{"policyName": "static", "entries": {"uid-g": {"main": "3-"}}}')
    with caplog.at_level(logging.ERROR):
        assert pools.annotation() == EXPECTED
        assert pools.annotation() == EXPECTED
    manager = pools.cpu_manager()
    assert manager.pinned_cpus == frozenset({3, 5})
    assert manager.error.startswith(f"{sources.state}: entries['uid-g']['main'] '3-': bad list element")
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and errors[0].__dict__["error"] == manager.error  # once, not per call
    sources.write({**STATE, "entries": {"uid-g": {"main": "3"}}})
    assert pools.annotation() == '[{"socket":0,"node":0,"cpuset":"1,4-5"},{"socket":1,"node":1,"cpuset":"7"}]'
    assert pools.cpu_manager().error == ""


def test_unknown_until_ready_or_while_a_static_state_was_never_read(sources: Sources) -> None:
    sources.ready = False
    pools = sources.pools()
    assert pools.annotation() is None
    sources.ready = True
    assert pools.annotation() == EXPECTED
    sources.write("garbage")
    pools = sources.pools()  # a koordlet starting now
    assert pools.annotation() is None  # static policy, no good state yet: the pins are unknown
    assert "not JSON" in pools.cpu_manager().error
    sources.state.unlink()
    assert pools.annotation() is None
    assert "missing while kubelet's cpuManagerPolicy is static" in pools.cpu_manager().error
    # Under the none policy kubelet pins nothing: no file is fine.
    sources.reservation = Reservation(cpus=(0,))
    assert pools.annotation() == '[{"socket":0,"node":0,"cpuset":"1,4-5"},{"socket":1,"node":1,"cpuset":"3,7"}]'
    assert pools.cpu_manager() == KubeletCPUManager("none", (), "")


def test_unreadable_state_file_is_an_error_naming_it(sources: Sources) -> None:
    sources.state.unlink()
    sources.state.mkdir()  # open() fails with EISDIR
    pools = sources.pools()
    assert pools.annotation() is None
    assert pools.cpu_manager().error.startswith(f"{sources.state}: cannot read")


def test_informer_serves_the_pools_to_the_cpuset_hook(fake_host: FakeHost, tmp_path: Path) -> None:
    kubelet_dir = tmp_path / "kubelet"
    kubelet_dir.mkdir()
    (kubelet_dir / "cpu_manager_state").write_text(json.dumps(STATE))
    config_file = tmp_path / "koordlet.yaml"
    config_file.write_text(f"host: {{varLibKubeletRootDir: {kubelet_dir}}}\n")
    config = load(config_file)
    assert config.host.var_lib_kubelet_root_dir == str(kubelet_dir)
    informer = StatesInformer(config, fake_host.layout(), CgroupDriver.CGROUPFS, make_node(8, numa_nodes=2))
    assert informer.shared_pools() is None  # neither the pod list nor /configz read yet
    informer.set_pods(list(PODS))
    assert informer.shared_pools() is None
    informer.set_reservation(STATIC)
    assert informer.shared_pools() == EXPECTED
    assert informer.cpu_manager().pinned_cpus == frozenset({3, 5})
    ls = make_pod("web", "LS").pod
    runner = HookRunner([cpuset.new(HookDeps(shared_pools=informer.shared_pools))])
    result = runner.run(HookRequest(Stage.PRE_CREATE_CONTAINER, ls, "", ls.containers[0], "cid"))
    assert (result.adjustment.values, result.errors) == ({"cpuset_cpus": "1,4,7"}, [])
