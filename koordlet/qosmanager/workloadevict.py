"""Eviction of a standalone host's configured workloads (``koordlet run --standalone``).

A workload is a pod of namespace ``standalone`` whose cgroup is its own: evicting one stops the workload
itself.  A workload given as ``systemdUnit`` is stopped through systemd (``systemctl stop --no-block``),
so the unit is marked inactive and its ``Restart=`` does not bring it straight back, as a SIGKILL to its
processes would; a workload given as ``cgroupPath`` has no manager to ask, and its processes get SIGKILL
(:class:`~koordlet.qosmanager.evictor.KillBackend`).  Every other pod (one found in a kubepods tree) goes
to the configured backend.

A BE workload whose cgroup holds another workload of a different class is refused at start-up: evicting
it would kill or stop that workload too.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Sequence

from koordlet.config.types import WorkloadConfig
from koordlet.errors import ConfigError
from koordlet.qosmanager.evictor import Backend, EvictionFailed, KillBackend
from koordlet.statesinformer.framework import PodMeta
from koordlet.statesinformer.standalone import WORKLOAD_SOURCE, workload_dir, workload_uid
from koordlet.system.layout import CgroupLayout

log = logging.getLogger(__name__)

SYSTEMCTL = "systemctl"
SYSTEMCTL_TIMEOUT_SECONDS = 10.0
"""``--no-block`` only queues the stop job, so systemctl answers at once; a systemd that does not answer
in this time is stuck, and the eviction is reported failed (the strategy retries on a later round)."""

Runner = Callable[[Sequence[str], float], "subprocess.CompletedProcess[str]"]
"""Runs argv with a timeout in seconds (``subprocess.run`` semantics: raises FileNotFoundError for a
missing program, ``subprocess.TimeoutExpired`` past the timeout)."""


def run_command(argv: Sequence[str], timeout_seconds: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_seconds, check=False,
                          stdin=subprocess.DEVNULL)


def check_nesting(workloads: Sequence[WorkloadConfig]) -> None:
    """Raises ConfigError when a BE workload's cgroup is, or holds, the cgroup of a non-BE workload."""
    for i, w in enumerate(workloads):
        if w.qos_class != "BE":
            continue
        outer = workload_dir(w)
        if not outer:
            raise ConfigError(f"workloads[{i}].cgroupPath: BE workload {w.name!r} is the hierarchy root: evicting "
                              "it would kill every process of the host")
        for other in workloads:
            inner = workload_dir(other)
            if other.qos_class != "BE" and (inner == outer or inner.startswith(outer + "/")):
                raise ConfigError(
                    f"workloads[{i}]: BE workload {w.name!r} (cgroup {outer}) holds the cgroup of "
                    f"{other.qos_class} workload {other.name!r} ({inner}): evicting or suppressing it would "
                    "hit that workload too; give them separate cgroups")


class WorkloadBackend:
    """Stops configured workloads (systemd unit or SIGKILL); hands other pods to ``fallback``."""

    name = "standalone"

    def __init__(self, workloads: Sequence[WorkloadConfig], layout: CgroupLayout, fallback: Backend, *,
                 run: Runner = run_command, kill: Callable[[int, int], None] | None = None,
                 timeout_seconds: float = SYSTEMCTL_TIMEOUT_SECONDS) -> None:
        check_nesting(workloads)
        self._units = {workload_uid(w.name): w.systemd_unit for w in workloads}
        """uid -> systemd unit ("" for a cgroupPath workload)."""
        self._fallback = fallback
        self._killer = KillBackend(layout) if kill is None else KillBackend(layout, kill)
        self._run = run
        self._timeout = timeout_seconds

    def evict(self, pod: PodMeta, reason: str, message: str) -> None:
        if pod.source != WORKLOAD_SOURCE:
            self._fallback.evict(pod, reason, message)
            return
        if pod.uid not in self._units:
            raise EvictionFailed(f"pod {pod.pod.key} is no configured workload (uid {pod.uid})")
        unit = self._units[pod.uid]
        if unit:
            self._stop_unit(pod, unit, reason, message)
        else:
            self._kill(pod, reason, message)

    def _kill(self, pod: PodMeta, reason: str, message: str) -> None:
        # Nothing to kill is a failure, not an eviction: it would sit as pending and release nothing.
        if not self._killer.pids(pod):
            raise EvictionFailed(f"workload {pod.pod.key}: no process in its cgroup {pod.cgroup_dir}, nothing to kill")
        self._killer.evict(pod, reason, message)

    def _stop_unit(self, pod: PodMeta, unit: str, reason: str, message: str) -> None:
        # "--" so a unit name is never read as an option (the root slice is called "-.slice").
        argv = [SYSTEMCTL, "stop", "--no-block", "--", unit]
        try:
            done = self._run(argv, self._timeout)
        except FileNotFoundError:
            raise EvictionFailed(f"cannot stop unit {unit} of workload {pod.pod.key}: {SYSTEMCTL} not found "
                                 "(a systemdUnit workload needs a host run by systemd)") from None
        except subprocess.TimeoutExpired:
            raise EvictionFailed(f"{SYSTEMCTL} stop {unit} of workload {pod.pod.key}: no answer within "
                                 f"{self._timeout:g} s") from None
        except OSError as exc:
            raise EvictionFailed(f"cannot run {SYSTEMCTL} to stop unit {unit} of workload {pod.pod.key}: {exc}"
                                 ) from None
        if done.returncode != 0:
            detail = (done.stderr or "").strip()[:500] or "no message"
            raise EvictionFailed(f"{SYSTEMCTL} stop {unit} of workload {pod.pod.key} exited {done.returncode}: "
                                 f"{detail}")
        log.warning("workload evicted: stop of its unit queued",
                    extra={"workload": pod.pod.key, "reason": reason, "unit": unit, "detail": message})
