"""blkioQOS blocks -> per-disk values, and the configuration errors naming their field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from koordlet.apis.nodeslo import BlkIOQOSCfg
from koordlet.qosmanager.plugins.blkio import plan
from koordlet.qosmanager.plugins.blkio.devices import BlockDevices, Device
from koordlet.qosmanager.plugins.blkio.plan import DeviceLimits, PlanError
from tests.unit.qosmanager.blkio.fakesys import standard

BE = "resourceQOSStrategy.beClass.blkioQOS"
ROOT = "resourceQOSStrategy.cgroupRoot.blkioQOS"
VDA = Device(254, 0, "vda")
VDB = Device(254, 16, "vdb")
VDC = Device(254, 32, "vdc")


@pytest.fixture
def devices(tmp_path: Path) -> BlockDevices:
    standard(tmp_path / "sys")
    return BlockDevices(str(tmp_path / "sys"))


def cfg(*blocks: dict[str, Any], enable: bool = True) -> BlkIOQOSCfg:
    return BlkIOQOSCfg.from_json({"enable": enable, "blocks": list(blocks)})


@pytest.mark.parametrize(("blocks", "expected"), [
    pytest.param([{"name": "/dev/vda", "type": "device", "ioCfg": {"writeBPS": 4194304, "readIOPS": 100}}],
                 {VDA: DeviceLimits(VDA, "blocks[0] (device /dev/vda)", write_bps=4194304, read_iops=100)},
                 id="device"),
    pytest.param([{"name": "vda", "type": "device", "ioCfg": {"readBPS": 1, "writeBPS": 2, "readIOPS": 3,
                                                               "writeIOPS": 4, "ioWeightPercent": 60}}],
                 {VDA: DeviceLimits(VDA, "blocks[0] (device vda)", 1, 2, 3, 4, 60)}, id="every-field"),
    pytest.param([{"name": "vda", "type": "device"}],
                 {VDA: DeviceLimits(VDA, "blocks[0] (device vda)")}, id="no-ioCfg-means-no-limit"),
    pytest.param([{"name": "vda", "type": "device", "ioCfg": {"writeBPS": 0}},
                  {"name": "data", "type": "volumegroup", "ioCfg": {"readBPS": 1048576}}],
                 {VDA: DeviceLimits(VDA, "blocks[0] (device vda)"),
                  VDB: DeviceLimits(VDB, "blocks[1] (volumegroup data)", read_bps=1048576),
                  VDC: DeviceLimits(VDC, "blocks[1] (volumegroup data)", read_bps=1048576)},
                 id="volume-group-on-two-disks"),
])
def test_class_limits(devices: BlockDevices, blocks: list[dict[str, Any]], expected: dict[Device, DeviceLimits]
                      ) -> None:
    assert plan.class_limits(BE, cfg(*blocks), devices) == expected


@pytest.mark.parametrize("config", [None, BlkIOQOSCfg(enable=False, blocks=()),
                                    cfg({"name": "sdz", "type": "device"}, enable=False), BlkIOQOSCfg(enable=True)])
def test_disabled_or_empty_means_no_blocks(devices: BlockDevices, config: BlkIOQOSCfg | None) -> None:
    # Disabled: the blocks are not even resolved, so an unknown device there is no error.
    assert plan.class_limits(BE, config, devices) == {}
    assert plan.root_costs(ROOT, config, devices) == {}


@pytest.mark.parametrize(("blocks", "error"), [
    ([{"name": "sdz", "type": "device"}], f'{BE}.blocks[0].name: no block device "sdz"'),
    ([{"name": "vda", "type": "device"}, {"name": "/dev/sdz", "type": "device", "ioCfg": {"writeBPS": 1}}],
     f'{BE}.blocks[1].name: no block device "/dev/sdz"'),
    ([{"type": "device"}], f"{BE}.blocks[0].name: required"),
    ([{"name": "vda"}], f"{BE}.blocks[0].type: required (device, volumegroup or podvolume)"),
    ([{"name": "nope", "type": "volumegroup"}],
     f'{BE}.blocks[0].name: no active logical volume of volume group "nope" (no dm device named "nope-*")'),
    ([{"name": "data", "type": "podvolume"}],
     f"{BE}.blocks[0].type: podvolume blocks belong in a pod's koordinator.sh/blkioQOS annotation, not in a class"),
    ([{"name": "vda", "type": "device"}, {"name": "/dev/vda1", "type": "device"}],
     f'{BE}.blocks[1].name: device "/dev/vda1" is disk vda (254:0), already configured by {BE}.blocks[0]'),
    ([{"name": "vdc", "type": "device"}, {"name": "data", "type": "volumegroup"}],
     f'{BE}.blocks[1].name: volumegroup "data" is disk vdc (254:32), already configured by {BE}.blocks[0]'),
])
def test_errors_name_the_field(devices: BlockDevices, blocks: list[dict[str, Any]], error: str) -> None:
    with pytest.raises(PlanError) as raised:
        plan.class_limits(BE, cfg(*blocks), devices)
    assert str(raised.value) == error


@pytest.mark.parametrize(("io", "qos", "user_model"), [
    ({}, "254:0 enable=1 ctrl=user rpct=95 rlat=3000 wpct=95 wlat=3000", False),
    ({"readLatency": 2000, "writeLatency": 5000, "readLatencyPercent": 90, "writeLatencyPercent": 0,
      "enableUserModel": True}, "254:0 enable=1 ctrl=user rpct=90 rlat=2000 wpct=0 wlat=5000", True),
])
def test_root_costs(devices: BlockDevices, io: dict[str, Any], qos: str, user_model: bool) -> None:
    costs = plan.root_costs(ROOT, cfg({"name": "/dev/vda1", "type": "device", "ioCfg": io}), devices)
    assert list(costs) == [VDA]
    assert costs[VDA].qos == qos
    assert costs[VDA].user_model is user_model
    assert plan.cost_off((254, 0)) == "254:0 enable=0"


def test_root_errors_name_the_root_field(devices: BlockDevices) -> None:
    with pytest.raises(PlanError, match=r'^resourceQOSStrategy\.cgroupRoot\.blkioQOS\.blocks\[0\]\.name: no block'):
        plan.root_costs(ROOT, cfg({"name": "sdz", "type": "device"}), devices)
