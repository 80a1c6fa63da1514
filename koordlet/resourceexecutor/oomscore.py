"""The single writer of ``/proc/<pid>/oom_score_adj`` (Koordinator's ``oomscoreadj`` reconciler).

New containers get the value in their creation request; this covers processes already running (a node
without NRI or the runtime proxy, an annotation changed later).  Each process's value is read first and
written only when it differs, so a converged container costs one small read per process and round.

Outcomes per process: ESRCH/ENOENT (an errno of :data:`koordlet.errors.GONE_ERRNOS`) is a process that
exited (gone, not an error); anything else fails with the reason, e.g. EACCES when lowering the value
without CAP_SYS_RESOURCE (the kernel lets only a privileged writer go below the current minimum).
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterable

from koordlet.errors import GONE_ERRNOS, CgroupGone, KoordletError
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.update import Outcome, Result

log = logging.getLogger(__name__)

AUDIT_RESOURCE = "oom_score_adj"
MIN_VALUE = -1000
MAX_VALUE = 1000


class OomScoreWriter:
    def __init__(self, proc_root: str, audit: Auditor | None) -> None:
        self._proc_root = proc_root
        self._audit = audit

    def apply(self, pids: Iterable[int], value: int, owner: str) -> Result:
        """Gives every process of ``pids`` ``value``: ``applied`` lists the processes written, ``already``
        those that had it, ``gone`` those that exited and ``failed`` (pid, ``pid <n>: <reason>``) the others."""
        if not MIN_VALUE <= value <= MAX_VALUE:
            raise ValueError(f"oom_score_adj {value} outside [{MIN_VALUE}, {MAX_VALUE}]")
        written: list[int] = []
        unchanged: list[int] = []
        gone: list[int] = []
        failed: list[tuple[int, str]] = []
        new = str(value)
        for pid in pids:
            path = os.path.join(self._proc_root, str(pid), "oom_score_adj")
            try:
                with open(path, "rb") as f:
                    old = f.read().decode("ascii", "replace").strip()
                if old == new:
                    unchanged.append(pid)
                    continue
                with open(path, "wb") as f:
                    f.write(new.encode())
            except OSError as exc:
                if exc.errno in GONE_ERRNOS:
                    gone.append(pid)
                    continue
                reason = f"pid {pid}: {os.strerror(exc.errno or errno.EIO)}"
                failed.append((pid, reason))
                self._record(path, None, new, owner, Outcome.FAILED, reason)
                continue
            written.append(pid)
            self._record(path, old, new, owner, Outcome.WRITTEN, None)
        outcome = Outcome.FAILED if failed else Outcome.WRITTEN if written else Outcome.SKIPPED_UNCHANGED
        return Result(None, outcome, text=new, error="; ".join(m for _, m in failed) or None, applied=tuple(written),
                      already=tuple(unchanged), gone=tuple(gone), failed=tuple(failed))

    def _record(self, path: str, old: str | None, new: str, owner: str, outcome: Outcome, error: str | None) -> None:
        if self._audit is not None:
            self._audit.record(AuditEntry(path, AUDIT_RESOURCE, old, new, owner, outcome.value, error))


def for_cgroups(read_procs: Callable[[str], str], writer: OomScoreWriter) -> Callable[[str, int, str], list[str]]:
    """``(cgroup rel_dir, value, owner) -> problems``: every process listed in the cgroup's ``cgroup.procs``
    (``read_procs`` returns its text) gets ``value``.  A cgroup that vanished is no problem."""

    def apply(rel_dir: str, value: int, owner: str) -> list[str]:
        try:
            text = read_procs(rel_dir)
        except CgroupGone:
            return []
        except KoordletError as exc:
            return [f"{rel_dir}: cgroup.procs: {exc}"]
        pids = [int(word) for word in text.split() if word.isdigit()]
        return [message for _, message in writer.apply(pids, value, owner).failed]

    return apply
