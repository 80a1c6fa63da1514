"""Per-pod block IO QoS (Koordinator ``qosmanager/plugins/blkio``, the pod loop of ``reconcile``): a pod
annotated ``koordinator.sh/blkioQOS`` (upstream ``apis/slo/v1alpha1`` ``AnnotationPodBlkioQoS``, a
``BlkIOQOS`` object ``{"blocks": [{"name": "data", "type": "podvolume", "ioCfg": {"readBPS": ...}}]}``) gets
the blocks' throttles in its own cgroup, and every other disk with a rule in its throttle files loses it
(upstream's disk recorder).

Block types, as upstream's ``getDiskNumberFromBlockCfg`` for a pod: ``device`` and ``volumegroup`` as for the
class, and ``podvolume``: the block's name is one of the pod's ``spec.volumes``, resolved to the disk under
kubelet's mount ``<kubelet root>/pods/<uid>/volumes/kubernetes.io~csi/<dir>/mount``:

* a CSI ephemeral volume: ``<dir>`` is the volume's own name (upstream the same);
* a PVC: ``<dir>`` is the bound PV's name.  Upstream reads it from the PVC (``GetVolumeName``, an API-server
  informer); this koordlet never talks to the API server, so it takes the pod's one CSI mount directory that
  is no CSI ephemeral volume of the pod.  A pod with several PVC-backed CSI mounts is ambiguous: that block
  is refused with an error naming the pod, the volume and the candidates.

The mount's device number comes from ``<proc>/1/mountinfo`` (field 3, ``major:minor`` of the mounted file
system), mapped to its whole disk (a partition) or, for device-mapper (an LVM volume), to the disks below it,
as upstream's ``getDiskByMountPoint`` maps a partition or an LV through its storage maps.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from koordlet.apis.gojson import loads
from koordlet.apis.nodeslo import BlkIOQOSCfg
from koordlet.apis.pod import Pod
from koordlet.errors import KoordletError, ParseError
from koordlet.qosmanager.plugins.blkio.devices import BlockDevices, Device

ANNOTATION_POD_BLKIO_QOS = "koordinator.sh/blkioQOS"
CSI_DIR = "volumes/kubernetes.io~csi"


class VolumeError(ValueError):
    """A pod volume that cannot be resolved to a disk; the message names the pod and the volume."""


def pod_blkio(pod: Pod) -> BlkIOQOSCfg | None:
    """The pod's annotation as a ``blkioQOS`` (its blocks apply; ``enable`` is not read, as upstream);
    None without one; raises :class:`VolumeError` naming the pod and the annotation when it is malformed."""
    text = pod.annotations.get(ANNOTATION_POD_BLKIO_QOS)
    if text is None:
        return None
    where = f"pod {pod.key}: annotation {ANNOTATION_POD_BLKIO_QOS}"
    if not text:
        return BlkIOQOSCfg(enable=True, blocks=())
    try:
        raw = loads(text)
        cfg = BlkIOQOSCfg.from_json(raw, where="blkioQOS")
    except (ValueError, ParseError, KoordletError) as exc:
        raise VolumeError(f"{where}: {exc}") from None
    return BlkIOQOSCfg(enable=True, blocks=cfg.blocks or ())


def mount_devices(proc_root: str) -> dict[str, tuple[int, int]]:
    """Mount point -> ``(major, minor)`` of the mounted file system, from the host's ``1/mountinfo``
    (the last mount of a point wins: it is the one visible)."""
    mounts: dict[str, tuple[int, int]] = {}
    try:
        with open(os.path.join(proc_root, "1", "mountinfo"), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return mounts
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        major, sep, minor = fields[2].partition(":")
        if sep and major.isdigit() and minor.isdigit():
            mounts[_unescape(fields[4])] = (int(major), int(minor))
    return mounts


def _unescape(path: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as octal (\040 ...).
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def volume_resolver(pod: Pod, kubelet_root: str, devices: BlockDevices,
                    mounts: Callable[[], dict[str, tuple[int, int]]]) -> Callable[[str], tuple[Device, ...]]:
    """``podvolume`` block name -> the disks under it, for ``pod``; raises :class:`VolumeError`."""

    def resolve(name: str) -> tuple[Device, ...]:
        where = f"pod {pod.key}: volume {name!r}"
        volume = next((v for v in pod.volumes if v.name == name), None)
        if volume is None:
            raise VolumeError(f"{where}: the pod has no such volume")
        base = os.path.join(kubelet_root, "pods", pod.uid, CSI_DIR)
        if volume.csi:
            directory = name
        elif volume.claim_name:
            directory = _claim_dir(pod, base, where, volume.claim_name)
        else:
            raise VolumeError(f"{where}: neither a PVC nor a CSI volume (upstream resolves only those)")
        mountpoint = os.path.join(base, directory, "mount")
        dev = mounts().get(mountpoint)
        if dev is None:
            raise VolumeError(f"{where}: {mountpoint} is not mounted")
        try:
            return devices.disks_of_number(*dev)
        except ValueError as exc:
            raise VolumeError(f"{where}: {mountpoint} is on {dev[0]}:{dev[1]}: {exc}") from None

    return resolve


def _claim_dir(pod: Pod, base: str, where: str, claim: str) -> str:
    ephemeral = {v.name for v in pod.volumes if v.csi}
    try:
        dirs = sorted(d for d in os.listdir(base) if d not in ephemeral)
    except OSError:
        dirs = []
    if len(dirs) == 1:
        return dirs[0]
    if not dirs:
        raise VolumeError(f"{where}: no CSI mount of the pod under {base}")
    raise VolumeError(f"{where}: the pod has several PVC mounts ({', '.join(dirs)}); telling which one is claim "
                      f"{claim!r} needs the PVC from the API server, which this koordlet does not read")
