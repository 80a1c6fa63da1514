"""perf_event groups on a cgroup v2 directory or a task, for CPI and similar counters."""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from koordlet.errors import from_errno
from koordlet.native.core import check_path, ffi, lib


class PerfEvent(enum.Enum):
    """perf_event_open (type, config) pairs (include/uapi/linux/perf_event.h)."""

    CPU_CYCLES = (0, 0)
    INSTRUCTIONS = (0, 1)
    CACHE_MISSES = (0, 3)
    CPU_CLOCK = (1, 0)
    TASK_CLOCK = (1, 1)
    PAGE_FAULTS = (1, 2)
    CONTEXT_SWITCHES = (1, 3)
    CPU_MIGRATIONS = (1, 4)


@dataclass(frozen=True, slots=True)
class PerfReading:
    """Counts summed over the group's CPUs, with the time the groups were enabled and running."""

    values: dict[PerfEvent, int]
    time_enabled_ns: int
    time_running_ns: int

    def scaled(self, event: PerfEvent) -> float:
        """The count corrected for multiplexing (value * enabled / running).  Per-cgroup events on a
        cgroup with no task switched in report no times at all: the raw value stands then."""
        if not self.time_running_ns:
            return float(self.values[event])
        return self.values[event] * self.time_enabled_ns / self.time_running_ns


class PerfGroup:
    """A perf_event group per CPU on a cgroup v2 directory, or one group on a task.

    Events the kernel lacks (hardware counters in a VM without a PMU: ENOENT) are dropped and listed in
    :attr:`event_errors`; opening fails only when no event opens at all.
    """

    def __init__(self, handle: Any, events: tuple[PerfEvent, ...], errors: dict[PerfEvent, int]) -> None:
        self._handle = handle
        self._events = events
        self.event_errors = errors
        self.events = tuple(e for e in events if e not in errors)

    @classmethod
    def open_cgroup(
        cls, cgroup_dir: str | os.PathLike[str], cpus: Sequence[int], events: Sequence[PerfEvent]
    ) -> PerfGroup:
        """Counts tasks of a cgroup v2 directory (hierarchically) on the given CPUs."""
        if not cpus:
            raise ValueError("per-cgroup perf needs at least one CPU")
        return cls._open(check_path(cgroup_dir), 0, list(cpus), events)

    @classmethod
    def open_pid(cls, pid: int, events: Sequence[PerfEvent]) -> PerfGroup:
        """Counts one task (thread) on every CPU."""
        if pid <= 0:
            raise ValueError(f"invalid pid {pid}")
        return cls._open(None, pid, [], events)

    @classmethod
    def _open(cls, cgroup: bytes | None, pid: int, cpus: list[int], events: Sequence[PerfEvent]) -> PerfGroup:
        evs = tuple(events)
        if not evs or len(evs) > lib.KC_PERF_MAX_EVENTS or len(set(evs)) != len(evs):
            raise ValueError(f"need 1..{lib.KC_PERF_MAX_EVENTS} distinct events, got {evs}")
        types = ffi.new("uint32_t[]", [e.value[0] for e in evs])
        configs = ffi.new("uint64_t[]", [e.value[1] for e in evs])
        event_errs = ffi.new("int32_t[]", len(evs))
        err = ffi.new("int32_t *")
        cpu_array = ffi.new("int[]", cpus) if cpus else ffi.NULL
        handle = lib.kc_perf_open(
            cgroup if cgroup is not None else ffi.NULL, pid, cpu_array, len(cpus), types, configs, len(evs),
            event_errs, err,
        )
        target = os.fsdecode(cgroup) if cgroup is not None else f"pid {pid}"
        if handle == ffi.NULL:
            names = ", ".join(e.name for e in evs)
            raise from_errno(err[0], f"perf_event_open({names}) on {target}")
        errors = {e: int(event_errs[i]) for i, e in enumerate(evs) if event_errs[i]}
        return cls(ffi.gc(handle, lib.kc_perf_close), evs, errors)

    def enable(self) -> None:
        self._call(lib.kc_perf_enable, "enable")

    def disable(self) -> None:
        self._call(lib.kc_perf_disable, "disable")

    def read(self) -> PerfReading:
        handle = self._live()
        values = ffi.new("uint64_t[]", len(self._events))
        enabled = ffi.new("uint64_t *")
        running = ffi.new("uint64_t *")
        rc = lib.kc_perf_read(handle, values, enabled, running)
        if rc < 0:
            raise from_errno(rc, "perf read")
        counts = {e: int(values[i]) for i, e in enumerate(self._events) if e not in self.event_errors}
        return PerfReading(counts, int(enabled[0]), int(running[0]))

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            ffi.release(handle)

    def __enter__(self) -> PerfGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _live(self) -> Any:
        if self._handle is None:
            raise ValueError("perf group is closed")
        return self._handle

    def _call(self, fn: Any, what: str) -> None:
        rc = fn(self._live())
        if rc < 0:
            raise from_errno(rc, f"perf {what}")
