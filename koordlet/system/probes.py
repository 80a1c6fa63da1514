"""Kernel feature probes: what this host supports, and why or why not.

``probe_all`` answers for every feature koordlet may use (``koordctl doctor`` prints the list, the
daemon logs it and turns strategies off that cannot work).  A probe never raises: an error becomes an
unsupported result whose reason names the file, call and errno.  Calls into the C core go through the
``native`` object the caller passes (``koordlet.native``, None when it cannot be loaded; the host layer sits
below the C core's wrappers and imports nothing of them), so unit tests can stand in for the kernel.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from koordlet.errors import KoordletError
from koordlet.system.cgroupfile import CgroupFile, Placement
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import detect_driver, kubepods_dir
from koordlet.system.layout import CgroupLayout, CgroupMode, detect_layout
from koordlet.system.resources import CPU_PRESSURE, IO_PRESSURE, MEMORY_PRESSURE, REGISTRY
from koordlet.system.validators import format_cpulist


@dataclass(frozen=True)
class ProbeResult:
    """One probed feature: a stable name, whether it is usable here, and why."""

    name: str
    supported: bool
    reason: str


# The controllers Koordinator's strategies need from a v2 hierarchy.
V2_CONTROLLERS = ("cpu", "cpuset", "io", "memory")

# A 2 s window: without CAP_SYS_RESOURCE the kernel accepts only multiples of 2 s (psi.rst).
PSI_PROBE_TRIGGER = "some 150000 2000000"

PROBE_DIR_PREFIX = "koordlet-probe-"
"""Prefix of the temporary v2 cgroups the per-cgroup perf probe and the v2 file probes create and remove."""


@dataclass
class _Context:
    paths: HostPaths
    layout: CgroupLayout | None
    layout_error: str
    native: Any
    native_error: str
    scratch: str = ""
    """A temporary child of the v2 root (its name), where v2 file probes look when no kubepods exists."""


@contextlib.contextmanager
def _scratch_cgroup(root: str) -> Iterator[tuple[str, str]]:
    """Yields (absolute path or "", why not) of a new child cgroup of ``root``, removed on exit."""
    path = os.path.join(root, f"{PROBE_DIR_PREFIX}{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.mkdir(path)
    except OSError as exc:
        yield "", f"mkdir failed: {_errname(exc.errno)}"
        return
    try:
        yield path, ""
    finally:
        with contextlib.suppress(OSError):  # already gone, or held by a task that raced in: nothing to do
            os.rmdir(path)


class _NotUsable(Exception):
    """Raised inside a probe to end it with an unsupported result."""


def _errname(err: int | None) -> str:
    # errorcode maps 95 to its alias ENOTSUP; the kernel (and perf's docs) say EOPNOTSUPP.
    if err == errno.EOPNOTSUPP:
        return "EOPNOTSUPP"
    return errno.errorcode.get(err or 0, str(err))


def _describe(exc: BaseException) -> str:
    err = getattr(exc, "errno", None)
    # str(OSError) prefixes "[Errno N]"; the message (strerror) and the errno name read better.
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if exc.filename and str(exc.filename) not in text:
            text = f"{exc.filename}: {text}"
    else:
        text = str(exc)
    if err and _errname(err) not in text:
        text = f"{text} ({_errname(err)})"
    return text


def _need_layout(ctx: _Context) -> CgroupLayout:
    if ctx.layout is None:
        raise _NotUsable(ctx.layout_error)
    return ctx.layout


def _need_native(ctx: _Context, flag: str | None = None, what: str = "") -> Any:
    if ctx.native is None:
        raise _NotUsable(f"C core unavailable: {ctx.native_error}")
    if flag is not None and not getattr(ctx.native, flag, False):
        raise _NotUsable(f"C core built without {what} ({flag} is false)")
    return ctx.native


# ---------------------------------------------------------------------------------------- cgroups


def _probe_cgroup_mode(ctx: _Context) -> tuple[bool, str]:
    return True, _need_layout(ctx).describe()


def _probe_cgroup_driver(ctx: _Context) -> tuple[bool, str]:
    guess = detect_driver(_need_layout(ctx))
    return True, f"{guess.driver.value}: {guess.reason}"


def _probe_cgroup_writable(ctx: _Context) -> tuple[bool, str]:
    layout = _need_layout(ctx)
    # The hierarchies koordlet writes: the v1 controllers' mounts, or the one v2 tree (hybrid's unified mount only
    # holds PSI and perf, which koordlet reads).
    mounts = sorted(set(layout.v1_mounts.values())) if layout.mode is not CgroupMode.V2 else [layout.unified_root or ""]
    read_only = [m for m in mounts if os.statvfs(m).f_flag & os.ST_RDONLY]
    if read_only:
        return False, (f"mounted read-only: {', '.join(read_only)}; no QoS decision or runtime hook can reach the "
                       "kernel (mount the host's cgroup tree read-write)")
    return True, f"{len(mounts)} cgroup mount(s) under {ctx.paths.cgroup_root} writable"


def _probe_v2_controllers(ctx: _Context) -> tuple[bool, str]:
    layout = _need_layout(ctx)
    if layout.unified_root is None:
        return False, f"no cgroup v2 hierarchy under {ctx.paths.cgroup_root} (v1 only)"
    listed = layout.v2_controllers()
    missing = [c for c in V2_CONTROLLERS if c not in listed]
    where = f"{layout.unified_root}/cgroup.controllers"
    if not missing:
        return True, f"{', '.join(V2_CONTROLLERS)} listed in {where}"
    why = " (they are bound to the v1 hierarchies in hybrid mode)" if layout.mode is CgroupMode.HYBRID else ""
    return False, f"{where} lists {' '.join(sorted(listed)) or 'nothing'}; missing {', '.join(missing)}{why}"


# ---------------------------------------------------------------------------------------- PSI


def _probe_psi(ctx: _Context) -> tuple[bool, str]:
    native = _need_native(ctx)
    for resource in ("cpu", "memory", "io"):
        path = ctx.paths.proc("pressure", resource)
        try:
            native.read_psi(path)
        except (OSError, KoordletError) as exc:
            return False, f"system PSI unreadable: {_describe(exc)}"
    layout = _need_layout(ctx)
    where = ""
    for pressure in (CPU_PRESSURE, MEMORY_PRESSURE, IO_PRESSURE):
        support = pressure.supported(layout)
        if not support:
            return False, f"{ctx.paths.proc('pressure')} readable, but no per-cgroup PSI: {support.reason}"
        try:
            native.read_psi(pressure.path(layout))
        except (OSError, KoordletError) as exc:
            return False, f"per-cgroup PSI unreadable: {_describe(exc)}"
        where = pressure.directory(layout)
    return True, f"{ctx.paths.proc('pressure')}/{{cpu,memory,io}} and {{cpu,memory,io}}.pressure in {where} readable"


def _probe_psi_trigger(ctx: _Context) -> tuple[bool, str]:
    native = _need_native(ctx, "HAS_PSI_TRIGGER", "PSI triggers")
    path = ctx.paths.proc("pressure", "memory")
    try:
        with native.PsiTrigger(path, PSI_PROBE_TRIGGER):
            pass
    except (OSError, KoordletError) as exc:
        return False, f"PSI trigger {PSI_PROBE_TRIGGER!r} refused: {_describe(exc)}"
    return True, f"trigger {PSI_PROBE_TRIGGER!r} registered on {path}"


# ---------------------------------------------------------------------------------------- perf


def _count(group: Any) -> None:
    with group:
        group.enable()
        group.read()


def _refused(group: Any) -> str:
    return ", ".join(f"{event.name}: {_errname(err)}" for event, err in group.event_errors.items())


def _probe_perf_software(ctx: _Context) -> tuple[bool, str]:
    native = _need_native(ctx, "HAS_PERF", "perf_event support")
    events = [native.PerfEvent.TASK_CLOCK, native.PerfEvent.CONTEXT_SWITCHES]
    pid = os.getpid()
    try:
        group = native.PerfGroup.open_pid(pid, events)
    except (OSError, KoordletError) as exc:
        return False, f"software events refused: {_describe(exc)}"
    refused = _refused(group)
    _count(group)
    if refused:
        return False, f"perf_event_open on pid {pid} refused {refused}"
    return True, f"task-clock and context-switches count on pid {pid}"


def _hardware_hint(err: int | None) -> str:
    if err in (errno.ENOENT, errno.EOPNOTSUPP):
        return "no hardware PMU exposed, e.g. a VM without vPMU"
    if err in (errno.EACCES, errno.EPERM):
        return "refused by kernel.perf_event_paranoid or a missing CAP_PERFMON"
    return "hardware counters unavailable"


def _probe_perf_hardware(ctx: _Context) -> tuple[bool, str]:
    native = _need_native(ctx, "HAS_PERF", "perf_event support")
    events = [native.PerfEvent.CPU_CYCLES, native.PerfEvent.INSTRUCTIONS]
    call = "perf_event_open(PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS)"
    try:
        group = native.PerfGroup.open_pid(os.getpid(), events)
    except (OSError, KoordletError) as exc:
        err = getattr(exc, "errno", None)
        return False, f"{call}: {_errname(err)} ({_hardware_hint(err)})"
    errors = dict(group.event_errors)
    refused = _refused(group)
    _count(group)
    if errors:
        first = next(iter(errors.values()))
        return False, f"{call} refused {refused} ({_hardware_hint(first)}); CPI needs both"
    return True, "cycles and instructions count on this task (CPI collection possible)"


def _probe_perf_cgroup(ctx: _Context) -> tuple[bool, str]:
    native = _need_native(ctx, "HAS_PERF", "perf_event support")
    layout = _need_layout(ctx)
    if layout.unified_root is None:
        return False, (
            f"no cgroup v2 hierarchy under {ctx.paths.cgroup_root}: per-cgroup perf needs a v2 directory "
            "(a v1 cpu directory gives ENOENT)"
        )
    online = ctx.paths.sys("devices/system/cpu/online")
    try:
        cpus = native.read_cpulist(online)
    except (OSError, KoordletError) as exc:
        return False, f"cannot list online CPUs: {_describe(exc)}"
    with _scratch_cgroup(layout.unified_root) as (scratch, why_not):
        # A read-only cgroup mount (an unprivileged container) still lets the root be counted.
        target = scratch or layout.unified_root
        note = "a temporary child cgroup of " if scratch else f"the root ({why_not}) of "
        try:
            group = native.PerfGroup.open_cgroup(target, cpus, [native.PerfEvent.TASK_CLOCK])
            _count(group)
        except (OSError, KoordletError) as exc:
            return False, f"per-cgroup perf on {target}: {_describe(exc)}"
    return True, f"task-clock counted per cgroup on {note}{layout.unified_root} over CPUs {format_cpulist(cpus)}"


# ---------------------------------------------------------------------------------------- others


def _probe_core_sched(ctx: _Context) -> tuple[bool, str]:
    native = _need_native(ctx, "HAS_SCHED_CORE", "prctl(PR_SCHED_CORE) support")
    try:
        cookie = native.sched_core_get(0)
    except (OSError, KoordletError) as exc:
        err = getattr(exc, "errno", None)
        if err == errno.EINVAL:
            why = "kernel built without CONFIG_SCHED_CORE"
        elif err == errno.ENODEV:
            why = "no SMT siblings, so the kernel keeps core scheduling off"
        else:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return False, f"prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET): {_errname(err)} ({why})"
    return True, f"prctl(PR_SCHED_CORE) available (this task's cookie: {cookie:#x})"


def _probe_resctrl(ctx: _Context) -> tuple[bool, str]:
    filesystems = ctx.paths.proc("filesystems")
    try:
        with open(filesystems, encoding="ascii", errors="replace") as f:
            known = {line.split()[-1] for line in f if line.strip()}
    except OSError as exc:
        return False, f"cannot read {filesystems}: {_describe(exc)}"
    root = ctx.paths.resctrl_root
    if "resctrl" not in known:
        return False, (
            f"resctrl not in {filesystems} (kernel without CONFIG_X86_CPU_RESCTRL, or a CPU without RDT/MPAM)"
        )
    schemata = os.path.join(root, "schemata")
    try:
        with open(schemata, encoding="ascii", errors="replace") as f:
            resources = [line.split(":", 1)[0].strip() for line in f if ":" in line]
    except FileNotFoundError:
        return False, f"resctrl known to the kernel but not mounted at {root} (mount -t resctrl resctrl {root})"
    except OSError as exc:
        return False, f"cannot read {schemata}: {_describe(exc)}"
    return True, f"mounted at {root}; schemata resources: {', '.join(resources) or 'none'}"


def _probe_file(resource: CgroupFile, ctx: _Context) -> tuple[bool, str]:
    layout = _need_layout(ctx)
    # Koordinator checks optional files in the kubepods cgroup: some kernels create them only below
    # the root.  Without kubepods (a bare host) the hierarchy root is the best evidence there is.
    rel_dir = kubepods_dir(detect_driver(layout).driver)
    try:
        if not os.path.isdir(resource.directory(layout, rel_dir)):
            rel_dir = ""
    except (OSError, KoordletError):
        rel_dir = ""
    support = resource.supported(layout, rel_dir)
    spec = resource.v2 if resource.version(layout) == 2 else None
    if not support and not rel_dir and ctx.scratch and spec is not None and spec.placement is Placement.NON_ROOT:
        # A v2 root without kubepods may have no child that shows the controller's files (a fresh node, a
        # container): the kernel creates them in any new child whose parent enables the controller.
        support = resource.supported(layout, ctx.scratch)
        return support.supported, f"{support.reason} (a temporary child cgroup, removed)"
    return support.supported, support.reason


# ---------------------------------------------------------------------------------------- runner

_FEATURE_PROBES: tuple[tuple[str, Callable[[_Context], tuple[bool, str]]], ...] = (
    ("cgroup_mode", _probe_cgroup_mode),
    ("cgroup_driver", _probe_cgroup_driver),
    ("cgroup_writable", _probe_cgroup_writable),
    ("cgroup_v2_controllers", _probe_v2_controllers),
    ("psi", _probe_psi),
    ("psi_trigger", _probe_psi_trigger),
    ("perf_software", _probe_perf_software),
    ("perf_cgroup", _probe_perf_cgroup),
    ("perf_hardware", _probe_perf_hardware),
    ("core_sched", _probe_core_sched),
    ("resctrl", _probe_resctrl),
)

FILE_PROBES: tuple[CgroupFile, ...] = tuple(f for f in REGISTRY.values() if f.optional)
"""Kernel-dependent cgroup files, probed under their registry key (``cpu_cfs_burst``, ``cpu_idle``...)."""

REQUIRED_PROBES = frozenset({"cgroup_writable"})
"""Probes whose failure means koordlet cannot do its job on this host: logged as errors, not as capabilities."""

PROBE_NAMES: tuple[str, ...] = tuple(name for name, _ in _FEATURE_PROBES) + tuple(f.key for f in FILE_PROBES)
"""Every probe name, in the order :func:`probe_all` returns them."""


def _run(name: str, probe: Callable[[_Context], tuple[bool, str]], ctx: _Context) -> ProbeResult:
    try:
        supported, reason = probe(ctx)
    except _NotUsable as exc:
        return ProbeResult(name, False, str(exc))
    except (OSError, KoordletError) as exc:
        return ProbeResult(name, False, _describe(exc))
    except Exception as exc:  # doctor must list every probe: a bug is reported as such, not raised
        return ProbeResult(name, False, f"probe failed: {type(exc).__name__}: {exc}")
    return ProbeResult(name, supported, reason)


def probe_all(paths: HostPaths, native: Any | None, *, native_error: str = "not loaded",
              layout: CgroupLayout | None = None) -> list[ProbeResult]:
    """Runs every probe, in :data:`PROBE_NAMES` order.

    ``native`` is :mod:`koordlet.native` or a stand-in (``HAS_*`` flags, ``read_psi``, ``read_cpulist``,
    ``PsiTrigger``, ``PerfEvent``, ``PerfGroup``, ``sched_core_get``); None when the C core cannot be loaded,
    ``native_error`` saying why (the probes that need it report that).  ``layout`` skips detection.
    The per-cgroup perf probe creates ``<unified>/koordlet-probe-<pid>-<random>`` and removes it; on a v2
    host the file probes use one such child when no kubepods cgroup exists.
    """
    layout_error = ""
    if layout is None:
        try:
            layout = detect_layout(paths)
        except (OSError, KoordletError) as exc:
            layout_error = _describe(exc)
    ctx = _Context(paths, layout, layout_error, native, "" if native is not None else native_error)
    results = [_run(name, probe, ctx) for name, probe in _FEATURE_PROBES]
    with contextlib.ExitStack() as stack:
        if layout is not None and layout.mode is CgroupMode.V2 and layout.unified_root is not None:
            scratch, _ = stack.enter_context(_scratch_cgroup(layout.unified_root))
            ctx.scratch = os.path.basename(scratch)
        for resource in FILE_PROBES:
            results.append(_run(resource.key, partial(_probe_file, resource), ctx))
    return results
