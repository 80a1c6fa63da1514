"""PSI triggers (Documentation/accounting/psi.rst) and polling them."""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass

from koordlet.errors import ParseError, from_errno
from koordlet.native.core import FdOwner, check_path, ffi, lib


class PsiTrigger(FdOwner):
    """A registered PSI trigger (Documentation/accounting/psi.rst): ``"some 150000 2000000"`` fires
    when tasks stall 150 ms within any 2 s window.  Without CAP_SYS_RESOURCE the window must be a
    multiple of 2 s."""

    def __init__(self, path: str | os.PathLike[str], trigger: str) -> None:
        raw = check_path(path)
        parts = trigger.split()
        if len(parts) != 3 or parts[0] not in ("some", "full") or not all(p.isdigit() for p in parts[1:]):
            raise ParseError(f"PSI trigger must be '<some|full> <stall_us> <window_us>', got {trigger!r}")
        fd = lib.kc_psi_trigger_open(raw, " ".join(parts).encode())
        if fd < 0:
            raise from_errno(fd, f"PSI trigger {trigger!r} on {os.fsdecode(raw)}")
        self.path = os.fsdecode(raw)
        self.trigger = " ".join(parts)
        self.fd = int(fd)


@dataclass(frozen=True, slots=True)
class PsiPoll:
    """Triggers that fired, and triggers whose file broke (cgroup removed: POLLERR)."""

    fired: list[PsiTrigger]
    broken: list[PsiTrigger]


_POLLPRI, _POLLERR, _POLLHUP, _POLLNVAL = 0x2, 0x8, 0x10, 0x20


def psi_poll(triggers: Sequence[PsiTrigger], timeout_ms: int) -> PsiPoll:
    """Waits up to ``timeout_ms`` for any trigger (an interrupting signal returns early, empty)."""
    live = [t for t in triggers if t.fd >= 0]
    fds = ffi.new("int[]", [t.fd for t in live]) if live else ffi.NULL
    revents = ffi.new("int16_t[]", max(len(live), 1))
    rc = lib.kc_psi_poll(fds, len(live), timeout_ms, revents)
    if rc == -errno.EINTR:
        return PsiPoll([], [])
    if rc < 0:
        raise from_errno(rc, "poll on PSI triggers")
    broken = [t for i, t in enumerate(live) if revents[i] & (_POLLERR | _POLLHUP | _POLLNVAL)]
    fired = [t for i, t in enumerate(live) if revents[i] & _POLLPRI and t not in broken]
    return PsiPoll(fired, broken)
