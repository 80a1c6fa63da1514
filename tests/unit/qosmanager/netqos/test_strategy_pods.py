"""The netqos strategy and pods with a bandwidth of their own (annotation ``koordinator.sh/networkQOS``):
under tc they leave their class's addresses for a PodBandwidth whose minor is the one the tc hook writes to
net_cls.classid; a bad annotation or a limit above the node's bandwidth is that pod's note, not the node's
failure; terway-qos ignores the annotation (its backend has no per-pod class)."""

from __future__ import annotations

from pathlib import Path

from koordlet.isolation.netqos.podlimit import pod_minor
from koordlet.resourceexecutor.netqos import PodBandwidth
from koordlet.statesinformer.framework import PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import make_pod
from tests.unit.qosmanager.netqos.test_strategy import BE_50M, M, applied, make_rig, slo, standard_pods, with_ips

ANN = "koordinator.sh/networkQOS"


def limited(name: str, qos: str, text: str, *ips: str) -> PodMeta:
    return with_ips(make_pod(name, qos, annotations={ANN: text}), *ips)


def test_pods_with_limits_get_their_own_bandwidth(fake_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_host, tmp_path)
    rig.informer.pod_list[:] = [
        *standard_pods(),
        limited("own", "LS", '{"ingressLimit": "20M", "egressLimit": "50M"}', "10.0.0.20"),
        limited("zero", "BE", '{"egressLimit": "0"}', "10.0.0.21"),  # limits nothing: stays in BE
        limited("bad", "BE", '{"egressLimit": 5}', "10.0.0.22"),
        limited("huge", "BE", '{"egressLimit": "5G"}', "10.0.0.23"),
    ]
    decision = rig.strategy.run_once(slo(be=BE_50M))
    (plan,) = applied(rig)
    assert plan.pods == (
        PodBandwidth("default/huge", pod_minor("uid-huge"), "be", 1000 * M, 0, ("10.0.0.23",)),
        PodBandwidth("default/own", pod_minor("uid-own"), "ls", 50 * M, 20 * M, ("10.0.0.20",)),
    )
    assert "10.0.0.20" not in plan.ls.source_ips and "10.0.0.23" not in plan.be.source_ips
    assert {"10.0.0.21", "10.0.0.22"} <= set(plan.be.source_ips)
    assert "pod default/bad: annotation koordinator.sh/networkQOS: egressLimit must be a quantity" in decision.summary
    assert "pod default/huge: koordinator.sh/networkQOS egress limit 5000000000 bps is above" in decision.summary
    assert "2 pods with their own bandwidth" in decision.summary


def test_terway_ignores_the_annotation(fake_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_host, tmp_path)
    rig.informer.pod_list[:] = [limited("own", "LS", '{"egressLimit": "50M"}', "10.0.0.20")]
    rig.strategy.run_once(slo("terway-qos", be=BE_50M))
    (plan,) = applied(rig, "terway-qos")
    assert plan.pods == () and plan.ls.source_ips == ("10.0.0.20",)
