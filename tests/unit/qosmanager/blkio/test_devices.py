"""Block name resolution over a fake sysfs (see :func:`fakesys.standard` for the tree)."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet.qosmanager.plugins.blkio.devices import BlockDevices, Device
from tests.unit.qosmanager.blkio.fakesys import FakeSysBlock, standard

VDA = Device(254, 0, "vda")
VDB = Device(254, 16, "vdb")
VDC = Device(254, 32, "vdc")
VDD = Device(254, 48, "vdd")


@pytest.fixture
def devices(tmp_path: Path) -> BlockDevices:
    standard(tmp_path / "sys")
    return BlockDevices(str(tmp_path / "sys"))


@pytest.mark.parametrize(("name", "expected"), [
    ("vda", VDA),
    ("/dev/vda", VDA),
    ("/dev/vda1", VDA),  # a partition throttles its whole disk
    ("vdb1", VDB),
    ("/dev/vdc", VDC),
    ("/dev/mapper/data-lv1", Device(253, 0, "dm-0")),
    ("dm-4", Device(253, 4, "dm-4")),
])
def test_device_names(devices: BlockDevices, name: str, expected: Device) -> None:
    assert devices.device(name) == expected


@pytest.mark.parametrize(("name", "error"), [
    ("sdz", 'no block device "sdz"'),
    ("/dev/sdz", 'no block device "/dev/sdz"'),
    ("/dev/mapper/nope", 'no block device "/dev/mapper/nope"'),
    ("..", 'no block device ".."'),
    ("/dev/../class", 'no block device "/dev/../class"'),
    ("", 'no block device ""'),
])
def test_unknown_devices(devices: BlockDevices, name: str, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        devices.device(name)
    assert str(raised.value) == error


@pytest.mark.parametrize(("vg", "expected"), [
    ("data", (VDB, VDC)),  # not dm-2 (VG "data-x") nor the dm-crypt device dm-5
    ("data-x", (VDA,)),
    ("thin", (VDD,)),  # thin-lv -> thin-pool_tdata -> vdd
])
def test_volume_groups(devices: BlockDevices, vg: str, expected: tuple[Device, ...]) -> None:
    assert devices.volume_group(vg) == expected


@pytest.mark.parametrize(("vg", "error"), [
    ("nope", 'no active logical volume of volume group "nope" (no dm device named "nope-*")'),
    ("data-", 'no active logical volume of volume group "data-" (no dm device named "data---*")'),
    ("-bad", 'invalid volume group name "-bad"'),
    ("a/b", 'invalid volume group name "a/b"'),
])
def test_unknown_volume_groups(devices: BlockDevices, vg: str, error: str) -> None:
    with pytest.raises(ValueError) as raised:
        devices.volume_group(vg)
    assert str(raised.value) == error


def test_volume_group_without_physical_volumes(tmp_path: Path) -> None:
    FakeSysBlock(tmp_path / "sys").dm("dm-0", "253:0", "empty-lv", [])
    with pytest.raises(ValueError, match='volume group "empty" has no physical volume listed in sysfs'):
        BlockDevices(str(tmp_path / "sys")).volume_group("empty")


def test_garbage_dev_file(tmp_path: Path) -> None:
    fake = FakeSysBlock(tmp_path / "sys").disk("vda", "254:0")
    (fake.devices / "vda" / "dev").write_text("garbage\n")
    with pytest.raises(ValueError, match="cannot read the device number of vda"):
        BlockDevices(str(tmp_path / "sys")).device("vda")


def test_no_sysfs(tmp_path: Path) -> None:
    devices = BlockDevices(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match='no block device "vda"'):
        devices.device("vda")
    with pytest.raises(ValueError, match="no active logical volume"):
        devices.volume_group("data")
