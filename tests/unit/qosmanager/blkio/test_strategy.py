"""The blkio strategy over fake v1 and v2 trees and a fake sysfs (vda 254:0, vdb 254:16, VG ``data`` on
vdb and vdc 254:32, see :func:`fakesys.standard`): the exact lines written to the besteffort cgroup and the
root, what a change, a stale rule or switching off removes, and the errors naming the bad field.

Every write is read back from the executor's audit as (file name, text), in the order written."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config.gates import BLKIO_RECONCILE as GATE
from koordlet.qosmanager.framework import Decision
from koordlet.qosmanager.plugins import blkio
from koordlet.qosmanager.plugins.blkio.strategy import BlkIOReconcile, parse_limited
from koordlet.resourceexecutor import ResourceExecutor
from tests.fixtures.fakehost import DEFAULT_FEATURES, FakeHost
from tests.unit.qosmanager.blkio.fakesys import standard
from tests.unit.qosmanager.fakes import FakeClock, FakeInformer, MemoryAudit, make_options

BE_DIR = "kubepods/besteffort"
T0 = 1_700_000_000.0
MIB4 = 4 << 20
BE_FIELD = "resourceQOSStrategy.beClass.blkioQOS"
V1_FILES = {"rbps": "blkio.throttle.read_bps_device", "wbps": "blkio.throttle.write_bps_device",
            "riops": "blkio.throttle.read_iops_device", "wiops": "blkio.throttle.write_iops_device"}


def throttles(mode: str, dev: str, rbps: int = 0, wbps: int = 0, riops: int = 0, wiops: int = 0
              ) -> list[tuple[str, str]]:
    """The four throttle writes of one disk, in the strategy's order; 0 = no limit."""
    values = {"rbps": rbps, "wbps": wbps, "riops": riops, "wiops": wiops}
    if mode == "v1":
        return [(V1_FILES[k], f"{dev} {v}") for k, v in values.items()]
    return [("io.max", f"{dev} {k}={v or 'max'}") for k, v in values.items()]


def weight(mode: str, dev: str, value: int) -> list[tuple[str, str]]:
    return [("io.weight" if mode == "v2" else "blkio.cost.weight", f"{dev} {value}")]


def spec(be: dict[str, Any] | None = None, root: dict[str, Any] | None = None,
         extra: dict[str, Any] | None = None) -> NodeSLOSpec:
    strategy: dict[str, Any] = dict(extra or {})
    if be is not None:
        strategy["beClass"] = {"blkioQOS": be}
    if root is not None:
        strategy["cgroupRoot"] = {"blkioQOS": root}
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": strategy}))


def be(*blocks: dict[str, Any], enable: bool = True) -> NodeSLOSpec:
    return spec({"enable": enable, "blocks": list(blocks)})


def device(name: str, **io: int) -> dict[str, Any]:
    return {"name": name, "type": "device", "ioCfg": io}


@dataclass
class Rig:
    host: FakeHost
    strategy: BlkIOReconcile
    audit: MemoryAudit
    clock: FakeClock

    @property
    def mode(self) -> str:
        return self.host.mode

    def run(self, slo: NodeSLOSpec, enabled: bool = True) -> tuple[Decision, list[tuple[str, str]]]:
        """One round; the decision and the writes that landed."""
        self.audit.entries.clear()
        decision = self.strategy.run_once(slo, enabled)
        writes = [(Path(e.path).name, e.new) for e in self.audit.entries if e.outcome == "written"]
        return decision, writes


def make_rig(host: FakeHost, tmp_path: Path, *, mkdir: bool = True) -> Rig:
    standard(Path(host.paths.sys_root))
    if mkdir:
        host.mkdir_cgroup(BE_DIR)
    clock = FakeClock(T0)
    audit = MemoryAudit()
    options = make_options(host, tmp_path, FakeInformer(), clock=clock, gates={GATE: True})
    options = dataclasses.replace(options, executor=ResourceExecutor(options.layout, clock, audit))
    return Rig(host, BlkIOReconcile(options), audit, clock)


@pytest.fixture
def rig(fake_cgroup_host: FakeHost, tmp_path: Path) -> Rig:
    return make_rig(fake_cgroup_host, tmp_path)


# ------------------------------------------------------------------------------------------ enabled


@pytest.mark.parametrize(("gate", "slo", "expected"), [
    (False, be(device("vda", writeBPS=1)), False),
    (True, spec(), False),  # Koordinator's defaults: every blkioQOS off
    (True, be(device("vda", writeBPS=1), enable=False), False),
    (True, be(device("vda", writeBPS=1)), True),
    (True, spec(root={"enable": True, "blocks": []}), True),
    (True, spec(extra={"lsClass": {"blkioQOS": {"enable": True, "blocks": [device("vda")]}}}), False),
])
def test_enabled(fake_host: FakeHost, tmp_path: Path, gate: bool, slo: NodeSLOSpec, expected: bool) -> None:
    rig = make_rig(fake_host, tmp_path)
    options = dataclasses.replace(rig.strategy.options, gates={GATE: gate})
    assert BlkIOReconcile(options).enabled(slo) is expected
    assert rig.strategy.interval() == 1.0
    assert blkio.NAME == "blkio" and isinstance(blkio.new(options), BlkIOReconcile)


# ------------------------------------------------------------------------------------------ applying


@pytest.mark.parametrize(("blocks", "expected", "be_numbers"), [
    pytest.param([device("/dev/vda", writeBPS=MIB4)],
                 lambda m: throttles(m, "254:0", wbps=MIB4),
                 {"254:0": {"block": "blocks[0] (device /dev/vda)", "disk": "vda", "read_bps": 0, "write_bps": MIB4,
                            "read_iops": 0, "write_iops": 0, "io_weight_percent": 100}},
                 id="writeBPS"),
    pytest.param([device("vda1", readBPS=1, writeBPS=2, readIOPS=3, writeIOPS=4, ioWeightPercent=60)],
                 lambda m: throttles(m, "254:0", 1, 2, 3, 4),
                 {"254:0": {"block": "blocks[0] (device vda1)", "disk": "vda", "read_bps": 1, "write_bps": 2,
                            "read_iops": 3, "write_iops": 4, "io_weight_percent": 60}},
                 id="partition-every-field"),
    pytest.param([{"name": "data", "type": "volumegroup", "ioCfg": {"readIOPS": 500}}],
                 lambda m: throttles(m, "254:16", riops=500) + throttles(m, "254:32", riops=500),
                 None, id="volume-group"),
])
def test_applies_limits(rig: Rig, blocks: list[dict[str, Any]], expected: Any, be_numbers: Any) -> None:
    decision, writes = rig.run(be(*blocks))
    assert writes == expected(rig.mode)
    assert decision.action == "reconcile"
    assert decision.numbers["writes"] == len(writes) and not decision.numbers["problems"]
    if be_numbers is not None:
        assert decision.numbers["be"] == be_numbers
    assert decision.numbers["be_dir"] == BE_DIR


def test_summary_and_steady_rounds(rig: Rig) -> None:
    slo = be(device("vda", writeBPS=MIB4, readIOPS=100))
    decision, _ = rig.run(slo)
    assert decision.summary == "blkio: BE kubepods/besteffort: 254:0 (vda) wbps=4194304 riops=100; 4 writes"
    # Unchanged: the executor skips every line (each disk's on its own) until the force-update
    # interval (60 s) has passed.
    rig.clock.advance(30)
    decision, writes = rig.run(slo)
    assert (decision.action, writes, decision.numbers["updates"]) == ("none", [], 4)
    assert decision.numbers["unchanged"] == 4
    rig.clock.advance(31)
    decision, writes = rig.run(slo)
    # Past it each file is read back first: v1's files (one line each) still hold exactly what was written, so
    # nothing is written again; v2's io.max does not read back as the line written, so its line is rewritten.
    assert writes == ([] if rig.mode == "v1" else throttles(rig.mode, "254:0", wbps=MIB4, riops=100))


IOCOST_VDA = "254:0 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000"


@pytest.mark.parametrize(("mode", "features"), [("v1", {"anolis"}), ("v2", {"iocost"})])
def test_weight_goes_to_disks_with_iocost_on(fake_host: FakeHost, tmp_path: Path, mode: str, features: set[str]
                                            ) -> None:
    # The kernel takes a per-disk weight only where iocost is on: the root line goes first, then the weight.
    fake_host.set_mode(mode, features=DEFAULT_FEATURES | features)
    rig = make_rig(fake_host, tmp_path)
    slo = spec(be={"enable": True, "blocks": [device("vda", writeBPS=MIB4, ioWeightPercent=30),
                                             device("vdb", readIOPS=5, ioWeightPercent=40)]},
               root={"enable": True, "blocks": [device("vda")]})
    decision, writes = rig.run(slo)
    cost_file = "io.cost.qos" if mode == "v2" else "blkio.cost.qos"
    assert writes == [(cost_file, IOCOST_VDA), *throttles(mode, "254:0", wbps=MIB4), *weight(mode, "254:0", 30),
                      *throttles(mode, "254:16", riops=5)]
    assert decision.numbers["notes"] == [
        "ioWeightPercent of disk 254:16 (blocks[1] (device vdb)) not applied: "
        "iocost is off for it (enable it with resourceQOSStrategy.cgroupRoot.blkioQOS)"]


@pytest.mark.parametrize(("mode", "features"), [("v1", {"anolis"}), ("v2", {"iocost"})])
def test_weight_goes_to_disks_whose_iocost_someone_else_turned_on(fake_host: FakeHost, tmp_path: Path, mode: str,
                                                                 features: set[str]) -> None:
    fake_host.set_mode(mode, features=DEFAULT_FEATURES | features)
    rig = make_rig(fake_host, tmp_path)
    cost_file = "io.cost.qos" if mode == "v2" else "blkio.cost.qos"
    where = {} if mode == "v2" else {"subsystem": "blkio"}
    rig.host.write_cgroup("", cost_file, "254:16 enable=1 ctrl=auto\n", **where)
    decision, writes = rig.run(be(device("vdb", readIOPS=5, ioWeightPercent=40)))
    assert writes == [*throttles(mode, "254:16", riops=5), *weight(mode, "254:16", 40)]
    assert decision.numbers["notes"] == []


def test_v2_weight_with_iocost_off_is_left_alone(fake_host: FakeHost, tmp_path: Path) -> None:
    # Measured in the v2 guest (tests/vm): io.weight exists in every child, but "254:0 100" on a disk whose iocost
    # is off is refused with EOPNOTSUPP. A default weight is simply not written; another one is a note.
    fake_host.set_mode("v2", features=DEFAULT_FEATURES | {"iocost"})
    rig = make_rig(fake_host, tmp_path)
    decision, writes = rig.run(be(device("vda", writeBPS=MIB4)))
    assert writes == throttles("v2", "254:0", wbps=MIB4) and decision.numbers["notes"] == []


def test_weight_without_the_kernel_file_is_a_note(fake_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_host, tmp_path)  # v1 without Anolis: no blkio.cost.weight
    decision, writes = rig.run(be(device("vda", ioWeightPercent=30)))
    assert writes == throttles("v1", "254:0")
    assert decision.numbers["notes"] == [
        "ioWeightPercent not applied: blkio.cost.weight exists on Anolis kernels only"]
    assert decision.summary.endswith("ioWeightPercent not applied: blkio.cost.weight exists on Anolis kernels only")


# ------------------------------------------------------------------------------------------ removing


def test_changed_device_removes_the_old_one(rig: Rig) -> None:
    rig.run(be(device("vda", writeBPS=MIB4, ioWeightPercent=50)))
    decision, writes = rig.run(be(device("vdb", readBPS=MIB4)))
    assert writes == throttles(rig.mode, "254:0") + throttles(rig.mode, "254:16", rbps=MIB4)
    assert decision.numbers["be_removed"] == ["254:0"]
    assert "limits removed on 254:0" in decision.summary


@pytest.mark.parametrize(("v1_file", "v1_line", "v2_line"), [
    ("blkio.throttle.write_bps_device", "8:0 1000\n", "8:0 rbps=max wbps=1000 riops=max wiops=max\n"),
    ("blkio.throttle.read_iops_device", "8:0 7\n8:16 0\n", "8:0 rbps=max wbps=max riops=7 wiops=max\n"),
])
def test_stale_rules_in_the_file_are_removed(rig: Rig, v1_file: str, v1_line: str, v2_line: str) -> None:
    # A rule left by an earlier koordlet (or written by hand) on a disk no block names any more.
    if rig.mode == "v1":
        rig.host.write_cgroup(BE_DIR, v1_file, v1_line, subsystem="blkio")
    else:
        rig.host.write_cgroup(BE_DIR, "io.max", v2_line)
    decision, writes = rig.run(be(device("vda", writeBPS=MIB4)))
    assert writes[:4] == throttles(rig.mode, "8:0")
    assert decision.numbers["be_removed"] == ["8:0"]


def test_disabling_blkio_qos_removes_everything(rig: Rig) -> None:
    rig.run(be(device("vda", writeBPS=MIB4), device("vdb", readIOPS=10)))
    off = be(device("vda", writeBPS=MIB4), enable=False)
    decision, writes = rig.run(off, enabled=False)
    # The same "maj:min 0" lines went to the v1 files in the first round: removals are written anyway.
    assert writes == throttles(rig.mode, "254:0") + throttles(rig.mode, "254:16")
    assert decision.action == "recover"
    assert decision.numbers["be_removed"] == ["254:0", "254:16"]
    assert decision.summary == (f"blkio QoS off: removed the limits of 2 disks in {BE_DIR}: "
                                f"{len(writes)} writes")
    decision, writes = rig.run(off, enabled=False)
    assert (decision.action, writes) == ("none", [])


def test_enabled_with_no_blocks_removes_what_was_set(rig: Rig) -> None:
    rig.run(be(device("vda", writeBPS=MIB4)))
    decision, writes = rig.run(be())
    assert writes[:4] == throttles(rig.mode, "254:0")
    assert decision.numbers["be"] == {} and decision.numbers["be_removed"] == ["254:0"]


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(("slo", "error"), [
    (be(device("vda", writeBPS=1), device("sdz", writeBPS=1)), f'{BE_FIELD}.blocks[1].name: no block device "sdz"'),
    (be({"name": "pv", "type": "podvolume"}),
     f"{BE_FIELD}.blocks[0].type: podvolume blocks belong in a pod's koordinator.sh/blkioQOS annotation, "
     "not in a class"),
    (spec(be={"enable": True, "blocks": [device("vda", writeBPS=1)]},
          root={"enable": True, "blocks": [device("/dev/sdz")]}),
     'resourceQOSStrategy.cgroupRoot.blkioQOS.blocks[0].name: no block device "/dev/sdz"'),
])
def test_bad_blocks_change_nothing(rig: Rig, slo: NodeSLOSpec, error: str) -> None:
    rig.run(be(device("vda", writeBPS=MIB4)))
    rig.clock.advance(120)  # past the force-update interval: a good round would rewrite everything
    decision, writes = rig.run(slo)
    assert writes == []
    assert decision.action == "error"
    assert decision.summary == f"blkio QoS not changed: {error}"
    assert decision.numbers["error"] == error
    assert decision.numbers["be_in_force"] == {"254:0": "throttles only"}


def test_first_round_error_writes_nothing(rig: Rig) -> None:
    decision, writes = rig.run(be(device("sdz", writeBPS=1)))
    assert (decision.action, writes) == ("error", [])
    assert decision.summary == f'blkio QoS not changed: {BE_FIELD}.blocks[0].name: no block device "sdz"'


def test_missing_besteffort_cgroup_is_a_note(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_cgroup_host, tmp_path, mkdir=False)
    decision, writes = rig.run(be(device("vda", writeBPS=MIB4)))
    assert (decision.action, writes) == ("none", [])
    [note] = decision.numbers["notes"]
    assert note.startswith("BE limits not applied: besteffort cgroup ") and note.endswith(
        f"{BE_DIR} does not exist")
    decision, writes = rig.run(be(device("vda", writeBPS=MIB4)), enabled=False)
    assert (decision.action, writes) == ("none", [])


def test_besteffort_cgroup_vanishing_mid_way(rig: Rig) -> None:
    rig.run(be(device("vda", writeBPS=MIB4)))
    rig.host.set_mode(rig.mode)  # the tree is rebuilt without kubepods
    decision, writes = rig.run(be(device("vda", writeBPS=MIB4)))
    assert (decision.action, writes) == ("none", [])
    rig.host.mkdir_cgroup(BE_DIR)  # back, empty: the limits go in again at once
    rig.clock.advance(1)
    _, writes = rig.run(be(device("vda", writeBPS=MIB4)))
    assert writes[:4] == throttles(rig.mode, "254:0", wbps=MIB4)


def test_other_classes_are_ignored_with_a_note(rig: Rig) -> None:
    slo = spec(be={"enable": True, "blocks": [device("vda")]},
               extra={"lsClass": {"blkioQOS": {"enable": True, "blocks": [device("vdb", writeBPS=1)]}}})
    decision, writes = rig.run(slo)
    assert all(text.startswith("254:0 ") for _, text in writes)
    assert decision.numbers["notes"] == ["resourceQOSStrategy.lsClass.blkioQOS ignored: Koordinator applies "
                                         "block IO QoS to the BE class and the cgroup root only"]


# ------------------------------------------------------------------------------------------ root


def test_root_iocost_on_v2(fake_host: FakeHost, tmp_path: Path) -> None:
    fake_host.set_mode("v2", features=DEFAULT_FEATURES | {"iocost"})
    rig = make_rig(fake_host, tmp_path)
    root_on = spec(root={"enable": True, "blocks": [
        {"name": "vda", "type": "device", "ioCfg": {"readLatency": 2000, "enableUserModel": True}}]})
    decision, writes = rig.run(root_on)
    assert writes == [("io.cost.qos", "254:0 enable=1 ctrl=user rpct=95 rlat=2000 wpct=95 wlat=3000")]
    assert decision.numbers["root"] == {"254:0": "254:0 enable=1 ctrl=user rpct=95 rlat=2000 wpct=95 wlat=3000"}
    assert decision.numbers["notes"] == [
        "enableUserModel: io.cost.model not written (no registry resource for it)"]
    # Another disk iocost was left enabled on (by an earlier run): the root config claims it, it goes off.
    rig.host.write_cgroup("", "io.cost.qos", "254:16 enable=1 ctrl=auto rpct=0.00 rlat=250000\n")
    _, writes = rig.run(root_on)
    assert writes == [("io.cost.qos", "254:16 enable=0")]
    decision, writes = rig.run(root_on, enabled=False)
    assert writes == [("io.cost.qos", "254:0 enable=0")]
    assert decision.numbers["root_removed"] == ["254:0"]


def test_root_iocost_unsupported_is_a_note(rig: Rig) -> None:
    decision, writes = rig.run(spec(root={"enable": True, "blocks": [device("vda")]}))
    assert writes == []
    [note] = decision.numbers["notes"]
    assert note.startswith("cgroupRoot iocost not applied: ")


# ------------------------------------------------------------------------------------------ parsing


@pytest.mark.parametrize(("text", "expected"), [
    ("", set()),
    ("254:0 4194304\n8:0 0\n", {(254, 0)}),
    ("254:0 rbps=max wbps=4194304 riops=max wiops=max\n8:0 rbps=max wbps=max riops=max wiops=max\n", {(254, 0)}),
    ("8:16 wiops=9\n", {(8, 16)}),
    ("default 100\nbogus line\n", set()),
])
def test_parse_limited(text: str, expected: set[tuple[int, int]]) -> None:
    assert parse_limited(text) == expected


def test_a_missing_throttle_file_is_reported_not_raised(fake_host: FakeHost, tmp_path: Path) -> None:
    rig = make_rig(fake_host, tmp_path)
    fake_host.remove_cgroup_file(BE_DIR, "blkio.throttle.read_bps_device", subsystem="blkio")
    decision, writes = rig.run(be(device("vda", writeBPS=MIB4)))
    assert writes == throttles("v1", "254:0", wbps=MIB4)[1:]
    assert decision.numbers["refused"] == 1
    [problem] = decision.numbers["problems"]
    assert "blkio.throttle.read_bps_device: unsupported (" in problem
    assert "file absent although its cgroup exists" in problem
    [note] = decision.numbers["notes"]
    assert note.startswith(f"cannot read the blkio_read_bps rules of {BE_DIR}: ")
    assert "1 writes failed" in decision.summary
