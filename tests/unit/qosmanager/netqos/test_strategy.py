"""The netqos strategy against a recording backend: gates and switches, the exact plan handed over (pod
addresses by class, interface, total), apply only on change or after the force-update interval, bad input
rejected with the field named while the last good plan stays, switch-off and policy change clear once."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config.types import QoSManagerConfig
from koordlet.errors import KoordletError, Unsupported
from koordlet.qosmanager.framework import Options
from koordlet.qosmanager.plugins import netqos
from koordlet.qosmanager.plugins.netqos import NetQoSStrategy
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoSPlan
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.nodeslo import spec_json_from_text
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, make_options, make_pod
from tests.unit.resourceexecutor.fakes import IntendedSink, MemoryAudit

G = 1_000_000_000
M = 1_000_000
T0 = 1_700_000_000.0
BE = "resourceQOSStrategy.beClass.networkQOS"
# Two default routes: eth0 has the lower metric; a non-default route on eth2.
ROUTE = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth1\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n"
    "eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
    "eth2\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"
)


@dataclass
class RecordingNetQoS:
    policy: str
    calls: list[tuple[str, Any]] = field(default_factory=list)
    fail: Exception | None = None

    def apply(self, plan: NetQoSPlan) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(("apply", plan))

    def clear(self) -> None:
        if self.fail is not None:
            raise self.fail
        self.calls.append(("clear", None))

    def describe(self) -> dict[str, object]:
        return {}


@dataclass
class Backends:
    made: dict[str, RecordingNetQoS] = field(default_factory=dict)

    def __call__(self, policy: str) -> RecordingNetQoS:
        assert policy not in self.made, "the strategy builds each backend once"
        self.made[policy] = RecordingNetQoS(policy)
        return self.made[policy]

    def calls(self, policy: str) -> list[str]:
        return [c for c, _ in self.made[policy].calls] if policy in self.made else []


def with_ips(meta: PodMeta, *ips: str, phase: str = "Running") -> PodMeta:
    return dataclasses.replace(meta, pod=dataclasses.replace(meta.pod, ips=ips, phase=phase))


def standard_pods() -> list[PodMeta]:
    return [
        with_ips(make_pod("web", "LS"), "10.0.0.2"),
        with_ips(make_pod("db", "LSR"), "10.0.0.3", "fd00::3"),
        with_ips(make_pod("batch", "BE"), "10.0.0.4"),
        with_ips(make_pod("agent", "SYSTEM"), "10.0.0.5"),
        with_ips(make_pod("hostnet", "BE")),  # host network: no pod addresses
        with_ips(make_pod("done", "BE"), "10.0.0.9", phase="Succeeded"),
    ]


def spec(obj: dict[str, Any]) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json(obj, "spec"))


def slo(policy: str = "tc", total: str = "1000M", ls: dict[str, Any] | None = None,
        be: dict[str, Any] | None = None) -> NodeSLOSpec:
    qos: dict[str, Any] = {"policies": {"netQOSPolicy": policy}}
    if ls is not None:
        qos["lsClass"] = {"networkQOS": ls}
    if be is not None:
        qos["beClass"] = {"networkQOS": be}
    return spec({"resourceQOSStrategy": qos, "systemStrategy": {"totalNetworkBandwidth": total}})


BE_50M = {"enable": True, "egressLimit": "50M"}


@dataclass
class Rig:
    strategy: NetQoSStrategy
    options: Options
    clock: FakeClock
    informer: FakeInformer
    backends: Backends
    host: FakeHost


@pytest.fixture
def rig(fake_host: FakeHost, tmp_path: Path) -> Rig:
    return make_rig(fake_host, tmp_path)


def make_rig(host: FakeHost, tmp_path: Path, *, config: QoSManagerConfig | None = None,
             gates: dict[str, bool] | None = None, backend: bool = True) -> Rig:
    host.write_proc("net/route", ROUTE)
    host.write_sys("class/net/eth0/speed", "10000\n")
    clock = FakeClock(T0)
    informer = FakeInformer(standard_pods())
    options = make_options(host, tmp_path, informer, clock=clock,
                           gates=gates if gates is not None else {"TCNetworkQoS": True, "TerwayQoS": True},
                           config=config or QoSManagerConfig(resource_force_update_seconds=60.0))
    backends = Backends()
    if backend:
        options = dataclasses.replace(options, netqos=backends)
    return Rig(NetQoSStrategy(options), options, clock, informer, backends, host)


def applied(rig: Rig, policy: str = "tc") -> list[NetQoSPlan]:
    return [p for c, p in rig.backends.made[policy].calls if c == "apply"]


# ------------------------------------------------------------------------------------------ enabled


@pytest.mark.parametrize(("gates", "policy", "ls", "be", "expected"), [
    ({"TCNetworkQoS": True}, "tc", None, BE_50M, True),
    ({"TCNetworkQoS": True}, "tc", {"enable": True}, None, True),
    ({"TCNetworkQoS": True}, "tc", {"enable": False}, {"enable": False}, False),
    ({"TCNetworkQoS": True}, "tc", None, None, False),
    ({"TCNetworkQoS": False}, "tc", None, BE_50M, False),
    ({"TCNetworkQoS": True}, "terway-qos", None, BE_50M, False),  # the other policy's gate
    ({"TerwayQoS": True}, "terway-qos", None, BE_50M, True),
    ({"TerwayQoS": True}, "tc", None, BE_50M, False),
])
def test_enabled(fake_host: FakeHost, tmp_path: Path, gates: dict[str, bool], policy: str,
                 ls: dict[str, Any] | None, be: dict[str, Any] | None, expected: bool) -> None:
    rig = make_rig(fake_host, tmp_path, gates=gates)
    assert rig.strategy.enabled(slo(policy, ls=ls, be=be)) is expected


def test_default_policy_is_tc(rig: Rig) -> None:
    no_policy = spec({"resourceQOSStrategy": {"beClass": {"networkQOS": BE_50M}}})
    assert rig.strategy.enabled(no_policy)
    rig.strategy.run_once(no_policy)
    assert rig.backends.calls("tc") == ["apply"]


def test_package_exports(rig: Rig) -> None:
    assert netqos.NAME == "netqos"
    assert netqos.new(rig.options).name == "netqos"


# ------------------------------------------------------------------------------------------ the plan


def test_exact_plan_with_pod_addresses(rig: Rig) -> None:
    d = rig.strategy.run_once(slo(be=BE_50M))
    assert d.action == "apply"
    assert applied(rig) == [NetQoSPlan(
        interface="eth0",
        total_bps=G,
        system=ClassBandwidth(700 * M, G, 700 * M, G, ("10.0.0.5",)),
        ls=ClassBandwidth(300 * M, G, 300 * M, G, ("10.0.0.2", "10.0.0.3", "fd00::3")),
        be=ClassBandwidth(0, 50 * M, 0, G, ("10.0.0.4",)),
    )]
    assert d.numbers["interface"] == "eth0" and d.numbers["interface_source"] == "default route"
    assert d.numbers["total_bps"] == G and d.numbers["policy"] == "tc"
    assert d.numbers["be"] == {"egress_rate_bps": 0, "egress_ceil_bps": 50 * M, "ingress_rate_bps": 0,
                               "ingress_ceil_bps": G, "configured": True, "source_ips": 1}
    assert d.numbers["ls"]["configured"] is False and d.numbers["ls"]["source_ips"] == 3
    assert "applied tc on eth0 total 1000Mbit/s" in d.summary
    assert "BE egress 0M/50M ingress 0M/1000M (1 IPs)" in d.summary


def test_interface_from_config_and_total_from_link_speed(fake_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_host, tmp_path, config=QoSManagerConfig(net_interface="eth0"))
    d = rig.strategy.run_once(slo(total="0", be={"enable": True, "egressRequest": 10}))
    plan = applied(rig)[0]
    assert (plan.interface, plan.total_bps) == ("eth0", 10 * G)
    assert plan.be.egress_rate_bps == G  # 10 % of 10 Gbit/s
    assert d.numbers["interface_source"] == "--net-interface"
    assert d.numbers["total_source"] == "link speed of eth0"


def test_ipv6_default_route(fake_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_host, tmp_path)
    fake_host.write_proc("net/route", ROUTE.splitlines(keepends=True)[0])
    fake_host.write_proc("net/ipv6_route",
                         "00000000000000000000000000000000 00 00000000000000000000000000000000 00 "
                         "fd000000000000000000000000000001 00000400 00000003 00000000 00000003     ens5\n")
    rig.strategy.run_once(slo(be=BE_50M))
    assert applied(rig)[0].interface == "ens5"


def test_no_link_speed_names_the_total_field(rig: Rig) -> None:
    rig.host.write_sys("class/net/eth0/speed", "-1\n")
    d = rig.strategy.run_once(slo(total="0", be=BE_50M))
    assert d.action == "invalid"
    assert d.numbers["error"].startswith("systemStrategy.totalNetworkBandwidth: 0 means the link speed of eth0")
    assert rig.backends.calls("tc") == []


def test_no_default_route(rig: Rig) -> None:
    rig.host.write_proc("net/route", ROUTE.splitlines(keepends=True)[0])
    d = rig.strategy.run_once(slo(be=BE_50M))
    assert d.action == "invalid" and "no default route" in d.summary


def test_ip_claimed_twice_stays_in_the_higher_class(rig: Rig) -> None:
    rig.informer.pod_list.append(with_ips(make_pod("reused", "BE"), "10.0.0.2"))
    d = rig.strategy.run_once(slo(be=BE_50M))
    plan = applied(rig)[0]
    assert "10.0.0.2" in plan.ls.source_ips and plan.be.source_ips == ("10.0.0.4",)
    assert "10.0.0.2 claimed by default/reused (be) and default/web (ls); kept in ls" in d.summary


# ------------------------------------------------------------------------------------------ when to apply


def test_apply_only_on_change_or_after_force_interval(rig: Rig) -> None:
    config = slo(be=BE_50M)
    assert rig.strategy.run_once(config).action == "apply"
    rig.clock.advance(30)
    d = rig.strategy.run_once(config)
    assert (d.action, rig.backends.calls("tc")) == ("none", ["apply"])
    assert d.summary.startswith("unchanged tc on eth0")
    rig.clock.advance(30)  # 60 s since the apply: forced re-apply repairs changes behind our back
    d = rig.strategy.run_once(config)
    assert d.action == "apply" and d.summary.startswith("re-applied")
    assert rig.backends.calls("tc") == ["apply", "apply"]
    rig.informer.pod_list.append(with_ips(make_pod("new-be", "BE"), "10.0.0.7"))
    rig.clock.advance(1)
    assert rig.strategy.run_once(config).action == "apply"
    assert applied(rig)[-1].be.source_ips == ("10.0.0.4", "10.0.0.7")


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("bad", "message"), [
    ({"egressLimit": "50Q"}, f"{BE}.egressLimit: must be a percentage 0..100 or a non-negative quantity in bits "
                             "per second such as '50M', got '50Q'"),
    ({"egressLimit": 150}, f"{BE}.egressLimit: a percentage must be 0..100, got 150"),
    ({"egressRequest": 60, "egressLimit": 50},
     f"{BE}.egressRequest: 600000000 bps exceeds {BE}.egressLimit (500000000 bps)"),
])
def test_bad_input_keeps_the_last_good_plan(rig: Rig, bad: dict[str, Any], message: str,
                                            caplog: pytest.LogCaptureFixture) -> None:
    good = slo(be=BE_50M)
    rig.strategy.run_once(good)
    # The NodeSLO parser rejects these already; the strategy must too when handed one directly.
    be_cfg = good.resource_qos_strategy.be_class.network_qos  # type: ignore[union-attr]
    broken_cfg = dataclasses.replace(be_cfg, **{_attr(k): v for k, v in bad.items()})
    qos = good.resource_qos_strategy
    broken = dataclasses.replace(good, resource_qos_strategy=dataclasses.replace(
        qos, be_class=dataclasses.replace(qos.be_class, network_qos=broken_cfg)))  # type: ignore[arg-type]
    rig.clock.advance(120)  # even past the force interval nothing is re-applied
    for _ in range(2):
        d = rig.strategy.run_once(broken)
        assert d.action == "invalid"
        assert d.numbers["error"] == message
        assert d.summary == f"network QoS not changed: {message}; tc plan on eth0 stays"
        assert d.numbers["in_force_total_bps"] == G
    assert rig.backends.calls("tc") == ["apply"]
    assert sum(message in r.__dict__.get("error", "") for r in caplog.records) == 1  # logged once, not every round
    assert rig.strategy.run_once(good).action == "apply"  # recovers; force interval passed


def _attr(json_name: str) -> str:
    return "".join("_" + c.lower() if c.isupper() else c for c in json_name)


def test_guarantees_above_total_rejected_before_anything_applied(rig: Rig) -> None:
    d = rig.strategy.run_once(slo(ls={"enable": True, "ingressRequest": 70},
                                  be={"enable": True, "ingressRequest": "400M"}))
    assert d.action == "invalid"
    assert d.numbers["error"] == ("resourceQOSStrategy.lsClass.networkQOS.ingressRequest + "
                                  f"{BE}.ingressRequest: 1100000000 bps guaranteed, more than "
                                  "systemStrategy.totalNetworkBandwidth (1000000000 bps)")
    assert d.summary.endswith("(1000000000 bps)")  # nothing in force to mention
    assert rig.backends.made == {}


def test_backend_failure_is_a_decision_not_an_exception(rig: Rig) -> None:
    config = slo(be=BE_50M)
    rig.strategy.run_once(config)
    rig.backends.made["tc"].fail = Unsupported(95, "no sch_htb module")
    rig.informer.pod_list.pop()  # a change, so the backend is asked
    rig.informer.pod_list.pop(0)
    d = rig.strategy.run_once(config)
    assert d.action == "error"
    assert d.summary.endswith("tc backend refused the plan: [Errno 95] no sch_htb module; tc plan on eth0 stays")
    rig.backends.made["tc"].fail = None
    assert rig.strategy.run_once(config).action == "apply"  # the failed plan was not taken as in force


def test_no_backend_wired(fake_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_host, tmp_path, backend=False)
    d = rig.strategy.run_once(slo(be=BE_50M))
    assert d.action == "skip" and "no network QoS backend" in d.summary


# ------------------------------------------------------------------------------------------ off, switch


def test_disable_clears_once(rig: Rig) -> None:
    config = slo(be=BE_50M)
    assert rig.strategy.run_once(config, enabled=False).action == "none"  # never applied: nothing to clear
    rig.strategy.run_once(config)
    d = rig.strategy.run_once(config, enabled=False)
    assert (d.action, d.summary) == ("clear", "network QoS off: tc shaping removed")
    assert rig.strategy.run_once(config, enabled=False).action == "none"
    assert rig.backends.calls("tc") == ["apply", "clear"]
    assert rig.strategy.run_once(config).action == "apply"  # back on: applied again at once


def test_failed_clear_is_retried(rig: Rig) -> None:
    config = slo(be=BE_50M)
    rig.strategy.run_once(config)
    rig.backends.made["tc"].fail = KoordletError("iptables: resource busy")
    assert rig.strategy.run_once(config, enabled=False).action == "error"
    rig.backends.made["tc"].fail = None
    assert rig.strategy.run_once(config, enabled=False).action == "clear"


def test_policy_switch_clears_the_old_backend(rig: Rig) -> None:
    rig.strategy.run_once(slo("tc", be=BE_50M))
    d = rig.strategy.run_once(slo("terway-qos", be=BE_50M))
    assert d.action == "apply" and "tc cleared" in d.summary
    assert rig.backends.calls("tc") == ["apply", "clear"]
    assert rig.backends.calls("terway-qos") == ["apply"]
    # terway: the LS class is off, so it gets 0 rather than tc's 30 %
    assert applied(rig, "terway-qos")[0].ls == ClassBandwidth(0, G, 0, G, ("10.0.0.2", "10.0.0.3", "fd00::3"))
    rig.strategy.run_once(slo("terway-qos", be=BE_50M), enabled=False)
    assert rig.backends.calls("terway-qos") == ["apply", "clear"]
    assert rig.backends.calls("tc") == ["apply", "clear"]


# The Koordinator v1.5.0 release notes' Terway example (seeds/000_49c666f4e8df4647.txt), as a ConfigMap.
SEED_CONFIGMAP = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: slo-controller-config, namespace: koordinator-system}
data:
  resource-qos-config: |
    {
      "clusterStrategy": {
        "policies": {"netQOSPolicy":"%s"},
        "lsClass": {"networkQOS": {"enable": true, "ingressRequest": "50M", "ingressLimit": "100M",
                                   "egressRequest": "50M", "egressLimit": "100M"}},
        "beClass": {"networkQOS": {"enable": true, "ingressRequest": "10M", "ingressLimit": "200M",
                                   "egressRequest": "10M", "egressLimit": "200M"}}
      }
    }
  system-config: |
    {"clusterStrategy": {"totalNetworkBandwidth": "600M"}}
"""


@pytest.mark.parametrize("policy", ["tc", "terway-qos"])
def test_koordinator_release_example(rig: Rig, policy: str) -> None:
    config = spec(spec_json_from_text(SEED_CONFIGMAP % policy, {}, "seed"))
    assert rig.strategy.enabled(config)
    assert rig.strategy.run_once(config).action == "apply"
    plan = applied(rig, policy)[0]
    assert (plan.total_bps, plan.interface) == (600 * M, "eth0")
    assert plan.system == ClassBandwidth(540 * M, 600 * M, 540 * M, 600 * M, ("10.0.0.5",))
    assert plan.ls == ClassBandwidth(50 * M, 100 * M, 50 * M, 100 * M, ("10.0.0.2", "10.0.0.3", "fd00::3"))
    assert plan.be == ClassBandwidth(10 * M, 200 * M, 10 * M, 200 * M, ("10.0.0.4",))


# ------------------------------------------------------------------------------------------ shadow mode


def test_in_shadow_mode_plans_are_decided_as_in_active_mode_and_no_backend_is_touched(
        fake_host: FakeHost, tmp_path: Path) -> None:
    """The same rounds (apply, unchanged, a new pod, a policy switch, off) in shadow mode and in active mode:
    equal decisions; the shadow backends get no call, and each plan is audited and counted as intended."""
    steps: list[tuple[NodeSLOSpec, bool, PodMeta | None]] = [
        (slo(be=BE_50M), True, None), (slo(be=BE_50M), True, None),
        (slo(be=BE_50M), True, with_ips(make_pod("new-be", "BE"), "10.0.0.7")),
        (slo("terway-qos", be=BE_50M), True, None), (slo("terway-qos", be=BE_50M), False, None)]

    def run(rig: Rig, before_round: Callable[[], None]) -> list[tuple[str, str]]:
        decided = []
        for config, enabled, pod in steps:
            if pod is not None:
                rig.informer.pod_list.append(pod)
            rig.clock.advance(1)
            before_round()
            decision = rig.strategy.run_once(config, enabled)
            decided.append((str(decision.action), decision.summary))
        return decided

    shadowed = make_rig(fake_host, tmp_path / "shadow")
    audit = MemoryAudit()
    intended = IntendedSink()
    executor = ResourceExecutor(shadowed.options.layout, shadowed.clock, audit, metrics=intended)
    shadow = Shadow(ShadowModes(default=True), executor, shadowed.options.evictor)
    shadowed.strategy = NetQoSStrategy(shadow.options_for("netqos", shadowed.options))
    writers = shadow.writers["netqos"]
    in_shadow = run(shadowed, lambda: writers.begin_round(True))
    assert all(not backend.calls for backend in shadowed.backends.made.values())
    assert [(e.resource, e.outcome, e.path) for e in audit.entries] == [
        ("netqos", "intended", "netqos:tc:eth0"), ("netqos", "intended", "netqos:tc:eth0"),
        ("netqos", "intended", "netqos:tc"), ("netqos", "intended", "netqos:terway-qos:eth0"),
        ("netqos", "intended", "netqos:terway-qos")]
    assert "BE egress 0M/50M" in audit.entries[0].new and audit.entries[2].new == "cleared"
    assert intended.counted == [("netqos", "netqos")] * 5

    active = make_rig(fake_host, tmp_path / "active")
    assert run(active, lambda: None) == in_shadow
    assert active.backends.calls("tc") == ["apply", "apply", "clear"]
