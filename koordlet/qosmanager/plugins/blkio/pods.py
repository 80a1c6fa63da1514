"""The pod loop of the blkio strategy (upstream ``reconcile``'s ``podsMeta`` loop): running pods with a
Koordinator class label and the ``koordinator.sh/blkioQOS`` annotation get its blocks' throttles in their
own cgroup (see :mod:`.podvolume` for the annotation and ``podvolume`` blocks).

Each pod stands alone: a malformed annotation or a block that cannot be resolved is a note naming the pod,
and that pod's values in force stay; the other pods and the class go on.  Where upstream skips a pod
whose annotation went away (its rules stay forever), the rules this strategy set are removed, as they are
when the strategy is switched off.  ``ioWeightPercent`` is not applied per pod (a per-disk weight needs
iocost on for the disk, which the root configuration owns); a note says so.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from koordlet.apis.extension import LABEL_QOS, QoSClass, qos_from_label
from koordlet.qosmanager.plugins.blkio import plan
from koordlet.qosmanager.plugins.blkio.devices import BlockDevices
from koordlet.qosmanager.plugins.blkio.plan import THROTTLES, PlanError
from koordlet.qosmanager.plugins.blkio.podvolume import (
    ANNOTATION_POD_BLKIO_QOS,
    VolumeError,
    mount_devices,
    pod_blkio,
    volume_resolver,
)
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.cgroupfile import CgroupFile

DevNo = tuple[int, int]
NAME = "blkio"


class Queue(Protocol):
    """The strategy's writing helpers the pod loop shares."""

    def listed(self, rnd: Any, rel_dir: str) -> set[DevNo]: ...
    def queue(self, rnd: Any, key: CgroupFile, rel_dir: str, dev: DevNo, value: int, owner: str) -> None: ...
    def forget(self, rel_dir: str, keys: Iterable[CgroupFile], disks: Iterable[DevNo]) -> None: ...
    def note(self, rnd: Any, text: str) -> None: ...
    def directory(self, rel_dir: str) -> str: ...


def annotated(pods: Iterable[PodMeta]) -> bool:
    return any(ANNOTATION_POD_BLKIO_QOS in meta.pod.annotations for meta in pods)


class PodBlkIO:
    def __init__(self, devices: BlockDevices, kubelet_root: str, proc_root: str) -> None:
        self.devices = devices
        self.kubelet_root = kubelet_root
        self.proc_root = proc_root
        self.applied: dict[str, set[DevNo]] = {}
        """Pod cgroup dir -> disks this strategy gave limits there."""

    def plan(self, q: Queue, rnd: Any, pods: Iterable[PodMeta]) -> dict[str, Any]:
        """Queues every pod's updates; returns pod key -> its disks (or the error) for the decision."""
        mounts: Callable[[], dict[str, DevNo]] = functools.cache(lambda: mount_devices(self.proc_root))
        seen: set[str] = set()
        report: dict[str, Any] = {}
        for meta in pods:
            pod, rel_dir = meta.pod, meta.cgroup_dir
            if (qos_from_label(pod.labels.get(LABEL_QOS)) is QoSClass.NONE or pod.phase != "Running"
                    or not rel_dir or not os.path.isdir(q.directory(rel_dir))):
                continue
            seen.add(rel_dir)
            try:
                cfg = pod_blkio(pod)
                if cfg is None:
                    self._clear(q, rnd, rel_dir, f"{NAME}: pod {pod.key}: annotation {ANNOTATION_POD_BLKIO_QOS} gone")
                    continue
                limits = plan.class_limits(f"pod {pod.key}: annotation {ANNOTATION_POD_BLKIO_QOS}", cfg, self.devices,
                                           volume_resolver(pod, self.kubelet_root, self.devices, mounts))
            except (VolumeError, PlanError) as exc:
                q.note(rnd, f"{exc}; the pod's limits in force stay")
                report[pod.key] = {"error": str(exc)}
                continue
            wanted = {(lim.device.major, lim.device.minor): lim for lim in limits.values()}
            removed = sorted((q.listed(rnd, rel_dir) | self.applied.get(rel_dir, set())) - set(wanted))
            self._remove(q, rnd, rel_dir, removed, f"{NAME}: pod {pod.key}: disk {{disk}} no longer configured")
            owner = f"{NAME}: pod {pod.key}: {ANNOTATION_POD_BLKIO_QOS}"
            for dev, lim in wanted.items():
                for key, attr in THROTTLES:
                    q.queue(rnd, key, rel_dir, dev, getattr(lim, attr), f"{owner}.{lim.block}")
                if lim.weight_percent != plan.DEFAULT_WEIGHT_PERCENT:
                    q.note(rnd, f"pod {pod.key}: ioWeightPercent of {lim.block} not applied (per pod: throttles only)")
            self.applied[rel_dir] = set(wanted)
            report[pod.key] = {lim.device.number: lim.numbers() for lim in limits.values()}
        for gone in set(self.applied) - seen:  # the pod (and its cgroup) went
            del self.applied[gone]
        return report

    def reset(self, q: Queue, rnd: Any) -> None:
        """Switched off: every limit this strategy set in a pod cgroup goes."""
        for rel_dir in sorted(self.applied):
            self._clear(q, rnd, rel_dir, f"{NAME}: switched off, reset disk {{disk}}")

    def _clear(self, q: Queue, rnd: Any, rel_dir: str, owner: str) -> None:
        ours = self.applied.pop(rel_dir, None)
        if ours is None:
            return  # never ours: upstream leaves a pod without the annotation alone
        self._remove(q, rnd, rel_dir, sorted(ours | q.listed(rnd, rel_dir)), owner)

    @staticmethod
    def _remove(q: Queue, rnd: Any, rel_dir: str, removed: list[DevNo], owner: str) -> None:
        q.forget(rel_dir, (k for k, _ in THROTTLES), removed)
        for dev in removed:
            for key, _ in THROTTLES:
                q.queue(rnd, key, rel_dir, dev, 0, owner.format(disk=f"{dev[0]}:{dev[1]}"))
