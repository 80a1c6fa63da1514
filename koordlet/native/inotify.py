"""inotify(7): watching cgroup directories for pods and containers coming and going."""

from __future__ import annotations

import errno
import os
import struct
from dataclasses import dataclass

from koordlet.errors import from_errno
from koordlet.native.core import FdOwner, check_path, ffi, lib


@dataclass(frozen=True, slots=True)
class InotifyEvent:
    """One inotify(7) event: the watch it came from, its mask bits and the entry name (may be empty)."""

    wd: int
    mask: int
    name: str


IN_CREATE = lib.KC_IN_CREATE
IN_DELETE = lib.KC_IN_DELETE
IN_MOVED_FROM = lib.KC_IN_MOVED_FROM
IN_MOVED_TO = lib.KC_IN_MOVED_TO
IN_DELETE_SELF = lib.KC_IN_DELETE_SELF
IN_IGNORED = lib.KC_IN_IGNORED
IN_Q_OVERFLOW = lib.KC_IN_Q_OVERFLOW
IN_ISDIR = lib.KC_IN_ISDIR

_INOTIFY_HEADER = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)


def parse_inotify_events(data: bytes) -> list[InotifyEvent]:
    """Decodes a buffer of struct inotify_event records; a truncated record ends the list."""
    events = []
    offset = 0
    while offset + _INOTIFY_HEADER.size <= len(data):
        wd, mask, _cookie, length = _INOTIFY_HEADER.unpack_from(data, offset)
        offset += _INOTIFY_HEADER.size
        if offset + length > len(data):
            break
        name = data[offset:offset + length].split(b"\0", 1)[0]
        offset += length
        events.append(InotifyEvent(wd, mask, os.fsdecode(name)))
    return events


class Inotify(FdOwner):
    """A non-blocking inotify instance; poll :meth:`fileno` (select/selectors) and call :meth:`read`."""

    _BUFFER = 64 * 1024

    def __init__(self) -> None:
        fd = lib.kc_inotify_open()
        if fd < 0:
            raise from_errno(fd, "inotify_init1")
        self.fd = int(fd)
        self._buf = ffi.new("char[]", self._BUFFER)

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        """Watches a directory; returns the watch descriptor (raises CgroupGone when it is missing)."""
        raw = check_path(path)
        wd = lib.kc_inotify_add(self.fd, raw, mask)
        if wd < 0:
            raise from_errno(wd, f"inotify watch on {os.fsdecode(raw)}")
        return int(wd)

    def remove_watch(self, wd: int) -> None:
        rc = lib.kc_inotify_remove(self.fd, wd)
        if rc < 0 and -rc != errno.EINVAL:  # EINVAL: the kernel already dropped it (directory removed)
            raise from_errno(rc, f"inotify_rm_watch {wd}")

    def read(self) -> list[InotifyEvent]:
        """Events pending now (empty when none): never blocks."""
        n = lib.kc_inotify_read(self.fd, self._buf, self._BUFFER)
        if n < 0:
            raise from_errno(n, "inotify read")
        return parse_inotify_events(ffi.buffer(self._buf, n)[:]) if n else []
