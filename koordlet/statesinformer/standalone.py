"""Pods of a host without Kubernetes: workloads named in the config, and any kubepods tree found on disk.

A workload becomes a pod of namespace ``standalone`` (uid ``standalone-<name>``) so collectors, strategies
and reports treat it like any pod.  A kubepods tree (left by a kubelet, or made by a runtime directly) is
read from the cpu hierarchy: its QoS directory gives the Kubernetes QoS class, so Guaranteed/Burstable/
BestEffort pods map to LSR/LS/BE as Koordinator's fallback does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar

from koordlet.apis.extension import LABEL_QOS
from koordlet.apis.pod import Container, Pod
from koordlet.config.types import WorkloadConfig
from koordlet.errors import KoordletError, ParseError
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from koordlet.system.kubepaths import (
    CgroupDriver,
    KubeQoS,
    parse_container_dir_name,
    parse_pod_dir_name,
    qos_dir,
    under_parent,
)
from koordlet.system.layout import CgroupLayout

STANDALONE_NAMESPACE = "standalone"
WORKLOAD_SOURCE = "config"
"""``PodMeta.source`` of a configured workload."""
DISCOVERED_SOURCE = "kubepods"
"""``PodMeta.source`` of a pod found in a kubepods tree on the host."""


_Name = TypeVar("_Name")


def workload_uid(name: str) -> str:
    return f"standalone-{name}"


def workload_dir(w: WorkloadConfig) -> str:
    """The workload's cgroup relative to the hierarchy roots (a systemd unit lives in ``system.slice/<unit>``)."""
    return w.cgroup_path.strip("/") if w.cgroup_path else f"system.slice/{w.systemd_unit}"


def workload_pods(workloads: Sequence[WorkloadConfig]) -> list[PodMeta]:
    """The configured workloads as pods."""
    pods = []
    for w in workloads:
        rel_dir = workload_dir(w)
        pod = Pod(
            uid=workload_uid(w.name),
            name=w.name,
            namespace=STANDALONE_NAMESPACE,
            labels={LABEL_QOS: w.qos_class},
            annotations={},
            kube_qos=None,
            phase="Running",
            priority=w.priority,
        )
        pods.append(PodMeta(pod=pod, cgroup_dir=rel_dir, containers=(), source=WORKLOAD_SOURCE))
    return pods


def scan_kubepods(layout: CgroupLayout, driver: CgroupDriver, parent: str = "",
                  known: Mapping[str, PodMeta] | None = None) -> list[PodMeta]:
    """Pods and their containers found under the kubepods QoS directories of the cpu hierarchy.  ``known``
    (the last scan's pods by cgroup directory) are returned again, the same objects, when their directory holds
    the same entries: a rescan every second then builds nothing, and the informer sees an unchanged list."""
    try:
        root = layout.controller_root("cpu")
    except KoordletError:
        return []
    pods: list[PodMeta] = []
    for qos in KubeQoS:
        qdir = under_parent(parent, qos_dir(driver, qos))
        # Names that do not parse are QoS subdirectories and directories that are not pods.
        for entry, uid in _named_subdirs(os.path.join(root, qdir), lambda name: parse_pod_dir_name(driver, name)):
            rel_dir = f"{qdir}/{entry.name}"
            pods.append(_discovered_pod(entry.path, rel_dir, uid, qos, driver,
                                        None if known is None else known.get(rel_dir)))
    return pods


def _named_subdirs(path: str, parse: Callable[[str], _Name]) -> Iterator[tuple[os.DirEntry[str], _Name]]:
    """The directories right under ``path`` whose names ``parse`` accepts, with what it made of them; none
    when ``path`` cannot be listed (gone meanwhile)."""
    try:
        entries = list(os.scandir(path))
    except OSError:
        return
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        try:
            parsed = parse(entry.name)
        except ParseError:
            continue
        yield entry, parsed


def _discovered_pod(path: str, rel_dir: str, uid: str, qos: KubeQoS, driver: CgroupDriver,
                    known: PodMeta | None = None) -> PodMeta:
    try:
        names = sorted(entry.name for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False))
    except OSError:  # gone meanwhile: a pod without containers, as a listing that failed gives
        names = []
    if (known is not None and known.cgroup_dir == rel_dir and known.pod.kube_qos is qos and known.pod.uid == uid
            and _dir_names(known) == names):
        return known
    containers = []
    for name in names:
        try:
            ref = parse_container_dir_name(driver, name)
        except ParseError:
            continue
        containers.append(ContainerMeta(name=ref.id[:12], container_id=ref.id, cgroup_dir=f"{rel_dir}/{name}"))
    containers.sort(key=lambda c: c.container_id)
    pod = Pod(
        uid=uid,
        name=f"pod{uid}",
        namespace="kubepods",
        labels={},
        annotations={},
        kube_qos=qos,
        phase="Running",
        priority=None,
        containers=tuple(Container(name=c.name, container_id=c.container_id) for c in containers),
    )
    return PodMeta(pod=pod, cgroup_dir=rel_dir, containers=tuple(containers), source=DISCOVERED_SOURCE)


def _dir_names(meta: PodMeta) -> list[str]:
    """The directory names of a discovered pod's containers, sorted: what its directory listed when it was made
    (a pod directory holding anything else is simply made again each time)."""
    return sorted(c.cgroup_dir.rsplit("/", 1)[1] for c in meta.containers)
