"""A cgroup update resolved against this host (:class:`Prepared`) and what the write ledger keys it on."""

from __future__ import annotations

from typing import NamedTuple

from koordlet.resourceexecutor.update import CgroupUpdate
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.validators import CostQos, DeviceValue


class Prepared(NamedTuple):
    """An update that passed validation: where it goes and the text to write.  A tuple, not a
    dataclass: one is built per update per round, and the memo copies it with a new index."""

    position: int
    update: CgroupUpdate
    descriptor: CgroupFile
    version: int
    rel_dir: str
    path: str
    text: str
    canonical: object
    target: str
    """What the ledger keys ``text`` on (:func:`target_of`)."""
    leveled: bool
    """A leveled resource (:data:`.leveled.MERGE`)."""

    @property
    def key(self) -> str:
        return self.descriptor.key


def target_of(p: Prepared, text: str) -> str:
    """What the ledger keys a write on.  A per-device file (blkio throttles, ``io.max``, ``io.weight``,
    ``io.cost.qos``) holds one line per device and a write sets only the device (and, in ``io.max``, the
    keys) it names, so each of those is remembered on its own: keyed on the file alone, writing two disks'
    lines in turn would rewrite both every round."""
    if text is p.text:
        return p.target
    return line_target(p.descriptor, p.path, text)


def line_target(descriptor: CgroupFile, path: str, text: str) -> str:
    """:func:`target_of` for ``text`` in ``path``, a file of resource ``descriptor``."""
    if not isinstance(descriptor.validator, (DeviceValue, CostQos)):
        return path
    device, *rest = text.split() or [""]
    return "/".join((path, " ".join([device, *(word.split("=", 1)[0] for word in rest if "=" in word)])))
