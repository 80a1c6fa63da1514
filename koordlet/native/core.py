"""Loading the compiled core: the one place that imports ``koordlet._native``.

It refuses a build whose ABI stamp differs from the one these wrappers were written for, and holds
what every wrapper shares: the capability flags, the size limits, the parse kinds, the argument
checks and the base of the wrappers that own a file descriptor.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from typing import Any, Self

from koordlet.errors import NativeBuildMismatch

try:
    from koordlet._native import ffi as ffi  # re-exported to the other modules of this package
    from koordlet._native import lib as lib
except ImportError as exc:  # pragma: no cover - only without a build
    raise NativeBuildMismatch(
        f"koordlet's C core is not built ({exc}); install the package (`pip install .`, "
        "or `pip install -e .` in a checkout)"
    ) from exc

ABI_VERSION = 3
if lib.kc_abi_version() != ABI_VERSION:
    raise NativeBuildMismatch(
        f"koordlet._native has ABI {lib.kc_abi_version()}, this wrapper expects {ABI_VERSION}: rebuild it"
    )

_CAPS = lib.kc_capabilities()
HAS_PERF = bool(_CAPS & lib.KC_CAP_PERF)
HAS_SCHED_CORE = bool(_CAPS & lib.KC_CAP_SCHED_CORE)
HAS_PSI_TRIGGER = bool(_CAPS & lib.KC_CAP_PSI_TRIGGER)
BUILD_INFO: str = ffi.string(lib.kc_build_info()).decode()

MAX_KEYS = lib.KC_MAX_VALUES
MAX_CPUS = lib.KC_MAX_CPUS
MAX_FILE_BYTES = lib.KC_MAX_FILE


class Kind(enum.IntEnum):
    """How the C core parses a file (``KC_KIND_*``)."""

    INT = lib.KC_KIND_INT
    KV = lib.KC_KIND_KV
    CPU_MAX = lib.KC_KIND_CPU_MAX
    CPULIST = lib.KC_KIND_CPULIST
    PSI = lib.KC_KIND_PSI
    MEMINFO = lib.KC_KIND_MEMINFO
    RAW = lib.KC_KIND_RAW
    PROC_STAT = lib.KC_KIND_PROC_STAT


def check_path(path: str | os.PathLike[str]) -> bytes:
    """The path as the bytes C takes; an empty path or one with a NUL byte is refused here."""
    raw = os.fsencode(path)
    if not raw or b"\0" in raw:
        raise ValueError(f"invalid path {path!r}")
    return raw


def keys_spec(kind: Kind, keys: Sequence[str] | None) -> Any:
    """The C core takes selected keys as one space-separated string (NULL for kinds without keys)."""
    if kind not in (Kind.KV, Kind.MEMINFO):
        if keys:
            raise ValueError(f"{kind.name} files take no keys")
        return ffi.NULL
    if not keys:
        raise ValueError(f"{kind.name} reads need at least one key")
    if len(keys) > MAX_KEYS:
        raise ValueError(f"at most {MAX_KEYS} keys per file, got {len(keys)}")
    for key in keys:
        if not key or len(key) >= 64 or any(c in key for c in " \t\n\0:"):
            raise ValueError(f"invalid key {key!r}")
    return " ".join(keys).encode()


class FdOwner:
    """A file descriptor the C core opened for this object: closed by :meth:`close`, on leaving a
    ``with`` block, or when the object is collected.  ``fd`` is -1 once closed (or when opening failed
    before it was set), so closing twice is harmless."""

    fd: int = -1

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.fd >= 0:
            lib.kc_close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()
