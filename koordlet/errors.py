"""The one error hierarchy of the project.

Every error raised on purpose derives from :class:`KoordletError` and also from the builtin that
callers would naturally catch (``ValueError``, ``FileNotFoundError``...), so code that does not know
about koordlet still handles it sensibly.  ``OSError`` is translated at the boundary by
:func:`from_errno`: a vanished cgroup is an expected race (``CgroupGone``), a permission problem is
not, and a kernel that lacks a file or feature is ``Unsupported`` and must not be retried every tick.
"""

from __future__ import annotations

import errno as _errno
import os


class KoordletError(Exception):
    """Root of every error koordlet raises on purpose."""


class ConfigError(KoordletError, ValueError):
    """A configuration value is invalid; the message names the field path and the bad value."""


class ParseError(KoordletError, ValueError):
    """A file or message did not hold what its format promises."""

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class NativeError(KoordletError, OSError):
    """An OS call made by the C core failed for a reason with no more specific class."""


class CgroupGone(NativeError, FileNotFoundError):
    """The cgroup (or file) disappeared: an expected race with the container runtime."""


class PermissionDenied(NativeError, PermissionError):
    """The kernel refused access (missing capability, read-only mount...)."""


class Unsupported(NativeError):
    """The kernel, the hierarchy or the build lacks this feature; do not retry it every tick."""


class NativeBuildMismatch(KoordletError, ImportError):
    """The compiled C core does not match the Python wrapper (stale build)."""


GONE_ERRNOS = frozenset({_errno.ENOENT, _errno.ENODEV, _errno.ESRCH})
"""The object vanished: a removed cgroup or file (a kept-open cgroup file whose cgroup was removed
answers ENODEV on read), an exited task (ESRCH).  Writers tell a missing *file* in an existing
directory (the kernel lacks it) from a vanished directory with :func:`missing_file`."""
DENIED_ERRNOS = frozenset({_errno.EACCES, _errno.EPERM, _errno.EROFS})
"""Missing capability, read-only mount: a real failure, retried every round."""
UNSUPPORTED_ERRNOS = frozenset({_errno.EOPNOTSUPP, _errno.ENOSYS, _errno.ENOTTY})
"""The kernel lacks the operation whatever the value: not retried before a backoff ends."""
REFUSED_VALUE_ERRNO = _errno.EINVAL
"""The kernel refuses this value here (a cgroup or resctrl write): the value, not any value, is backed off."""
# The C core's per-entry parse errors (csrc/kcore.h).
_PARSE = {
    _errno.EBADMSG: "malformed content",
    _errno.ERANGE: "value out of range",
    _errno.ENODATA: "no value in file",
    _errno.EFBIG: "file larger than the reader's limit",
}


def from_errno(err: int, what: str) -> NativeError | ParseError:
    """Build the right exception for an ``errno`` value (either sign) about ``what`` (a path or call)."""
    err = abs(err)
    if err in _PARSE:
        return ParseError(f"{what}: {_PARSE[err]} ({_errno.errorcode[err]})", err)
    message = f"{what}: {os.strerror(err)}"
    if err in GONE_ERRNOS:
        cls: type[NativeError] = CgroupGone
    elif err in DENIED_ERRNOS:
        cls = PermissionDenied
    elif err in UNSUPPORTED_ERRNOS:
        cls = Unsupported
    else:
        cls = NativeError
    return cls(err, message)


def missing_file(err: int, path: str) -> bool:
    """ENOENT on ``path`` while its directory exists: the kernel does not provide this file (as opposed
    to the cgroup or group that held it having been removed, an expected race)."""
    return abs(err) == _errno.ENOENT and os.path.isdir(os.path.dirname(path))
