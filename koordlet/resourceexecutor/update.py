"""The values plugins hand to the executors (:class:`CgroupUpdate`) and what comes back (:class:`Result`).

Plugins compute values; they never open cgroup files.  A :class:`CgroupUpdate` names the resource by its
descriptor (:data:`koordlet.system.resources.CPU_CFS_QUOTA`...), so the executor can resolve the file for
the host's cgroup version, validate the value with the descriptor and translate it for v2.

Every executor (cgroup files, resctrl, core-scheduling cookies, ``oom_score_adj``) answers with the same
:class:`Result` and the same :class:`Outcome` values, so callers count, log and report them one way.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from koordlet.errors import ConfigError
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.resources import REGISTRY


class Outcome(enum.Enum):
    """What happened to one request to an executor."""

    WRITTEN = "written"
    SKIPPED_UNCHANGED = "skipped_unchanged"
    """The same text was written to the same target less than ``force_update_seconds`` ago (or, for a
    multi-task request, every task already was where it should be)."""
    DONE = "done"
    """A call that writes no value succeeded (a ``prctl`` reading or moving a core-scheduling cookie)."""
    INTENDED = "intended"
    """Shadow mode: the value would have been written (the file holds another), and was not; audited as such."""
    UNSUPPORTED = "unsupported"
    """The kernel lacks the file or feature, or refused the value with EINVAL; not retried before the
    backoff ends unless the value changes."""
    GONE = "gone"
    """The cgroup, group or task disappeared (ENOENT on its directory, ENODEV, ESRCH): an expected race."""
    INVALID = "invalid"
    """Refused by validation before anything was written."""
    FAILED = "failed"
    """Any other error (EACCES/EPERM, EBUSY, ENOSPC, EIO...)."""


_OK = (Outcome.WRITTEN, Outcome.SKIPPED_UNCHANGED, Outcome.DONE, Outcome.INTENDED)
"""A tuple: ``in`` matches members by identity, where a set would call Enum's ``__hash__`` (Python code)
for every one of the thousands of results of a round."""


@dataclass(frozen=True, init=False, slots=True)
class CgroupUpdate:
    """One desired cgroup value: ``value`` (canonical, cgroup v1 semantics: shares, ``-1`` for
    unlimited) for resource ``resource`` in cgroup ``rel_dir`` (relative to the hierarchy root).

    ``owner`` says who wants it and why (``"cpusuppress: be cpuset"``); it goes to the audit log."""

    resource: CgroupFile
    """A descriptor of :mod:`koordlet.system.resources` (``CPU_CFS_QUOTA``...)."""
    rel_dir: str
    value: object
    owner: str

    def __init__(self, resource: CgroupFile, rel_dir: str, value: object, owner: str) -> None:
        # An unknown resource is a plugin bug, not bad runtime input: fail where the update is built.  A
        # registry key (a str) is refused too: the descriptor is what names a resource.
        if not isinstance(resource, CgroupFile) or REGISTRY.get(resource.key) is not resource:
            raise ConfigError(f"unknown cgroup resource {getattr(resource, 'key', resource)!r}: not a descriptor "
                              "of koordlet.system.resources")
        if not owner:
            raise ConfigError(f"a cgroup update of {resource.key} in {rel_dir!r} needs an owner for the audit")
        # Frozen: the fields are set the way the dataclass's own __init__ would.
        setattr_ = object.__setattr__
        setattr_(self, "resource", resource)
        setattr_(self, "rel_dir", rel_dir)
        setattr_(self, "value", value)
        setattr_(self, "owner", owner)

    @property
    def key(self) -> str:
        """The resource's registry key (``cpu_cfs_quota``): what audit entries and metrics name."""
        return self.resource.key


@dataclass(slots=True)
class Result:
    """What happened to one request to an executor; read-only by convention.  Not a frozen dataclass: the
    cgroup executor builds one per update per round (thousands in a steady round), and a frozen
    dataclass's ``__init__`` costs several times as much.

    ``request`` is the :class:`CgroupUpdate` a cgroup write answers (None for the other executors);
    ``path`` the file, directory or task (``pid:<n>``) acted on and ``text`` the value written (or that
    would have been), both None when the request was rejected before they were known.  Requests covering
    several tasks list them: ``applied`` (moved or given the cookie now), ``already`` (needed nothing),
    ``gone`` (exited first: expected, not an error) and ``failed`` ((task, error) of the other failures).
    """

    request: CgroupUpdate | None
    outcome: Outcome
    path: str | None = None
    text: str | None = None
    error: str | None = None
    group: str | None = None
    """The resctrl control group ("" for the root group) of a resctrl result."""
    cookie: int | None = None
    """The core-scheduling cookie read, or now on the tasks (0 after a clear), when known."""
    applied: tuple[int, ...] = ()
    already: tuple[int, ...] = ()
    gone: tuple[int, ...] = ()
    failed: tuple[tuple[int, str], ...] = ()

    @property
    def update(self) -> CgroupUpdate:
        """The cgroup update this result answers; only results of the cgroup executor have one."""
        if self.request is None:
            raise AttributeError(
                f"a {self.outcome.value} result of {self.path or self.group!r} answers no cgroup update")
        return self.request

    @property
    def ok(self) -> bool:
        """The target holds the desired state as far as the executor knows."""
        return self.outcome in _OK and not self.failed
