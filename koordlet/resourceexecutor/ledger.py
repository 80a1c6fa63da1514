"""What an executor remembers about the targets it writes (cgroup files, resctrl groups, the core-scheduling
call): the last value written, values the kernel refused, the failures already logged.

* **Last value**: the same text written to the same target less than ``force_update_seconds`` ago is not
  written again.  A periodic rewrite after the window repairs values changed behind our back (Koordinator's
  ``--resource-force-update-seconds``, 60 s).
* **Refusal backoff**: a value the kernel refused (EINVAL), or any value of a target the kernel lacks
  (a missing file, EOPNOTSUPP...), is not written again before ``unsupported_retry_seconds`` end unless the
  value changes: Koordinator #3217 burned 350-420m CPU rewriting a refused value every tick.
* **Log once**: a target's failure is logged when its streak starts, when the kind of failure (outcome and
  errno, never the value) changes and when a write succeeds again, not every round.
* **Pruning**: entries past their window go on a timer, and everything below a directory goes when that
  directory is found gone (a deleted pod's cgroups would otherwise pile up).

The errno classes are the ones of :mod:`koordlet.errors`.  Not thread-safe: the owning executor calls it
under its own lock.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from koordlet.errors import GONE_ERRNOS, REFUSED_VALUE_ERRNO, UNSUPPORTED_ERRNOS, ConfigError, missing_file
from koordlet.resourceexecutor.update import Outcome
from koordlet.streaklog import Streak

DEFAULT_FORCE_UPDATE_SECONDS = 60.0
DEFAULT_UNSUPPORTED_RETRY_SECONDS = 600.0
KEPT_WINDOWS = 2
"""Force-update windows a written value is remembered: one to skip it, the next to verify it before a rewrite."""


def check_timings(force_update_seconds: float, unsupported_retry_seconds: float) -> None:
    """The settings every writer (cgroup files, resctrl, prctl) shares; negative ones are config errors."""
    if force_update_seconds < 0:
        raise ConfigError(f"resource_executor.force_update_seconds: must be >= 0, got {force_update_seconds!r}")
    if unsupported_retry_seconds < 0:
        raise ConfigError(
            f"resource_executor.unsupported_retry_seconds: must be >= 0, got {unsupported_retry_seconds!r}"
        )


@dataclass(frozen=True)
class Written:
    text: str
    at: float


@dataclass(frozen=True)
class Refusal:
    text: str | None
    """The refused text; None when no value can work (the file or feature is missing)."""
    until: float
    reason: str


def classify(code: int, path: str) -> Outcome:
    """The outcome of a write to ``path`` that failed with errno ``code``."""
    if missing_file(code, path):
        # The directory is there and the file is not: the kernel's answer, not the runtime's race.
        return Outcome.UNSUPPORTED
    if code in GONE_ERRNOS:
        return Outcome.GONE
    if code == REFUSED_VALUE_ERRNO or code in UNSUPPORTED_ERRNOS:
        return Outcome.UNSUPPORTED
    return Outcome.FAILED


def failure_kind(outcome: Outcome, code: int | None = None) -> str:
    """What a failure's log streak is keyed on: the outcome and errno, never the value (a quota refused
    round after round is refused with a new value each time)."""
    return outcome.value if code is None else f"{outcome.value}:{errno.errorcode.get(code, str(code))}"


class WriteLedger:
    """The bookkeeping of one executor (see the module doc).  ``failure_message`` and
    ``recovery_message`` are the constant log messages of a failure streak's start and end, logged to
    ``logger`` with the target as field ``path``."""

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], float],
        force_update_seconds: float,
        retry_seconds: float,
        *,
        failure_message: str,
        recovery_message: str,
    ) -> None:
        self._log = logger
        self._clock = clock
        self.force_update_seconds = force_update_seconds
        self.retry_seconds = retry_seconds
        self._failure_message = failure_message
        self._recovery_message = recovery_message
        self._written: dict[str, Written] = {}
        self._refused: dict[str, Refusal] = {}
        self._streaks: dict[str, Streak] = {}
        """target (or another key for requests that never resolved to one) -> its failure streak."""
        self._next_prune = clock() + force_update_seconds
        self.version = 0
        """Counts the changes to what :meth:`unchanged` answers from (values written, refused, forgotten,
        pruned): a caller's answers stay good while it does not move and their window does not end."""

    # ------------------------------------------------------------------------------------------ asking

    def refusal(self, target: str, text: str | None, now: float) -> Refusal | None:
        """The refusal still in force for writing ``text`` to ``target``, if any."""
        refused = self._refused.get(target)
        if refused is not None and now < refused.until and refused.text in (None, text):
            return refused
        return None

    def skip(self, target: str, text: str, now: float, *, use_cache: bool = True) -> tuple[Outcome, str | None] | None:
        """(outcome, error) of not writing ``text`` to ``target`` now: refused earlier, or written within the
        force-update window (``use_cache``); None when it has to be written."""
        refused = self._refused.get(target)
        if refused is not None and now < refused.until and refused.text in (None, text):
            error = f"{refused.reason}; not retried for {refused.until - now:.0f} s unless the value changes"
            return Outcome.UNSUPPORTED, error
        written = self._written.get(target)
        if use_cache and written is not None and written.text == text and now - written.at < self.force_update_seconds:
            return Outcome.SKIPPED_UNCHANGED, None
        return None

    def unchanged(self, target: str, text: str, now: float) -> bool:
        """``text`` went to ``target`` within the force-update window and nothing was refused there since:
        the common answer of a steady round, so it is kept to two lookups."""
        written = self._written.get(target)
        return (written is not None and written.text == text and now - written.at < self.force_update_seconds
                and target not in self._refused)

    def remembers(self, target: str, text: str) -> bool:
        """Whether ``text`` is what was last written to ``target`` (within :data:`KEPT_WINDOWS` windows, and
        with a force-update window at all: 0 means every apply writes)."""
        written = self._written.get(target)
        return self.force_update_seconds > 0 and written is not None and written.text == text

    def written_at(self, target: str) -> float | None:
        """When the value remembered for ``target`` was written (None: nothing remembered)."""
        written = self._written.get(target)
        return None if written is None else written.at

    def last_written(self, target: str, *, lines: bool = False) -> str | None:
        """The text last written to ``target`` and still remembered, or None.  ``lines``: for a file whose
        lines are remembered one by one (``<file>/<line key>``), those lines, joined."""
        written = self._written.get(target)
        if written is not None or not lines:
            return written.text if written is not None else None
        prefix = target.rstrip("/") + "/"
        texts = [w.text.rstrip("\n") for k, w in sorted(self._written.items()) if k.startswith(prefix)]
        return "\n".join(texts) if texts else None

    # ----------------------------------------------------------------------------------------- telling

    def written(self, target: str, text: str, now: float, *, recovered: bool = True) -> None:
        """``text`` is in ``target`` now; ends the target's failure streak when ``recovered``."""
        self.version += 1
        self._written[target] = Written(text, now)
        self._refused.pop(target, None)
        if not recovered:
            return
        streak = self._streaks.pop(target, None)
        if streak is not None:
            streak.ok(self._recovery_message, extra={"path": target, "value": text})

    def failed(
        self, target: str, text: str, code: int, now: float, message: str, *, path: str | None = None
    ) -> Outcome:
        """A write of ``text`` to ``target`` (in file ``path``, by default ``target`` itself) failed with
        errno ``code``: classifies it, backs the value (or, for a missing file or feature, every value) off,
        logs the failure once per kind and forgets what is below a directory found gone.  Returns the
        outcome; ``message`` is the error the caller reports."""
        self.version += 1
        self._written.pop(target, None)  # the target's content is unknown now
        path = target if path is None else path
        outcome = classify(code, path)
        if outcome is Outcome.GONE:
            self.drop_below(os.path.dirname(path))
            return outcome
        if outcome is Outcome.UNSUPPORTED:
            self.refuse(target, text if code == REFUSED_VALUE_ERRNO else None, now, message)
        self.log_failure(target, failure_kind(outcome, code), message)
        return outcome

    def refuse(self, target: str, text: str | None, now: float, reason: str) -> None:
        """Backs ``text`` (None: any value) off for ``target`` until the retry window ends."""
        self.version += 1
        self._refused[target] = Refusal(text, now + self.retry_seconds, reason)

    def log_failure(self, key: str, kind: str, message: str, *, extra: Mapping[str, Any] | None = None) -> None:
        """One failure of ``key``; logged only when it starts a streak of this kind."""
        streak = self._streaks.get(key)
        if streak is None:
            streak = self._streaks[key] = Streak(self._log, self._clock)
        streak.fail(kind, self._failure_message, extra={"path": key, "error": message, **(extra or {})})

    def recovered(self, key: str, *, extra: Mapping[str, Any] | None = None) -> None:
        """``key`` works again: ends its failure streak (logged when there was one)."""
        streak = self._streaks.pop(key, None)
        if streak is not None:
            streak.ok(self._recovery_message, extra={"path": key, **(extra or {})})

    # --------------------------------------------------------------------------------------- forgetting

    def forget(self, path: str | None = None) -> None:
        """Drops the last values and refusals of ``path`` and the targets below it, or of everything.  For a
        file remembered line by line, ``<file>/<maj:min>`` drops that device's lines only (its ``io.max`` /
        ``io.cost.qos`` targets ``<file>/<maj:min> <keys>`` included) and ``<file>`` all of them.  The
        failure streaks stay: a caller that forgets a target every round (it drifted) while its write keeps
        failing must not make the failure logged every round."""
        self.version += 1
        if path is None:
            self._written.clear()
            self._refused.clear()
            return
        prefixes = (path.rstrip("/") + "/", path + " ")
        for table in (self._written, self._refused):
            for key in [k for k in table if k == path or k.startswith(prefixes)]:
                del table[key]

    def drop_below(self, directory: str) -> None:
        """Forgets everything about ``directory`` and the targets below it, failure streaks included: it is
        gone, and whatever is made again under its name starts afresh."""
        self.version += 1
        prefix = directory.rstrip("/") + "/"
        for table in (self._written, self._refused, self._streaks):
            for key in [k for k in table if k == directory or k.startswith(prefix)]:
                del table[key]

    def clear(self) -> None:
        """Forgets everything, failure streaks included."""
        self.version += 1
        self._written.clear()
        self._refused.clear()
        self._streaks.clear()

    def prune(self, now: float) -> None:
        """Drops the entries past their window, at most once per window.  A written value is kept for
        :data:`KEPT_WINDOWS` windows: past the first, the executor reads the file back before rewriting it
        (:meth:`remembers`), and a value it refreshes stays remembered."""
        if now < self._next_prune:
            return
        self._next_prune = now + max(self.force_update_seconds, 1.0)
        self.version += 1
        kept = KEPT_WINDOWS * self.force_update_seconds
        for key in [k for k, v in self._written.items() if now - v.at >= kept]:
            del self._written[key]
        for key in [k for k, v in self._refused.items() if now >= v.until]:
            del self._refused[key]
