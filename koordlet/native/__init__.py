"""Typed wrappers around the C core (``csrc/kcore.h``); the only importer of ``koordlet._native``.

Everything returned here is a plain Python value: cdata never leaves this package.  Errors from the
core come back as ``-errno`` (or a per-entry errno in batch reads) and are turned into the
:mod:`koordlet.errors` classes: a vanished cgroup is :class:`~koordlet.errors.CgroupGone`, malformed
content is :class:`~koordlet.errors.ParseError`, a missing kernel feature is
:class:`~koordlet.errors.Unsupported`.

The modules: :mod:`.core` loads the build and checks its ABI, :mod:`.files` reads and parses single
files, :mod:`.fileset` reads batches, :mod:`.rings` appends columns of samples to the metric cache's rings,
:mod:`.chunks` encodes them for disk,
:mod:`.perf`, :mod:`.schedcore`, :mod:`.psi` and :mod:`.inotify` wrap the kernel interfaces of the same names.
Callers use the names re-exported here.
"""

from koordlet.native.chunks import CHUNK_XOR, PendingChunks, decode_chunk, encode_chunk, encode_pending
from koordlet.native.core import (
    ABI_VERSION,
    BUILD_INFO,
    HAS_PERF,
    HAS_PSI_TRIGGER,
    HAS_SCHED_CORE,
    MAX_CPUS,
    MAX_FILE_BYTES,
    MAX_KEYS,
    Kind,
)
from koordlet.native.files import (
    CpuTimes,
    ProcStat,
    Psi,
    PsiLine,
    parse,
    parse_kv_all_result,
    parse_proc_stat_result,
    parse_result,
    read_cpu_max,
    read_cpulist,
    read_file,
    read_int,
    read_kv,
    read_meminfo,
    read_proc_stat,
    read_psi,
)
from koordlet.native.fileset import (
    BatchResult,
    FileSet,
    Gather,
    RawOpenFiles,
    Slots,
    configure_fd_budget,
    kept_fds,
    raw_open_read_close,
    set_fd_budget,
)
from koordlet.native.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_DELETE_SELF,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Inotify,
    InotifyEvent,
    parse_inotify_events,
)
from koordlet.native.perf import PerfEvent, PerfGroup, PerfReading
from koordlet.native.psi import PsiPoll, PsiTrigger, psi_poll
from koordlet.native.rings import RING_HEADER, RingColumn
from koordlet.native.schedcore import (
    SchedCoreScope,
    sched_core_create,
    sched_core_get,
    sched_core_share_from,
    sched_core_share_to,
)

__all__ = [
    "ABI_VERSION",
    "BUILD_INFO",
    "CHUNK_XOR",
    "HAS_PERF",
    "HAS_PSI_TRIGGER",
    "HAS_SCHED_CORE",
    "IN_CREATE",
    "IN_DELETE",
    "IN_DELETE_SELF",
    "IN_IGNORED",
    "IN_ISDIR",
    "IN_MOVED_FROM",
    "IN_MOVED_TO",
    "IN_Q_OVERFLOW",
    "MAX_CPUS",
    "MAX_FILE_BYTES",
    "MAX_KEYS",
    "RING_HEADER",
    "BatchResult",
    "CpuTimes",
    "FileSet",
    "Gather",
    "Inotify",
    "InotifyEvent",
    "Kind",
    "PendingChunks",
    "PerfEvent",
    "PerfGroup",
    "PerfReading",
    "ProcStat",
    "Psi",
    "PsiLine",
    "PsiPoll",
    "PsiTrigger",
    "RawOpenFiles",
    "RingColumn",
    "SchedCoreScope",
    "Slots",
    "configure_fd_budget",
    "decode_chunk",
    "encode_chunk",
    "encode_pending",
    "kept_fds",
    "parse",
    "parse_inotify_events",
    "parse_kv_all_result",
    "parse_proc_stat_result",
    "parse_result",
    "psi_poll",
    "raw_open_read_close",
    "read_cpu_max",
    "read_cpulist",
    "read_file",
    "read_int",
    "read_kv",
    "read_meminfo",
    "read_proc_stat",
    "read_psi",
    "sched_core_create",
    "sched_core_get",
    "sched_core_share_from",
    "sched_core_share_to",
    "set_fd_budget",
]
