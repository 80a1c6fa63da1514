"""Relative cgroup directories of kubelet's QoS, pod and container levels.

kubelet names its cgroups differently per cgroup driver (koordinator ``util/system/cgroup_driver.go``):

=========  =================================  ==============================================================
level      cgroupfs                           systemd
=========  =================================  ==============================================================
root       ``kubepods``                       ``kubepods.slice``
QoS        ``kubepods/burstable``             ``kubepods.slice/kubepods-burstable.slice``
pod        ``.../pod<uid>``                   ``.../kubepods-burstable-pod<uid, '-' as '_'>.slice``
container  ``.../<id>``                       ``.../cri-containerd-<id>.scope`` (``crio-``, ``docker-``...)
=========  =================================  ==============================================================

Guaranteed pods sit directly in the root (``kubepods/pod<uid>``, ``kubepods.slice/kubepods-pod<uid>.slice``).
Directories are returned relative to a hierarchy root, without leading or trailing slashes; join them
with a :class:`~koordlet.system.layout.CgroupLayout` root or use
:meth:`koordlet.system.resources.CgroupFile.path`.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass

from koordlet.errors import ParseError
from koordlet.system.layout import CgroupLayout, clean_rel_dir


class CgroupDriver(enum.Enum):
    """kubelet's ``--cgroup-driver``."""

    CGROUPFS = "cgroupfs"
    SYSTEMD = "systemd"


DEFAULT_DRIVER = CgroupDriver.SYSTEMD
"""What Koordinator assumes when the kubepods directory names do not tell (``GetCgroupFormatter``)."""


class KubeQoS(enum.Enum):
    """Kubernetes pod QoS class (``status.qosClass``), which picks the kubelet QoS directory."""

    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BESTEFFORT = "BestEffort"


class ContainerRuntime(enum.Enum):
    """The scheme of a CRI container id (``containerd://<id>``)."""

    CONTAINERD = "containerd"
    CRIO = "cri-o"
    DOCKER = "docker"
    POUCH = "pouch"


# The scope prefix each runtime gives a container under the systemd driver.
_SCOPE_PREFIX = {
    ContainerRuntime.CONTAINERD: "cri-containerd-",
    ContainerRuntime.CRIO: "crio-",
    ContainerRuntime.DOCKER: "docker-",
    ContainerRuntime.POUCH: "pouch-",
}

_KUBEPODS = {CgroupDriver.CGROUPFS: "kubepods", CgroupDriver.SYSTEMD: "kubepods.slice"}

# Pod UIDs are UUIDs, static pods use a hex hash: neither contains '_' or '/', so the systemd '-' -> '_'
# escaping is reversible.
_POD_UID = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]*")
_CONTAINER_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z_.-]*")


@dataclass(frozen=True)
class ContainerRef:
    """A container id split into runtime and bare id; ``runtime`` is None when a cgroupfs directory
    name (the bare id) does not say which runtime made it."""

    runtime: ContainerRuntime | None
    id: str


@dataclass(frozen=True)
class DriverGuess:
    """The detected cgroup driver and how it was found (for logs and ``koordctl doctor``)."""

    driver: CgroupDriver
    guessed: bool
    """False when the kubepods directory named the driver; True when :data:`DEFAULT_DRIVER` was assumed."""
    reason: str


def detect_driver(layout: CgroupLayout, parent: str = "") -> DriverGuess:
    """Guesses the driver from the kubepods directory name in the cpu hierarchy, as Koordinator does:
    exactly one of ``kubepods`` / ``kubepods.slice`` decides; none or both fall back to systemd.
    ``parent`` is kubelet's ``--cgroup-root`` below the hierarchy root ("" for the root itself)."""
    base = layout.subsystem_dir("cpu") or layout.unified_root or layout.paths.cgroup_root
    if parent.strip("/"):
        base = os.path.join(base, parent.strip("/"))
    present = [d for d in CgroupDriver if os.path.isdir(os.path.join(base, _KUBEPODS[d]))]
    if len(present) == 1:
        driver = present[0]
        return DriverGuess(driver, False, f"{_KUBEPODS[driver]} found in {base}")
    if present:
        what = f"both kubepods and kubepods.slice exist in {base}"
    else:
        what = f"no kubepods or kubepods.slice in {base}"
    return DriverGuess(DEFAULT_DRIVER, True, f"{what}; assuming {DEFAULT_DRIVER.value} as Koordinator does")


def _check_pod_uid(pod_uid: str) -> None:
    if not isinstance(pod_uid, str) or not _POD_UID.fullmatch(pod_uid):
        raise ParseError(f"invalid pod uid {pod_uid!r}: expected letters, digits and '-'")


def kubepods_dir(driver: CgroupDriver) -> str:
    """kubelet's root cgroup: ``kubepods`` or ``kubepods.slice``."""
    return _KUBEPODS[driver]


def under_parent(parent: str, rel_dir: str) -> str:
    """A kubelet directory below kubelet's ``--cgroup-root`` (``parent``; "" is the hierarchy root)."""
    parent = parent.strip("/")
    return f"{parent}/{rel_dir}" if parent else rel_dir


def qos_dir(driver: CgroupDriver, qos: KubeQoS) -> str:
    """The QoS level: the root itself for Guaranteed, else its burstable/besteffort child."""
    root = _KUBEPODS[driver]
    if qos is KubeQoS.GUARANTEED:
        return root
    name = "burstable" if qos is KubeQoS.BURSTABLE else "besteffort"
    if driver is CgroupDriver.SYSTEMD:
        return f"{root}/kubepods-{name}.slice"
    return f"{root}/{name}"


def pod_dir_name(driver: CgroupDriver, qos: KubeQoS, pod_uid: str) -> str:
    """The pod directory's own name (``pod<uid>`` or ``kubepods-<qos>-pod<uid_>.slice``)."""
    _check_pod_uid(pod_uid)
    if driver is CgroupDriver.CGROUPFS:
        return f"pod{pod_uid}"
    escaped = pod_uid.replace("-", "_")
    if qos is KubeQoS.GUARANTEED:
        return f"kubepods-pod{escaped}.slice"
    name = "burstable" if qos is KubeQoS.BURSTABLE else "besteffort"
    return f"kubepods-{name}-pod{escaped}.slice"


def pod_dir(driver: CgroupDriver, qos: KubeQoS, pod_uid: str) -> str:
    """The pod level, relative to a hierarchy root."""
    return f"{qos_dir(driver, qos)}/{pod_dir_name(driver, qos, pod_uid)}"


def parse_container_id(container_id: str) -> ContainerRef:
    """Splits a CRI container id (``containerd://<id>``, ``cri-o://``, ``docker://``, ``pouch://``)."""
    scheme, sep, bare = container_id.partition("://") if isinstance(container_id, str) else ("", "", "")
    if not sep:
        raise ParseError(f"invalid container id {container_id!r}: expected '<runtime>://<id>'")
    try:
        runtime = ContainerRuntime(scheme)
    except ValueError:
        known = ", ".join(r.value for r in ContainerRuntime)
        raise ParseError(f"unknown container runtime {scheme!r} in {container_id!r} (known: {known})") from None
    if not _CONTAINER_ID.fullmatch(bare):
        raise ParseError(f"invalid container id {container_id!r}: the id after '://' is empty or has bad characters")
    return ContainerRef(runtime, bare)


def container_dir_name(driver: CgroupDriver, container_id: str) -> str:
    """The container directory's own name: the bare id (cgroupfs) or ``<prefix><id>.scope`` (systemd)."""
    ref = parse_container_id(container_id)
    if driver is CgroupDriver.CGROUPFS:
        return ref.id
    assert ref.runtime is not None
    return f"{_SCOPE_PREFIX[ref.runtime]}{ref.id}.scope"


def container_dir(driver: CgroupDriver, qos: KubeQoS, pod_uid: str, container_id: str) -> str:
    """The container level, relative to a hierarchy root."""
    return f"{pod_dir(driver, qos, pod_uid)}/{container_dir_name(driver, container_id)}"


def parse_pod_dir_name(driver: CgroupDriver, name: str) -> str:
    """The pod UID (with '-' restored under systemd) from a pod directory name."""
    if driver is CgroupDriver.CGROUPFS:
        uid = name[len("pod") :] if name.startswith("pod") else ""
    else:
        uid = ""
        if name.endswith(".slice"):
            for prefix in ("kubepods-besteffort-pod", "kubepods-burstable-pod", "kubepods-pod"):
                if name.startswith(prefix):
                    uid = name[len(prefix) : -len(".slice")].replace("_", "-")
                    break
    if not _POD_UID.fullmatch(uid):
        raise ParseError(f"{name!r} is not a {driver.value} pod cgroup directory name")
    return uid


def parse_container_dir_name(driver: CgroupDriver, name: str) -> ContainerRef:
    """The container from a container directory name (the inverse of :func:`container_dir_name`)."""
    if driver is CgroupDriver.CGROUPFS:
        if not _CONTAINER_ID.fullmatch(name):
            raise ParseError(f"{name!r} is not a cgroupfs container directory name")
        return ContainerRef(None, name)
    for runtime, prefix in _SCOPE_PREFIX.items():
        if not name.startswith(prefix):
            continue
        bare = name[len(prefix) :]
        # cri-o also creates crio-<id> without ".scope" for infra containers (Koordinator accepts it).
        if bare.endswith(".scope"):
            bare = bare[: -len(".scope")]
        elif runtime is not ContainerRuntime.CRIO:
            break
        # cri-o's monitor process lives in crio-conmon-<id>.scope: not a container.
        if runtime is ContainerRuntime.CRIO and bare.startswith("conmon-"):
            raise ParseError(f"{name!r} is cri-o's conmon scope, not a container")
        if _CONTAINER_ID.fullmatch(bare):
            return ContainerRef(runtime, bare)
        break
    raise ParseError(f"{name!r} is not a systemd container scope name (cri-containerd-/crio-/docker-/pouch-<id>.scope)")


def cgroup_parent_dir(parent: str) -> str:
    """The directory a CRI ``cgroup_parent`` names, relative to the hierarchy roots.

    cgroupfs parents are paths (``/kubepods/besteffort/pod<uid>``); systemd parents are one slice name
    that systemd expands by its dashes (``kubepods-besteffort-pod<uid_>.slice`` ->
    ``kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid_>.slice``, systemd.slice(5)).
    """
    parent = parent.strip()
    if "/" in parent or not parent.endswith(".slice"):
        return clean_rel_dir(parent)
    stem = parent[: -len(".slice")]
    if stem in ("", "-"):
        return ""
    words = stem.split("-")
    if "" in words:
        raise ParseError(f"invalid systemd slice {parent!r}: empty part between dashes")
    return "/".join("-".join(words[: i + 1]) + ".slice" for i in range(len(words)))


def kube_qos_of_parent(parent_dir: str) -> KubeQoS | None:
    """The kubelet QoS level a pod cgroup directory sits in, None when it is not below kubepods."""
    parts = [p for p in parent_dir.split("/") if p]
    for i, part in enumerate(parts):
        if part not in _KUBEPODS.values():
            continue
        below = parts[i + 1] if i + 1 < len(parts) else ""
        if below in ("besteffort", "kubepods-besteffort.slice"):
            return KubeQoS.BESTEFFORT
        if below in ("burstable", "kubepods-burstable.slice"):
            return KubeQoS.BURSTABLE
        return KubeQoS.GUARANTEED
    return None
