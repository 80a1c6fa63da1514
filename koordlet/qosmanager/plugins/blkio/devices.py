"""Block names of a ``blkioQOS`` block -> the ``major:minor`` of the disks the kernel throttles.

Koordinator resolves names through the node-local-storage collector's maps (``PartitionDiskMap``,
``VGDiskMap``); this reads the same facts straight from sysfs under the host's sys root, so tests fake
them with a tmp tree:

* ``device``: ``/dev/vda``, ``vda``, ``/dev/mapper/<dm name>``.  A partition resolves to its whole disk,
  as Koordinator's ``getDiskByDevice`` does: blk-throttle and iocost configure whole disks only (the
  kernel's ``blkcg_conf_open_bdev`` answers ENODEV for a partition).
* ``volumegroup``: the physical disks under the VG's active logical volumes.  An LV is the device-mapper
  device whose ``dm/name`` is ``<vg>-<lv>`` (LVM doubles every ``-`` inside either name) and whose
  ``dm/uuid`` starts with ``LVM-``; its ``slaves/`` lead, through any stacked dm layers, to the PV
  partitions or disks, each mapped to its whole disk.  A VG without an active LV has no trace in sysfs
  and is reported as unknown.  Koordinator's ``VGDiskMap`` keeps one disk per VG; a VG spanning several
  disks gets the same limits on each here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

_VG_NAME = re.compile(r"[A-Za-z0-9+_.][A-Za-z0-9+_.-]*")
_MAJ_MIN = re.compile(r"(\d+):(\d+)")
_MAX_DEPTH = 8
"""Stacked dm layers followed below an LV (thin pools, snapshots, crypt): far more than real stacks."""


@dataclass(frozen=True, order=True)
class Device:
    """A whole disk: its numbers and its kernel name (``vda``)."""

    major: int
    minor: int
    name: str

    @property
    def number(self) -> str:
        return f"{self.major}:{self.minor}"


class BlockDevices:
    """Resolves block names through ``<sys_root>/class/block``."""

    def __init__(self, sys_root: str) -> None:
        self.class_block = os.path.join(sys_root, "class", "block")

    def device(self, name: str) -> Device:
        """The whole disk of a device name; ``ValueError`` naming it when there is no such device."""
        if name.startswith("/dev/mapper/"):
            kname = self._dm_by_name(name.removeprefix("/dev/mapper/"))
            if kname is None:
                raise ValueError(f'no block device "{name}"')
        else:
            # sysfs spells a '/' inside a kernel name '!' (/dev/cciss/c0d0 -> cciss!c0d0).
            kname = name.removeprefix("/dev/").replace("/", "!")
        if kname in ("", ".", "..") or not os.path.isfile(os.path.join(self.class_block, kname, "dev")):
            raise ValueError(f'no block device "{name}"')
        return self._whole_disk(kname)

    def volume_group(self, vg: str) -> tuple[Device, ...]:
        """The disks under the active LVs of ``vg``, sorted; ``ValueError`` when it has none."""
        if not _VG_NAME.fullmatch(vg):
            raise ValueError(f'invalid volume group name "{vg}"')
        prefix = vg.replace("-", "--") + "-"
        disks: set[Device] = set()
        found = False
        for kname in self._entries():
            if not kname.startswith("dm-"):
                continue
            dm_name = _read(os.path.join(self.class_block, kname, "dm", "name"))
            uuid = _read(os.path.join(self.class_block, kname, "dm", "uuid"))
            if dm_name is None or not dm_name.startswith(prefix) or (uuid is not None and not uuid.startswith("LVM-")):
                continue
            rest = dm_name[len(prefix):]
            if not rest or rest.startswith("-"):  # "a--b-lv" is VG "a-b", not VG "a"
                continue
            found = True
            disks.update(self._under(kname, 0))
        if not found:
            raise ValueError(f'no active logical volume of volume group "{vg}" (no dm device named "{prefix}*")')
        if not disks:
            raise ValueError(f'volume group "{vg}" has no physical volume listed in sysfs')
        return tuple(sorted(disks))

    def disks_of_number(self, major: int, minor: int) -> tuple[Device, ...]:
        """The whole disks holding block device ``major:minor`` (a mounted file system's ``st_dev``): itself
        or its disk for a partition, the disks below it for device-mapper; ``ValueError`` when unknown."""
        wanted = f"{major}:{minor}"
        kname = next((k for k in self._entries() if _read(os.path.join(self.class_block, k, "dev")) == wanted), None)
        if kname is None:
            raise ValueError(f"no block device {wanted} (not a disk-backed file system?)")
        if kname.startswith("dm-"):
            disks = self._under(kname, 0)
            if not disks:
                raise ValueError(f"device-mapper {kname} lists no device below it in sysfs")
            return tuple(sorted(disks))
        return (self._whole_disk(kname),)

    # ------------------------------------------------------------------------------------------ sysfs

    def _entries(self) -> list[str]:
        try:
            return sorted(os.listdir(self.class_block))
        except OSError:
            return []

    def _dm_by_name(self, dm_name: str) -> str | None:
        for kname in self._entries():
            if kname.startswith("dm-") and _read(os.path.join(self.class_block, kname, "dm", "name")) == dm_name:
                return kname
        return None

    def _under(self, kname: str, depth: int) -> set[Device]:
        """The whole disks below a dm device, following its slaves."""
        slaves_dir = os.path.join(self.class_block, kname, "slaves")
        try:
            slaves = sorted(os.listdir(slaves_dir))
        except OSError:
            slaves = []
        if not slaves or depth > _MAX_DEPTH:
            return set() if depth == 0 else {self._whole_disk(kname)}
        disks: set[Device] = set()
        for slave in slaves:
            disks.update(self._under(slave, depth + 1))
        return disks

    def _whole_disk(self, kname: str) -> Device:
        base = os.path.join(self.class_block, kname)
        if os.path.exists(os.path.join(base, "partition")):
            # /sys/class/block/vda1 -> ../../devices/.../block/vda/vda1: the disk is the parent directory.
            disk_dir = os.path.dirname(os.path.realpath(base))
            return self._read_device(disk_dir, os.path.basename(disk_dir))
        return self._read_device(base, kname)

    @staticmethod
    def _read_device(directory: str, kname: str) -> Device:
        text = _read(os.path.join(directory, "dev"))
        match = _MAJ_MIN.fullmatch(text or "")
        if match is None:
            raise ValueError(f"cannot read the device number of {kname} from {directory}/dev ({text!r})")
        return Device(int(match.group(1)), int(match.group(2)), kname)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None
