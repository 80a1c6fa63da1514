"""A fake ``/sys`` block tree shaped like the kernel's: ``class/block/<name>`` symlinks into
``devices/virtual/block``, partitions as sub-directories of their disk with a ``partition`` file,
device-mapper devices with ``dm/name``, ``dm/uuid`` and ``slaves/`` links."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path


class FakeSysBlock:
    def __init__(self, sys_root: Path) -> None:
        self.sys_root = sys_root
        self.class_block = sys_root / "class" / "block"
        self.devices = sys_root / "devices" / "virtual" / "block"
        self.class_block.mkdir(parents=True, exist_ok=True)
        self.devices.mkdir(parents=True, exist_ok=True)

    def disk(self, name: str, number: str) -> FakeSysBlock:
        self._device(self.devices / name, name, number)
        return self

    def partition(self, disk: str, name: str, number: str) -> FakeSysBlock:
        directory = self.devices / disk / name
        self._device(directory, name, number)
        (directory / "partition").write_text("1\n")
        return self

    def dm(self, kname: str, number: str, dm_name: str, slaves: Sequence[str],
           uuid: str | None = "LVM-abc") -> FakeSysBlock:
        directory = self.devices / kname
        self._device(directory, kname, number)
        (directory / "dm").mkdir()
        (directory / "dm" / "name").write_text(dm_name + "\n")
        if uuid is not None:
            (directory / "dm" / "uuid").write_text(uuid + "\n")
        (directory / "slaves").mkdir()
        for slave in slaves:
            os.symlink(os.path.realpath(self.class_block / slave), directory / "slaves" / slave)
        return self

    def _device(self, directory: Path, name: str, number: str) -> None:
        directory.mkdir(parents=True)
        (directory / "dev").write_text(number + "\n")
        os.symlink(os.path.relpath(directory, self.class_block), self.class_block / name)


def standard(sys_root: Path) -> FakeSysBlock:
    """vda (254:0, with vda1), vdb (254:16, with vdb1), vdc (254:32), vdd (254:48) and these LVM volumes:

    * VG ``data``: dm-0 ``data-lv1`` on vdb1, dm-1 ``data-lv2`` on vdc;
    * VG ``data-x`` (dm names double the dash): dm-2 ``data--x-lv`` on vda1;
    * VG ``thin``: dm-4 ``thin-lv`` on dm-3 ``thin-pool_tdata`` on vdd (a stacked LV);
    * a dm-crypt device dm-5 ``data-crypt`` on vdd whose uuid is not LVM's."""
    fake = FakeSysBlock(sys_root)
    fake.disk("vda", "254:0").partition("vda", "vda1", "254:1")
    fake.disk("vdb", "254:16").partition("vdb", "vdb1", "254:17")
    fake.disk("vdc", "254:32").disk("vdd", "254:48")
    fake.dm("dm-0", "253:0", "data-lv1", ["vdb1"]).dm("dm-1", "253:1", "data-lv2", ["vdc"])
    fake.dm("dm-2", "253:2", "data--x-lv", ["vda1"])
    fake.dm("dm-3", "253:3", "thin-pool_tdata", ["vdd"]).dm("dm-4", "253:4", "thin-lv", ["dm-3"])
    fake.dm("dm-5", "253:5", "data-crypt", ["vdd"], uuid="CRYPT-LUKS2-xyz")
    return fake
