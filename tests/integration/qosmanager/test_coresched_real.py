"""coresched on the real host (issue 5 acceptance): the real ``koordlet.native`` prctl and the real cgroup v1
hierarchy.  This kernel has no core scheduling (``PR_SCHED_CORE`` answers EINVAL), so the probe reports
unsupported once, nothing raises, and BE falls back to ``cpu.idle=1`` on ``<prefix>/kubepods/besteffort`` and
on the BE pod holding a sleeping process (Koordinator #3188); switching off writes ``cpu.idle=0`` back."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from koordlet.apis.extension import LABEL_CORE_SCHED_GROUP
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config import gates
from koordlet.config.gates import CORE_SCHED as GATE
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.coresched import CoreSched
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.resourceexecutor.coresched import CoreSchedExecutor
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import detect_layout
from tests.fixtures.realcgroup import RealCgroups
from tests.unit.qosmanager.fakes import FakeInformer, make_pod

LOGGER = "koordlet.qosmanager.plugins.coresched.strategy"
SLEEP = "import time; time.sleep(600)"
SEED = merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": {
    "policies": {"cpuPolicy": "coreSched"},
    "lsClass": {"cpuQOS": {"enable": True, "coreExpeller": True, "schedIdle": 0}},
    "beClass": {"cpuQOS": {"enable": True, "coreExpeller": False, "schedIdle": 0}},
}}))
"""The seed's config with BE ``schedIdle`` 0, so any ``cpu.idle=1`` on BE comes from the fallback alone."""


def relative(groups: RealCgroups, rel_dir: str) -> str:
    """``rel_dir`` (which starts with the test prefix) below the prefix, as RealCgroups takes it."""
    return rel_dir.removeprefix(groups.name + "/")


def start_pod(groups: RealCgroups, meta: PodMeta) -> int:
    container = meta.containers[0]
    groups.mkdir(relative(groups, container.cgroup_dir))
    return groups.spawn(relative(groups, container.cgroup_dir), SLEEP)


def test_unsupported_kernel_reports_once_and_falls_back_to_cpu_idle(
        real_cgroups: RealCgroups, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    groups = real_cgroups
    be = make_pod("be", "BE", labels={LABEL_CORE_SCHED_GROUP: "g1"}, kube_parent=groups.name)
    ls = make_pod("ls", "LS", labels={LABEL_CORE_SCHED_GROUP: "g1"}, kube_parent=groups.name)
    be_pid, ls_pid = start_pod(groups, be), start_pod(groups, ls)
    be_qos = groups.path("cpu", "kubepods/besteffort")
    # cpu.idle needs kernel >= 5.15 (v1: in every cpu dir; v2: below the root, so look in a cgroup we made).
    has_idle = (be_qos / "cpu.idle").exists()

    layout = detect_layout(HostPaths())
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=FakeInformer([be, ls]),
                      cache=MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time),
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout),
                      config=QoSManagerConfig(), collector=CollectorConfig(),
                      gates=gates.resolve({GATE: True}), clock=time.time, decisions=DecisionLog(),
                      kube_parent=groups.name, coresched=CoreSchedExecutor())
    # The strategy reads the tasks of a container from the real cpu hierarchy.
    assert options.reader.read("cgroup_procs", be.containers[0].cgroup_dir).split() == [str(be_pid)]
    strategy = CoreSched(options)
    assert strategy.enabled(SEED)
    caplog.set_level(logging.INFO, logger=LOGGER)

    first = strategy.run_once(SEED)
    print(first.summary)
    assert first.action == "unsupported", first.summary
    reason = first.numbers["unsupported_reason"]
    assert "EINVAL" in reason or "Invalid argument" in reason, reason
    assert options.coresched is not None and options.coresched.unsupported_reason == reason
    assert first.numbers["idle_dirs"] == sorted([f"{groups.name}/kubepods/besteffort", be.cgroup_dir])
    if has_idle:
        assert first.numbers["writes"] == 2 and first.numbers["problems"] == [], first.summary
        assert (be_qos / "cpu.idle").read_text().strip() == "1"
        assert (groups.path("cpu", relative(groups, be.cgroup_dir)) / "cpu.idle").read_text().strip() == "1"
        assert (groups.path("cpu", relative(groups, ls.cgroup_dir)) / "cpu.idle").read_text().strip() == "0"
    else:
        # A v1 kernel without cpu.idle: the executor refuses the writes cleanly and says why.
        assert first.numbers["refused"] == 2, first.summary
        assert all("unsupported" in p for p in first.numbers["problems"])

    later = [strategy.run_once(SEED) for _ in range(3)]
    assert [d.action for d in later] == ["none"] * 3, [d.summary for d in later]
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert len(warnings) == 1

    off = strategy.run_once(SEED, enabled=False)
    print(off.summary)
    if has_idle:
        assert off.action == "recover", off.summary
        assert (be_qos / "cpu.idle").read_text().strip() == "0"
        assert (groups.path("cpu", relative(groups, be.cgroup_dir)) / "cpu.idle").read_text().strip() == "0"
    # The sleeping processes were never touched: still alive, still in their cgroups.
    for pid, meta in ((be_pid, be), (ls_pid, ls)):
        assert options.reader.read("cgroup_procs", meta.containers[0].cgroup_dir).split() == [str(pid)]
