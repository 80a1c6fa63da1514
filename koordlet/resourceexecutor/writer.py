"""The only code that opens cgroup files for writing, behind a two-method protocol tests can replace."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Protocol

# The largest cgroup file the executor reads back (a cpuset list of 64 Ki ids fits easily).
_READ_LIMIT = 64 * 1024


class CgroupWriter(Protocol):
    """Reads and writes whole cgroup files; errors are raised as ``OSError`` with the kernel's errno."""

    def read(self, path: str) -> str:
        """The file's content."""

    def write(self, path: str, text: str) -> None:
        """Writes ``text`` to the file in one ``write(2)``."""


class FileWriter:
    """Plain ``os.open`` / ``os.write``, no shell and no buffering layer.

    cgroupfs handles one ``write(2)`` as one value, so the whole text goes in one call (a buffered file
    object could split a long cpuset list).  ``O_TRUNC`` is a no-op on cgroupfs but makes the fake
    trees of the unit tests (regular files) behave the same; there is no ``O_CREAT``, so a file the
    kernel does not provide fails with ENOENT instead of being created.
    """

    def read(self, path: str) -> str:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, _READ_LIMIT).decode("ascii", errors="replace")
        finally:
            os.close(fd)

    def write(self, path: str, text: str) -> None:
        data = text.encode("ascii")
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):
            # cgroupfs never writes part of a value; a short count means the value was not applied.
            raise OSError(errno.EIO, f"short write ({written} of {len(data)} bytes)", path)


def read_quietly(read: Callable[[str], str], path: str) -> str | None:
    """The stripped content of ``path``, or None when it cannot be read: for the old value an audit entry
    shows and for the hints next to an error, where a failed read must not hide the write's own outcome."""
    try:
        return read(path).strip()
    except OSError:
        return None
