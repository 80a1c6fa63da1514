"""The ``terway-qos`` network QoS backend: files the Terway QoS agent (AliyunContainerService/terway-qos)
watches in its directory, ``/var/lib/terway/qos`` on the host (Koordinator mounts it at
``/host-var-lib/terway/qos``; runtimehooks/hooks/terwayqos).

``global_bps_config`` holds the node's bandwidth as ``key value`` lines in **bytes** per second, the
keys and order Koordinator writes (``Node.MarshalText``): ``hw_{tx,rx}_bps_max`` the total,
``offline_l1_*`` the LS class, ``offline_l2_*`` the BE class (terway's L0, "online", is SYSTEM and gets
whatever the other two leave).  The plan is in bits per second: both Koordinator plugins read the NodeSLO
quantities as bits (``BitsToBytes``), so the file gets ``bps // 8``.  The agent shapes in whole MB/s and
treats a rate under 1 MB/s as no limit (bpf/qos_tc.c ``accept()``), which is why 0 means "unlimited".

``pod.json`` is what the agent reads when it does not watch the API server itself (``qos d`` without
``--enable-k8s``): a JSON array of ``{podName, podNamespace, podUID, prio, ipv4, ipv6, hostNetwork,
cgroupDir}`` (terway-qos ``pkg/config/types.go``), ``prio`` 0 SYSTEM, 1 LS, 2 BE.  Koordinator writes
an object keyed by UID there, which the agent's ``json.Unmarshal`` into a slice rejects; this backend
writes the array.  It needs the pods' names and UIDs, which the plan does not carry, so it takes a pod
source; without one it leaves ``pod.json`` alone.

Every file is replaced atomically (:mod:`koordlet.system.atomicfile`: temporary file in the same directory,
fsync, rename, fsync of the directory): the agent reacts to each fsnotify event on the name and must never
read half a file.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import posixpath
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from koordlet.errors import ConfigError, from_errno
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoSPlan
from koordlet.system import atomicfile

if TYPE_CHECKING:
    from koordlet.statesinformer.framework import PodMeta

NODE_FILE = "global_bps_config"
POD_FILE = "pod.json"
DEFAULT_DIR = "/var/lib/terway/qos"
"""terway-qos ``rootFileConfig`` (pkg/config/syncer.go), a hostPath in its DaemonSet."""
NET_CLS_ROOT = "/sys/fs/cgroup/net_cls"
"""Where the agent looks for pod cgroups (its own mount namespace, so not koordlet's host prefix)."""
PRIO = {"system": 0, "ls": 1, "be": 2}
"""terway-qos priorities: 0 online (L0), 1 offline L1, 2 offline L2 (Koordinator ``prioMapping``)."""

PodSource = Callable[[], Iterable["PodMeta"]]


def node_config(plan: NetQoSPlan) -> dict[str, int]:
    """The ``global_bps_config`` values, bytes per second, in Koordinator's order.

    A class left at rate 0 and ceiling = total is unconfigured and is written as ``0 0`` as Koordinator
    does for a class whose ``networkQOS`` is off; the agent's ``Validate`` needs L1 and L2 maxima that
    fit in the total together, which two ceilings of the total would not."""
    total = plan.total_bps // 8
    values = {"hw_tx_bps_max": total, "hw_rx_bps_max": total}
    for level, name in (("l1", "ls"), ("l2", "be")):
        cls: ClassBandwidth = getattr(plan, name)
        for short, direction in (("tx", "egress"), ("rx", "ingress")):
            rate, ceil = getattr(cls, f"{direction}_rate_bps"), getattr(cls, f"{direction}_ceil_bps")
            if rate == 0 and ceil == plan.total_bps:
                rate = ceil = 0
            values[f"offline_{level}_{short}_bps_min"] = rate // 8
            values[f"offline_{level}_{short}_bps_max"] = ceil // 8
    _check_agent_rules(values)
    return values


def _check_agent_rules(values: dict[str, int]) -> None:
    # terway-qos pkg/types/config.go GlobalConfig.Validate() drops a config whose L1 and L2 maxima add up
    # to more than the total; the other rules (min <= max <= total) the plan guarantees already.
    for short, direction in (("tx", "egress"), ("rx", "ingress")):
        hw = values[f"hw_{short}_bps_max"]
        l1_max, l2_max = values[f"offline_l1_{short}_bps_max"], values[f"offline_l2_{short}_bps_max"]
        if l1_max + l2_max > hw:
            raise ConfigError(
                f"netqos.{{ls,be}}.{direction}_ceil_bps: the Terway QoS agent needs the LS and BE ceilings to fit "
                f"in the total together, got {l1_max} + {l2_max} > {hw} bytes/s"
            )


def node_config_text(values: dict[str, int]) -> str:
    return "".join(f"{key} {value}\n" for key, value in values.items())


def pod_entries(plan: NetQoSPlan, pods: Iterable[PodMeta]) -> list[dict[str, object]]:
    """One entry per pod holding an address of a plan class, sorted by namespace/name."""
    class_of = {ip: name for name, cls in plan.classes() for ip in cls.source_ips}
    entries: list[dict[str, object]] = []
    for meta in pods:
        pod = meta.pod
        mine = [ip for ip in pod.ips if ip in class_of]
        if not mine:
            continue
        v4 = next((ip for ip in mine if ipaddress.ip_address(ip).version == 4), "")
        v6 = next((ip for ip in mine if ipaddress.ip_address(ip).version == 6), "")
        entries.append({
            "podName": pod.name,
            "podNamespace": pod.namespace,
            "podUID": pod.uid,
            "prio": PRIO[class_of[mine[0]]],
            "ipv4": v4,
            "ipv6": v6,
            "hostNetwork": False,
            "cgroupDir": posixpath.join(NET_CLS_ROOT, meta.cgroup_dir.lstrip("/")),
        })
    entries.sort(key=lambda e: (str(e["podNamespace"]), str(e["podName"])))
    return entries


class TerwayNetQoS:
    """Writes the Terway QoS agent's files for a :class:`NetQoSPlan` (see the module docstring)."""

    def __init__(self, directory: str = DEFAULT_DIR, pods: PodSource | None = None) -> None:
        if not isinstance(directory, str) or not os.path.isabs(directory):
            raise ConfigError(f"terway_qos_dir: must be an absolute path, got {directory!r}")
        self.directory = directory
        self._pods = pods
        self._written: dict[str, str] = {}
        """File name -> the text this backend last put there (what clear() removes)."""

    def apply(self, plan: NetQoSPlan) -> None:
        if not isinstance(plan, NetQoSPlan):
            raise ConfigError(f"netqos: expected a NetQoSPlan, got {type(plan).__name__}")
        # Build every file first: a plan the agent would reject writes nothing.
        files = {NODE_FILE: node_config_text(node_config(plan))}
        if self._pods is not None:
            files[POD_FILE] = json.dumps(pod_entries(plan, self._pods()), indent=2) + "\n"
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise from_errno(exc.errno or errno.EIO, f"create {self.directory}") from None
        for name, text in files.items():
            self._replace(name, text)

    def clear(self) -> None:
        for name in list(self._written):
            path = os.path.join(self.directory, name)
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise from_errno(exc.errno or errno.EIO, f"remove {path}") from None
            del self._written[name]

    def describe(self) -> dict[str, object]:
        present = {}
        for name in (NODE_FILE, POD_FILE):
            path = os.path.join(self.directory, name)
            try:
                with open(path, encoding="utf-8") as f:
                    present[name] = f.read()
            except OSError:
                continue
        return {"backend": "terway-qos", "directory": self.directory, "files": present,
                "written_by_koordlet": sorted(self._written)}

    def _replace(self, name: str, text: str) -> None:
        path = os.path.join(self.directory, name)
        if self._written.get(name) == text and _read(path) == text:
            return  # unchanged: no fsnotify event, no agent resync
        try:
            atomicfile.write(path, text.encode())
        except OSError as exc:
            raise from_errno(exc.errno or errno.EIO, f"write {path}") from None
        self._written[name] = text


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


__all__ = ["DEFAULT_DIR", "NODE_FILE", "POD_FILE", "TerwayNetQoS", "node_config", "pod_entries"]
