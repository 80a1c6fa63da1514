"""Taking over a unix socket path a server binds: what a previous run left behind may go, anything else not."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat

from koordlet.errors import KoordletError


def remove_stale_socket(path: str, what: str) -> None:
    """Removes the socket at ``path`` when nobody listens on it (a crashed predecessor's); raises KoordletError
    naming ``what`` when the path holds something other than a socket or a live server answers on it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise KoordletError(f"{what} {path}: exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError as exc:
        if exc.errno not in (errno.ECONNREFUSED, errno.ENOENT):
            raise KoordletError(f"{what} {path}: cannot tell whether it is in use: {exc}") from exc
    else:
        raise KoordletError(f"{what} {path}: another process serves it")
    finally:
        probe.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
