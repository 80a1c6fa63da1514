"""The values plugins hand to the executor (:class:`CgroupUpdate`) and what comes back (:class:`Result`).

Plugins compute values; they never open cgroup files (CONVENTIONS #14).  A :class:`CgroupUpdate` names
the resource by its :data:`koordlet.system.REGISTRY` key, so the executor can resolve the file for the
host's cgroup version, validate the value with the descriptor and translate it for v2.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from koordlet.errors import ConfigError
from koordlet.system.resources import REGISTRY


class Outcome(enum.Enum):
    """What happened to one update."""

    WRITTEN = "written"
    SKIPPED_UNCHANGED = "skipped_unchanged"
    """The same text was written to the same file less than ``force_update_seconds`` ago."""
    UNSUPPORTED = "unsupported"
    """The kernel lacks the file or refused the value with EINVAL; not retried before the backoff ends
    unless the value changes."""
    GONE = "gone"
    """The cgroup disappeared (ENOENT on its directory, ENODEV, ESRCH): an expected race."""
    INVALID = "invalid"
    """Refused by the descriptor's validator before anything was written."""
    FAILED = "failed"
    """Any other error (EACCES/EPERM, EBUSY, ENOSPC, EIO...)."""


@dataclass(frozen=True)
class CgroupUpdate:
    """One desired cgroup value: ``value`` (canonical, cgroup v1 semantics: shares, ``-1`` for
    unlimited) for resource ``resource`` in cgroup ``rel_dir`` (relative to the hierarchy root).

    ``owner`` says who wants it and why (``"cpusuppress: be cpuset"``); it goes to the audit log."""

    resource: str
    """A key of :data:`koordlet.system.REGISTRY` (``cpu_shares``, ``cpuset_cpus``...)."""
    rel_dir: str
    value: object
    owner: str

    def __post_init__(self) -> None:
        # An unknown key is a plugin bug, not bad runtime input: fail where the update is built.
        if self.resource not in REGISTRY:
            raise ConfigError(f"unknown cgroup resource {self.resource!r} (known: {', '.join(sorted(REGISTRY))})")
        if not self.owner:
            raise ConfigError(f"a cgroup update of {self.resource} in {self.rel_dir!r} needs an owner for the audit")


@dataclass(frozen=True)
class Result:
    """The outcome of one :class:`CgroupUpdate`; ``path`` and ``text`` are None when the update was
    rejected before a file was resolved or a value rendered."""

    update: CgroupUpdate
    outcome: Outcome
    path: str | None = None
    text: str | None = None
    """The text written (or that would have been written) to ``path``."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        """The file holds the desired value as far as the executor knows."""
        return self.outcome in (Outcome.WRITTEN, Outcome.SKIPPED_UNCHANGED)
