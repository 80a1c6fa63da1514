"""Replacing a file atomically: readers (an agent watching the directory, koordlet after a crash) see the
old content or the new one, never half a file.

The content goes to a temporary file in the same directory (a rename is atomic only within one file
system), is fsynced, renamed over the target and, where asked, the directory is fsynced too: the rename
is durable only once the directory entry is on disk.  The temporary name is unpredictable and the file is
created exclusively and never through a symlink (``O_EXCL | O_NOFOLLOW``), so whoever can write the
directory (a hostPath shared with another agent) cannot plant a link that makes koordlet, as root,
truncate a file elsewhere; a name that exists already (planted or left over) is skipped for a fresh one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable

_TEMP_ATTEMPTS = 8
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def random_suffix() -> str:
    """The random part of a temporary name."""
    return secrets.token_hex(8)


def write(
    path: str | os.PathLike[str],
    data: bytes,
    *,
    mode: int = 0o644,
    sync_dir: bool = True,
    on_dir_sync_error: Callable[[OSError], None] | None = None,
    suffix: Callable[[], str] | None = None,
) -> None:
    """Replaces ``path`` with ``data``, file mode ``mode`` whatever the umask.

    ``sync_dir``: fsync the directory after the rename; a failure there is raised, or handed to
    ``on_dir_sync_error`` when given (the new content is in place either way).  ``suffix`` makes the random
    part of the temporary name (default :func:`random_suffix`).  Raises ``OSError``; the temporary file
    never outlives a failure."""
    target = os.fspath(path)
    directory = os.path.dirname(target) or "."
    fd, tmp = _create_temp(directory, os.path.basename(target), suffix or random_suffix)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if not sync_dir:
        return
    try:
        fsync_directory(directory)
    except OSError as exc:
        if on_dir_sync_error is None:
            raise
        on_dir_sync_error(exc)


def fsync_directory(directory: str | os.PathLike[str]) -> None:
    """Flushes ``directory``'s entries (a rename in it) to disk."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temp(directory: str, name: str, suffix: Callable[[], str]) -> tuple[int, str]:
    for _ in range(_TEMP_ATTEMPTS):
        tmp = os.path.join(directory, f".{name}.koordlet-{suffix()}.tmp")
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o600), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"no free temporary name for {name} after {_TEMP_ATTEMPTS} attempts", directory)
