"""What the node keeps back from pods: kubelet's ``kubeReserved`` + ``systemReserved``, and how kubelet's
CPU manager hands out CPUs (``cpuManagerPolicy``).

Koordinator's suppress and batch formulas use max(system usage, reserved), so a node whose daemons are
idle still leaves their share alone.  kubelet reports its configuration on ``/configz``; a plain host
states its reservation in the config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from koordlet.apis.quantity import int_value, milli_value
from koordlet.errors import ParseError
from koordlet.statesinformer.cpumanager import POLICIES, POLICY_NONE
from koordlet.system.validators import parse_cpulist


@dataclass(frozen=True, slots=True)
class Reservation:
    cpu_milli: int = 0
    memory_bytes: int = 0
    cpus: tuple[int, ...] = ()
    """CPUs reserved by id (kubelet ``reservedSystemCPUs``): BE never gets them, whatever the quantity."""
    cpu_manager_policy: str = POLICY_NONE
    """kubelet's ``cpuManagerPolicy`` (``none`` or ``static``): under ``static`` kubelet pins CPUs to
    Guaranteed containers and rewrites the cpuset of every other container (cpusuppress then limits BE
    per container, Koordinator #546)."""
    cpu_manager_policy_options: tuple[tuple[str, str], ...] = ()
    """kubelet's ``cpuManagerPolicyOptions`` (``full-pcpus-only``...), sorted by name; reported in the node
    topology's ``kubelet.koordinator.sh/cpu-manager-policy``."""
    topology_manager_policy: str = ""
    """kubelet's ``topologyManagerPolicy`` (``none``, ``best-effort``, ``restricted``, ``single-numa-node``)."""
    topology_manager_scope: str = ""
    """kubelet's ``topologyManagerScope`` (``container`` or ``pod``)."""

    def __add__(self, other: Reservation) -> Reservation:
        """The sum of two reservations; the policy is this one's."""
        return Reservation(self.cpu_milli + other.cpu_milli, self.memory_bytes + other.memory_bytes,
                           tuple(sorted(set(self.cpus) | set(other.cpus))), self.cpu_manager_policy)


def reservation_from_resources(resources: Any, where: str) -> Reservation:
    """A ``{"cpu": "500m", "memory": "1Gi"}`` map; other resources (ephemeral-storage, pid) are ignored."""
    if resources is None:
        return Reservation()
    if not isinstance(resources, Mapping):
        raise ParseError(f"{where}: expected a map of resource to quantity, got {type(resources).__name__}")
    try:
        return Reservation(
            cpu_milli=milli_value(resources["cpu"]) if "cpu" in resources else 0,
            memory_bytes=int_value(resources["memory"]) if "memory" in resources else 0,
        )
    except ParseError as exc:
        raise ParseError(f"{where}: {exc}") from None


def reservation_from_configz(obj: Any) -> Reservation:
    """kubelet's ``/configz`` answer: ``{"kubeletconfig": {"kubeReserved": {...}, "systemReserved": {...},
    "reservedSystemCPUs": "0-1", "cpuManagerPolicy": "static"}}``; a missing policy is kubelet's default,
    ``none``."""
    config = obj.get("kubeletconfig") if isinstance(obj, Mapping) else None
    if not isinstance(config, Mapping):
        raise ParseError("configz: expected an object with a kubeletconfig object")
    reserved = (reservation_from_resources(config.get("kubeReserved"), "kubeletconfig.kubeReserved")
                + reservation_from_resources(config.get("systemReserved"), "kubeletconfig.systemReserved"))
    cpus_text = config.get("reservedSystemCPUs")
    if cpus_text:
        if not isinstance(cpus_text, str):
            raise ParseError(f"kubeletconfig.reservedSystemCPUs: expected a cpu list string, got {cpus_text!r}")
        try:
            cpus = tuple(parse_cpulist(cpus_text))
        except ValueError as exc:
            raise ParseError(f"kubeletconfig.reservedSystemCPUs: {exc}") from None
        # kubelet: reservedSystemCPUs overrides the CPU quantity of kube+system reserved.
        reserved = Reservation(len(cpus) * 1000, reserved.memory_bytes, cpus)
    policy = config.get("cpuManagerPolicy") or POLICY_NONE
    if policy not in POLICIES:
        raise ParseError(f"kubeletconfig.cpuManagerPolicy: expected one of {', '.join(POLICIES)}, got {policy!r}")
    options = config.get("cpuManagerPolicyOptions") or {}
    if not isinstance(options, Mapping) or not all(isinstance(v, str) for v in options.values()):
        raise ParseError(f"kubeletconfig.cpuManagerPolicyOptions: expected a map of option to string, got {options!r}")
    topology: dict[str, str] = {}
    for key in ("topologyManagerPolicy", "topologyManagerScope"):
        value = config.get(key) or ""
        if not isinstance(value, str):
            raise ParseError(f"kubeletconfig.{key}: expected a string, got {value!r}")
        topology[key] = value
    return replace(reserved, cpu_manager_policy=policy,
                   cpu_manager_policy_options=tuple(sorted((str(k), v) for k, v in options.items())),
                   topology_manager_policy=topology["topologyManagerPolicy"],
                   topology_manager_scope=topology["topologyManagerScope"])
