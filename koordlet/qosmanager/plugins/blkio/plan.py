"""``blkioQOS`` blocks -> per-disk values (Koordinator ``getBlkIOUpdaterFromBlockCfg`` and
``getDiskConfigUpdaterFromBlockCfg``), every block resolved before anything is written.

A bad block (no name, unknown device, a ``podvolume`` outside a pod annotation, two blocks naming one
disk) rejects the whole configuration with an error naming the field, so a round never applies half of
it and the values in force stay until the configuration is fixed: a half-applied configuration is one
nobody asked for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from koordlet.apis.nodeslo import BlkIOQOSCfg, BlockCfg, IOCfg
from koordlet.qosmanager.plugins.blkio.devices import BlockDevices, Device
from koordlet.system import resources
from koordlet.system.cgroupfile import CgroupFile

DEFAULT_WEIGHT_PERCENT = 100
"""Koordinator ``DefaultIOWeightPercentage``: also the value a device's weight is reset to."""
DEFAULT_LATENCY_US = 3000
DEFAULT_LATENCY_PERCENT = 95

THROTTLES: tuple[tuple[CgroupFile, str], ...] = (
    (resources.BLKIO_READ_BPS, "read_bps"),
    (resources.BLKIO_WRITE_BPS, "write_bps"),
    (resources.BLKIO_READ_IOPS, "read_iops"),
    (resources.BLKIO_WRITE_IOPS, "write_iops"),
)
"""(descriptor, :class:`DeviceLimits` field) of the four blk-throttle files."""
WEIGHT = resources.BLKIO_COST_WEIGHT
COST_QOS = resources.BLKIO_COST_QOS


class PlanError(ValueError):
    """A block that cannot be applied; the message starts with the field path."""


@dataclass(frozen=True)
class DeviceLimits:
    """What one disk gets in the besteffort cgroup; 0 = no limit (the kernel removes the rule)."""

    device: Device
    block: str
    """Which block asked for it: ``blocks[0] (device /dev/vda)``."""
    read_bps: int = 0
    write_bps: int = 0
    read_iops: int = 0
    write_iops: int = 0
    weight_percent: int = DEFAULT_WEIGHT_PERCENT

    def numbers(self) -> dict[str, Any]:
        return {"block": self.block, "disk": self.device.name, "read_bps": self.read_bps,
                "write_bps": self.write_bps, "read_iops": self.read_iops, "write_iops": self.write_iops,
                "io_weight_percent": self.weight_percent}


@dataclass(frozen=True)
class RootCost:
    """What one disk gets in the root cgroup's ``io.cost.qos`` / ``blkio.cost.qos``."""

    device: Device
    block: str
    qos: str
    user_model: bool
    """``enableUserModel``: Koordinator also writes ``io.cost.model``, which koordlet's registry lacks."""


def blocks_of(cfg: BlkIOQOSCfg | None) -> tuple[BlockCfg, ...]:
    """The blocks in force: none when ``enable`` is not true (Koordinator then removes every rule)."""
    if cfg is None or cfg.enable is not True:
        return ()
    return cfg.blocks or ()


def class_limits(where: str, cfg: BlkIOQOSCfg | None, devices: BlockDevices, podvolume: PodVolumes | None = None
                 ) -> dict[Device, DeviceLimits]:
    """Per-disk throttles and weights of a class's ``blkioQOS`` (``where`` is its field path), or of a pod's
    annotation (with ``podvolume``, which resolves its ``podvolume`` blocks)."""
    planned: dict[Device, DeviceLimits] = {}
    for i, block, disks in _resolve(where, blocks_of(cfg), devices, podvolume):
        io = block.io_cfg or IOCfg()
        for disk in disks:
            planned[disk] = DeviceLimits(
                disk, _label(i, block), read_bps=io.read_bps or 0, write_bps=io.write_bps or 0,
                read_iops=io.read_iops or 0, write_iops=io.write_iops or 0,
                weight_percent=io.io_weight_percent or DEFAULT_WEIGHT_PERCENT)
    return planned


def root_costs(where: str, cfg: BlkIOQOSCfg | None, devices: BlockDevices) -> dict[Device, RootCost]:
    """Per-disk iocost QoS of ``cgroupRoot.blkioQOS``: ``enable=1 ctrl=user rpct rlat wpct wlat`` with
    Koordinator's defaults (95th percentile, 3000 us) for what the block leaves out."""
    planned: dict[Device, RootCost] = {}
    for i, block, disks in _resolve(where, blocks_of(cfg), devices):
        io = block.io_cfg or IOCfg()
        rpct = _or(io.read_latency_percent, DEFAULT_LATENCY_PERCENT)
        rlat = _or(io.read_latency_us, DEFAULT_LATENCY_US)
        wpct = _or(io.write_latency_percent, DEFAULT_LATENCY_PERCENT)
        wlat = _or(io.write_latency_us, DEFAULT_LATENCY_US)
        for disk in disks:
            qos = f"{disk.number} enable=1 ctrl=user rpct={rpct} rlat={rlat} wpct={wpct} wlat={wlat}"
            planned[disk] = RootCost(disk, _label(i, block), qos, io.enable_user_model is True)
    return planned


def cost_off(dev: tuple[int, int]) -> str:
    """The iocost QoS line turning iocost off on a disk (Koordinator ``getDiskConfigRemoverFromDiskNumber``)."""
    return f"{dev[0]}:{dev[1]} enable=0"


PodVolumes = Callable[[str], tuple[Device, ...]]
"""A pod's ``podvolume`` resolver: volume name -> its disks (raises ``ValueError`` naming the volume)."""


def _resolve(where: str, blocks: tuple[BlockCfg, ...], devices: BlockDevices, podvolume: PodVolumes | None = None
             ) -> list[tuple[int, BlockCfg, tuple[Device, ...]]]:
    resolved: list[tuple[int, BlockCfg, tuple[Device, ...]]] = []
    owner: dict[Device, str] = {}
    for i, block in enumerate(blocks):
        field = f"{where}.blocks[{i}]"
        if not block.name:
            raise PlanError(f"{field}.name: required")
        if block.block_type is None:
            raise PlanError(f"{field}.type: required (device, volumegroup or podvolume)")
        try:
            if block.block_type == "device":
                disks: tuple[Device, ...] = (devices.device(block.name),)
            elif block.block_type == "volumegroup":
                disks = devices.volume_group(block.name)
            elif block.block_type == "podvolume" and podvolume is not None:
                disks = podvolume(block.name)
            else:
                # Koordinator resolves pod volumes only from a pod's koordinator.sh/blkioQOS annotation.
                raise PlanError(f"{field}.type: {block.block_type} blocks belong in a pod's "
                                "koordinator.sh/blkioQOS annotation, not in a class")
        except ValueError as exc:
            if isinstance(exc, PlanError):
                raise
            raise PlanError(f"{field}.name: {exc}") from exc
        for disk in disks:
            if disk in owner:
                raise PlanError(f"{field}.name: {block.block_type} \"{block.name}\" is disk {disk.name} "
                                f"({disk.number}), already configured by {owner[disk]}")
            owner[disk] = f"{where}.blocks[{i}]"
        resolved.append((i, block, disks))
    return resolved


def _label(i: int, block: BlockCfg) -> str:
    return f"blocks[{i}] ({block.block_type} {block.name})"


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
