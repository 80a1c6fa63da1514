"""The single writer of node-wide kernel knobs (``/proc/sys/vm/min_free_kbytes``,
``/sys/kernel/mm/memcg_reaper/reap_background``...; descriptors in :mod:`koordlet.system.sysfiles`).

Koordinator writes them with its common file updater and never puts them back; this executor also
remembers what each file held before koordlet first changed it, so a strategy switched off can hand the
node back as it found it (:meth:`SysctlExecutor.restore`).  Those originals are kept in a small JSON file
in the state directory, written *before* the first write: after a restart (or a crash right after the
write) the value found at start is the operator's, not the one koordlet wrote last time.

Every request reads the file first and writes only when the text differs (a sysctl read is one small
read, and the comparison also repairs a value changed behind koordlet's back).  Errors are classified as
for cgroup files, with one difference: ENOENT here is never a race (nothing removes ``/proc/sys``), it is
a kernel without the knob, so it is ``unsupported`` and not retried before ``unsupported_retry_seconds``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from koordlet.errors import REFUSED_VALUE_ERRNO, UNSUPPORTED_ERRNOS, ConfigError
from koordlet.resourceexecutor.audit import AuditEntry, Auditor
from koordlet.resourceexecutor.ledger import DEFAULT_UNSUPPORTED_RETRY_SECONDS, WriteLedger, check_timings
from koordlet.resourceexecutor.sink import NULL_SINK, WriteSink
from koordlet.resourceexecutor.update import Outcome, Result
from koordlet.resourceexecutor.writer import CgroupWriter, FileWriter
from koordlet.system import atomicfile
from koordlet.system.hostpaths import HostPaths
from koordlet.system.sysfiles import REGISTRY, SysFile, check_feature_name, parse_sched_features, sched_features_path

log = logging.getLogger(__name__)

ORIGINALS_FILE = "sysctl-originals.json"
"""Name of the originals file in the state directory."""
FEATURE_KEY = "sched_features:"
"""Prefix of a scheduler feature's key in the originals (``sched_features:HRTICK`` -> "1" or "0")."""
FEATURES_RESOURCE = "sched_features"
_MISSING = frozenset({errno.ENOENT, errno.ENODEV}) | UNSUPPORTED_ERRNOS
INTEND_AGAIN_SECONDS = 60.0
"""How long an unchanged intention goes unaudited by default (the cgroup executor's default force-update window;
the daemon passes the window configured, ``qos.resourceForceUpdateSeconds``)."""


@dataclass(frozen=True)
class SysctlUpdate:
    """One desired knob value; ``owner`` says who wants it and why (it goes to the audit log)."""

    file: SysFile
    value: int
    owner: str

    def __post_init__(self) -> None:
        if REGISTRY.get(self.file.key) is not self.file:
            raise ConfigError(f"unknown kernel knob {self.file.key!r}: not a descriptor of koordlet.system.sysfiles")
        if not self.owner:
            raise ConfigError(f"an update of {self.file.key} needs an owner for the audit")


class SysctlExecutor:
    """Validates, skips unchanged values, remembers originals, writes, audits and measures; thread-safe.

    ``originals_path``: where the values found before the first write are kept (None: in memory only,
    lost at exit)."""

    def __init__(
        self,
        paths: HostPaths,
        clock: Callable[[], float] = time.monotonic,
        audit: Auditor | None = None,
        metrics: WriteSink | None = None,
        *,
        originals_path: str | None = None,
        unsupported_retry_seconds: float = DEFAULT_UNSUPPORTED_RETRY_SECONDS,
        intend_again_seconds: float = INTEND_AGAIN_SECONDS,
        writer: CgroupWriter | None = None,
    ) -> None:
        check_timings(intend_again_seconds, unsupported_retry_seconds)
        self.intend_again_seconds = intend_again_seconds
        """How long an unchanged intention goes unaudited (:meth:`intend`), as the cgroup executor's force-update
        window."""
        self._paths = paths
        self._clock = clock
        self._audit = audit
        self._metrics: WriteSink = metrics if metrics is not None else NULL_SINK
        self._writer: CgroupWriter = writer if writer is not None else FileWriter()
        self._originals_path = originals_path
        self._lock = threading.Lock()
        self._ledger = WriteLedger(log, clock, 0.0, unsupported_retry_seconds,
                                   failure_message="kernel knob write failed",
                                   recovery_message="kernel knob write works again")
        self._originals: dict[str, str] = self._load()
        self._told: dict[str, tuple[str, float]] = {}
        """Path -> (text, when) of the last intention :meth:`intend` audited."""

    # ------------------------------------------------------------------------------------------- public

    def path(self, file: SysFile) -> str:
        return file.path(self._paths)

    def read(self, file: SysFile) -> int:
        """The knob's current value; raises ``OSError`` (ENOENT: the kernel lacks it) or ``ValueError``."""
        return int(self._writer.read(self.path(file)).split()[0])

    def original(self, file: SysFile) -> str | None:
        """What the file held before koordlet first changed it, when koordlet did and has not restored it."""
        with self._lock:
            return self._originals.get(file.key)

    def checked(self, update: SysctlUpdate) -> tuple[str, str] | Result:
        """(path, text) of ``update``, or its ``INVALID`` result when the value is outside the knob's bounds."""
        path = self.path(update.file)
        try:
            return path, str(update.file.check(update.value))
        except ValueError as exc:
            return Result(None, Outcome.INVALID, path=path, error=str(exc))

    def apply(self, update: SysctlUpdate) -> Result:
        """Puts ``update.value`` into the file unless it is there already."""
        checked = self.checked(update)
        if isinstance(checked, Result):
            return checked
        with self._lock:
            return self._write(update.file, *checked, update.owner, remember=True)

    def restore(self, file: SysFile, owner: str) -> Result | None:
        """Writes back the value found before koordlet's first write and forgets it; None when there is
        nothing to restore.  A failed restore keeps the original for the next attempt."""
        with self._lock:
            text = self._originals.get(file.key)
            if text is None:
                return None
            result = self._write(file, self.path(file), text, owner, remember=False)
            if result.ok or result.outcome is Outcome.UNSUPPORTED:
                # Unsupported: the knob is gone (another kernel after a reboot), nothing left to put back.
                del self._originals[file.key]
                self._save()
            return result

    def text(self, file: SysFile) -> str:
        """The knob's current text (what a write would compare with); raises ``OSError``."""
        return self._writer.read(self.path(file)).strip()

    def intend(self, update: SysctlUpdate, who: str) -> Result:
        """Shadow mode's :meth:`apply` for a caller stating a value every round (a runtime hook's reconciler):
        ``INTENDED`` while the file holds another text, audited and counted once per
        :attr:`intend_again_seconds` while it stays so; nothing is written."""
        checked = self.checked(update)
        if isinstance(checked, Result):
            return checked
        path, text = checked
        try:
            old = self._writer.read(path).strip()
        except OSError as exc:
            return read_failure(path, update.file.key, exc)
        if old == text:
            return Result(None, Outcome.SKIPPED_UNCHANGED, path=path, text=text)
        now = self._clock()
        with self._lock:
            told = self._told.get(path)
            fresh = told is None or told[0] != text or now - told[1] >= self.intend_again_seconds
            if fresh:
                self._told[path] = (text, now)
        if fresh:
            self.intended(path, update.file.key, old, text, update.owner, who)
        return Result(None, Outcome.INTENDED, path=path, text=text)

    def intended(self, path: str, resource: str, old: str | None, new: str, owner: str, strategy: str) -> None:
        """Shadow mode: ``strategy`` would have written ``new`` where ``old`` is, and nothing was written; audited
        as intended and counted as the cgroup executor's intentions are."""
        self._metrics.intended(resource, strategy)
        self._record(path, resource, old, new, owner, Outcome.INTENDED, None)

    def restorable(self) -> Mapping[str, str]:
        """Key -> original text of every knob koordlet changed and has not restored (scheduler features as
        ``sched_features:<NAME>`` -> "1" or "0")."""
        with self._lock:
            return dict(self._originals)

    # ------------------------------------------------------------------------------------------ writing

    def _write(self, file: SysFile, path: str, text: str, owner: str, *, remember: bool) -> Result:
        now = self._clock()
        refused = self._ledger.refusal(path, text, now)
        if refused is not None:
            return Result(None, Outcome.UNSUPPORTED, path=path, text=text, error=refused.reason)
        try:
            old = self._writer.read(path).strip()
        except OSError as exc:
            return self._failed(file.key, path, path, None, text, owner, exc, now)
        if old == text:
            self._ledger.written(path, text, now)
            return Result(None, Outcome.SKIPPED_UNCHANGED, path=path, text=text)
        if remember and file.key not in self._originals:
            self._originals[file.key] = old
            self._save()
        started = time.monotonic()
        try:
            self._writer.write(path, text)
        except OSError as exc:
            self._metrics.observe(file.key, False, time.monotonic() - started)
            return self._failed(file.key, path, path, old, text, owner, exc, now)
        self._metrics.observe(file.key, True, time.monotonic() - started)
        self._ledger.written(path, text, now)
        self._record(path, file.key, old, text, owner, Outcome.WRITTEN, None)
        return Result(None, Outcome.WRITTEN, path=path, text=text)

    def _failed(self, resource: str, path: str, target: str, old: str | None, text: str, owner: str,
                exc: OSError, now: float) -> Result:
        """A read or write of ``path`` (ledger key ``target``: the file, or one feature in it) failed."""
        code = exc.errno or errno.EIO
        reason = f"{path}: {os.strerror(code)}"
        if code in _MISSING:
            outcome = Outcome.UNSUPPORTED
            reason = f"{path}: this kernel has no {resource} ({os.strerror(code)})"
            self._ledger.refuse(path, None, now, reason)
        elif code == REFUSED_VALUE_ERRNO:
            outcome = Outcome.UNSUPPORTED
            reason = f"{path}: the kernel refused {text} ({os.strerror(code)})"
            self._ledger.refuse(target, text, now, reason)
        else:
            outcome = Outcome.FAILED
        self._ledger.log_failure(target, f"{outcome.value}:{errno.errorcode.get(code, str(code))}", reason)
        if old is not None:  # a failed read is no write attempt: nothing to audit
            self._record(path, resource, old, text, owner, outcome, reason)
        return Result(None, outcome, path=path, text=text, error=reason)

    def _record(self, path: str, resource: str, old: str | None, new: str, owner: str, outcome: Outcome,
                error: str | None) -> None:
        if self._audit is not None:
            self._audit.record(AuditEntry(path, resource, old, new, owner, outcome.value, error))

    # ------------------------------------------------------------------------------- scheduler features

    def features_path(self) -> str:
        return sched_features_path(self._paths)

    def sched_features(self) -> dict[str, bool]:
        """The scheduler's features by name; raises ``OSError`` (ENOENT: no debugfs or no such file) or
        ``ValueError``."""
        return parse_sched_features(self._writer.read(sched_features_path(self._paths)))

    def apply_feature(self, name: str, enabled: bool, owner: str) -> Result:
        """Sets (``NAME``) or clears (``NO_NAME``) one scheduler feature unless it is so already; a feature
        this kernel does not list is invalid (writing it would be EINVAL)."""
        try:
            check_feature_name(name)
        except ValueError as exc:
            return Result(None, Outcome.INVALID, path=sched_features_path(self._paths), error=str(exc))
        with self._lock:
            return self._write_feature(name, enabled, owner, remember=True)

    def restore_feature(self, name: str, owner: str) -> Result | None:
        """Puts feature ``name`` back as it was before koordlet first changed it; None when it did not."""
        key = FEATURE_KEY + name
        with self._lock:
            text = self._originals.get(key)
            if text is None:
                return None
            result = self._write_feature(name, text == "1", owner, remember=False)
            if result.ok or result.outcome is Outcome.UNSUPPORTED:
                del self._originals[key]
                self._save()
            return result

    def _write_feature(self, name: str, enabled: bool, owner: str, *, remember: bool) -> Result:
        path = sched_features_path(self._paths)
        target = f"{path} {name}"
        text = name if enabled else f"NO_{name}"
        now = self._clock()
        refused = self._ledger.refusal(path, None, now) or self._ledger.refusal(target, text, now)
        if refused is not None:
            return Result(None, Outcome.UNSUPPORTED, path=path, text=text, error=refused.reason)
        try:
            current = parse_sched_features(self._writer.read(path))
        except OSError as exc:
            return self._failed(FEATURES_RESOURCE, path, target, None, text, owner, exc, now)
        except ValueError as exc:
            return Result(None, Outcome.FAILED, path=path, text=text, error=f"{path}: {exc}")
        if name not in current:
            return Result(None, Outcome.INVALID, path=path, text=text,
                          error=f"{path}: this kernel has no scheduler feature {name}")
        old = name if current[name] else f"NO_{name}"
        if current[name] == enabled:
            return Result(None, Outcome.SKIPPED_UNCHANGED, path=path, text=text)
        if remember and FEATURE_KEY + name not in self._originals:
            self._originals[FEATURE_KEY + name] = "1" if current[name] else "0"
            self._save()
        started = time.monotonic()
        try:
            self._writer.write(path, text)
        except OSError as exc:
            self._metrics.observe(FEATURES_RESOURCE, False, time.monotonic() - started)
            return self._failed(FEATURES_RESOURCE, path, target, old, text, owner, exc, now)
        self._metrics.observe(FEATURES_RESOURCE, True, time.monotonic() - started)
        self._ledger.recovered(target)
        self._record(path, FEATURES_RESOURCE, old, text, owner, Outcome.WRITTEN, None)
        return Result(None, Outcome.WRITTEN, path=path, text=text)

    # ---------------------------------------------------------------------------------------- originals

    def _load(self) -> dict[str, str]:
        if not self._originals_path:
            return {}
        try:
            with open(self._originals_path, "rb") as f:
                data = json.loads(f.read())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # Without the file koordlet cannot know the operator's values; it says so and starts afresh
            # (the next write records the value then in force).
            log.warning("kernel knob originals unreadable; starting without them",
                        extra={"path": self._originals_path, "error": str(exc)})
            return {}
        if not isinstance(data, dict):
            log.warning("kernel knob originals unreadable; starting without them",
                        extra={"path": self._originals_path, "error": "not a JSON object"})
            return {}
        return {k: v for k, v in data.items()
                if (k in REGISTRY or k.startswith(FEATURE_KEY)) and isinstance(v, str)}

    def _save(self) -> None:
        if not self._originals_path:
            return
        data = json.dumps(self._originals, sort_keys=True).encode()
        try:
            os.makedirs(os.path.dirname(self._originals_path), exist_ok=True)
            atomicfile.write(self._originals_path, data, mode=0o600)
        except OSError as exc:
            log.warning("kernel knob originals not saved; a restart would forget them",
                        extra={"path": self._originals_path, "error": str(exc)})


def read_failure(path: str, resource: str, exc: OSError) -> Result:
    """A failed read of a knob (or of the scheduler's features) before a shadow-mode intention: ``UNSUPPORTED``
    when the kernel has no such file, ``FAILED`` otherwise; nothing is remembered (no write was tried)."""
    code = exc.errno or errno.EIO
    if code in _MISSING:
        return Result(None, Outcome.UNSUPPORTED, path=path, error=f"{path}: this kernel has no {resource} "
                                                                  f"({os.strerror(code)})")
    return Result(None, Outcome.FAILED, path=path, error=f"{path}: {os.strerror(code)}")
