"""kubelet's CPU manager as the koordlet sees it: the policy from ``/configz`` (``cpuManagerPolicy``) and
the CPUs the static policy pinned to containers, from kubelet's checkpoint ``<root-dir>/cpu_manager_state``
(Koordinator ``util/kubelet.GetCPUManagerStateFilePath``; kubelet ``cm/cpumanager/state``).

The checkpoint is kubelet's v2 format::

    {"policyName": "static", "defaultCpuSet": "0,3-7", "entries": {"<pod uid>": {"<container>": "1-2"}},
     "checksum": 1234}

``entries`` holds only exclusive assignments (Guaranteed containers with whole CPUs); every other container
runs on ``defaultCpuSet``.  The checksum is kubelet's own hash of its Go structs and is not checked here:
kubelet writes the file by rename, so a reader never sees half of one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.errors import ParseError
from koordlet.system.validators import parse_cpulist

POLICY_NONE: Final = "none"
POLICY_STATIC: Final = "static"
POLICIES: Final = (POLICY_NONE, POLICY_STATIC)
"""kubelet's ``--cpu-manager-policy`` values (``none`` is its default)."""
STATE_FILE: Final = "cpu_manager_state"


@dataclass(frozen=True)
class PinnedContainer:
    """CPUs kubelet's static policy gave one container for itself."""

    pod_uid: str
    container: str
    cpus: tuple[int, ...]
    cgroup_dir: str = ""
    """The container's cgroup directory relative to a hierarchy root; "" while the pod list does not
    know the container (not started yet, or a stale entry kubelet has not cleaned up)."""


@dataclass(frozen=True)
class CPUManagerState:
    """One ``cpu_manager_state`` checkpoint."""

    policy_name: str
    default_cpus: tuple[int, ...]
    """The shared pool kubelet runs every non-exclusive container on."""
    assignments: tuple[PinnedContainer, ...]
    """The exclusive assignments, by pod uid then container name."""


@dataclass(frozen=True)
class KubeletCPUManager:
    """kubelet's CPU manager now: what the QoS strategies must leave alone."""

    policy: str = POLICY_NONE
    """``cpuManagerPolicy`` from ``/configz`` (``none`` until it is read, and on a plain host)."""
    pinned: tuple[PinnedContainer, ...] = ()
    """Exclusive CPUs of containers of pods Koordinator does not place itself (see
    :func:`koordlet.statesinformer.cpupools.kubelet_pinned`)."""
    error: str = ""
    """Why the state file could not be read ("" when it could); ``pinned`` are then the last good ones."""

    @property
    def static(self) -> bool:
        return self.policy == POLICY_STATIC

    @property
    def pinned_cpus(self) -> frozenset[int]:
        return frozenset(cpu for p in self.pinned for cpu in p.cpus)

    @property
    def pinned_dirs(self) -> tuple[str, ...]:
        """The cgroup directories of the pinned containers the pod list knows."""
        return tuple(p.cgroup_dir for p in self.pinned if p.cgroup_dir)


def _cpus(value: Any, where: str) -> tuple[int, ...]:
    return tuple(gojson.parsed(value, where, parse_cpulist, expected="a cpu list string"))


def parse_cpu_manager_state(text: str, where: str) -> CPUManagerState:
    """The checkpoint in ``text``; raises :class:`ParseError` naming ``where`` (the file) and the field."""
    if not text.strip():
        raise ParseError(f"{where}: empty (kubelet writes the checkpoint whole, by rename)")
    obj = gojson.load_object(text, where)
    policy = obj.get("policyName")
    if not isinstance(policy, str) or not policy:
        raise ParseError(f"{where}: policyName: expected a policy name, got {policy!r}")
    default = _cpus(obj.get("defaultCpuSet", ""), f"{where}: defaultCpuSet")
    entries = obj.get("entries") or {}
    if not isinstance(entries, Mapping):
        raise ParseError(f"{where}: entries: expected an object of pod uid to containers, got {entries!r}")
    assignments: list[PinnedContainer] = []
    for uid, containers in sorted(entries.items()):
        if not isinstance(containers, Mapping):
            # Older kubelets wrote v1 checkpoints: container id -> cpus, which name no pod.
            raise ParseError(f"{where}: entries[{uid!r}]: expected an object of container name to cpus, got "
                             f"{containers!r} (an older kubelet's v1 checkpoint is not read)")
        for name, cpus in sorted(containers.items()):
            pinned = _cpus(cpus, f"{where}: entries[{uid!r}][{name!r}]")
            if pinned:
                assignments.append(PinnedContainer(str(uid), str(name), pinned))
    return CPUManagerState(policy, default, tuple(assignments))
