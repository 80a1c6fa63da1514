"""resctrl on the real host, which has no resctrl mount (test-host.md): the strategy, given a ResctrlExecutor
on the real ``HostPaths().resctrl_root`` and real pods in real cgroups (class pods and an annotated one),
reports ``unsupported`` with the probe's reason, logs it once, creates nothing under the resctrl path, never
raises — also when switched off — and leaves the pods' processes alone."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config import gates
from koordlet.config.gates import RDT_RESCTRL as GATE
from koordlet.config.gates import RESCTRL as POD_GATE
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.isolation.resctrl.annotation import ANNOTATION_RESCTRL
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.resctrl import ResctrlQoS
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import detect_layout
from koordlet.system.probes import probe_all
from tests.fixtures.realcgroup import RealCgroups
from tests.unit.qosmanager.fakes import FakeInformer, make_pod

LOGGER = "koordlet.qosmanager.plugins.resctrl.strategy"
SLEEP = "import time; time.sleep(600)"
ALL_ON = merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": {
    "lsrClass": {"resctrlQOS": {"enable": True}},
    "lsClass": {"resctrlQOS": {"enable": True}},
    "beClass": {"resctrlQOS": {"enable": True, "catRangeEndPercent": 30, "mbaPercent": 35}},
}}))


def start_pod(groups: RealCgroups, meta: PodMeta) -> int:
    rel = meta.containers[0].cgroup_dir.removeprefix(groups.name + "/")
    groups.mkdir(rel)
    return groups.spawn(rel, SLEEP)


def test_host_without_resctrl_reports_unsupported_and_nothing_raises(
        real_cgroups: RealCgroups, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    groups = real_cgroups
    paths = HostPaths()
    executor = ResctrlExecutor(paths.resctrl_root, time.time, None)
    if executor.unsupported_reason() is None:
        pytest.fail(f"{paths.resctrl_root} holds a mounted resctrl, but test-host.md says this host has none; "
                    "this test would create real control groups there")
    probe = {p.name: p for p in probe_all(paths, native)}["resctrl"]
    assert not probe.supported, probe.reason

    be = make_pod("be", "BE", kube_parent=groups.name)
    ls = make_pod("ls", "LS", kube_parent=groups.name,
                  annotations={ANNOTATION_RESCTRL: '{"llc":{"schemata":{"range":[0,50]}}}'})
    pids = {start_pod(groups, be): be, start_pod(groups, ls): ls}
    layout = detect_layout(paths)
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=FakeInformer([be, ls]),
                      cache=MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time),
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout),
                      config=QoSManagerConfig(), collector=CollectorConfig(),
                      gates=gates.resolve({POD_GATE: True}), clock=time.time, decisions=DecisionLog(),
                      kube_parent=groups.name, resctrl=executor)
    assert options.gates[GATE], "RdtResctrl is on by default"
    strategy = ResctrlQoS(options)
    assert strategy.enabled(ALL_ON)
    caplog.set_level(logging.INFO, logger=LOGGER)

    started = time.perf_counter()
    decisions = [strategy.run_once(ALL_ON) for _ in range(3)]
    elapsed = (time.perf_counter() - started) / len(decisions)
    print(decisions[0].summary)
    print(f"{elapsed * 1e6:.0f} us per unsupported round")
    assert [d.action for d in decisions] == ["unsupported"] * 3
    reason = decisions[0].numbers["reason"]
    assert paths.resctrl_root in reason, reason
    assert decisions[0].summary == f"resctrl QoS not applied: {reason}"
    assert len([r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]) == 1

    off = strategy.run_once(ALL_ON, enabled=False)
    print(off.summary)
    assert off.action == "none", off.summary
    assert not os.path.exists(paths.resctrl_root) or not os.listdir(paths.resctrl_root)
    for pid, meta in pids.items():
        assert options.reader.read("cgroup_procs", meta.containers[0].cgroup_dir).split() == [str(pid)]
