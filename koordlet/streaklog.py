"""Logging a condition that holds round after round: one line when it starts, one when it ends.

A persistent fault (a cgroup gone, a collector failing, a strategy without its inputs) recurs every round,
every second; a line per round buries everything else in the log.  A :class:`Streak` logs the first round
of a streak, stays quiet while the condition's *kind* stays the same, and logs once when it ends, saying
how many rounds and seconds it lasted.  A kind is a stable name ("be_cgroup_unreadable", an errno name, an
exception type), never a text with numbers or values in it: a summary such as "LS usage 0.42 ..." changes
every round and would start a new streak each time.  A different kind ends the streak and starts another.

Each round's details stay where they always were (a strategy's decision, the executor's results, metrics);
the log only marks the edges.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass
class _Open:
    kind: str
    since: float
    rounds: int


class Streak:
    """The edges of one condition's streaks (one per strategy, collector or file)."""

    def __init__(self, logger: logging.Logger, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._clock = clock
        self._open: _Open | None = None

    @property
    def kind(self) -> str | None:
        """The kind of the streak in progress, None when the condition does not hold."""
        return None if self._open is None else self._open.kind

    @property
    def rounds(self) -> int:
        """Rounds the streak in progress has lasted (0 when none is)."""
        return 0 if self._open is None else self._open.rounds

    def fail(self, kind: str, message: str, *, level: int = logging.WARNING,
             extra: Mapping[str, Any] | None = None, exc_info: bool = False) -> bool:
        """One round in condition ``kind``; logs ``message`` (a constant: values go in ``extra``, with the kind
        as field ``reason``) when that starts a streak.  Returns whether it logged."""
        if self._open is not None and self._open.kind == kind:
            self._open.rounds += 1
            return False
        self._open = _Open(kind, self._clock(), 1)
        self._log.log(level, message, extra={"reason": kind, **(extra or {})}, exc_info=exc_info)
        return True

    def ok(self, message: str, *, level: int = logging.INFO, extra: Mapping[str, Any] | None = None) -> bool:
        """One round without the condition; logs ``message`` with the streak's kind, its rounds and seconds
        when that ends a streak.  Returns whether it logged."""
        if self._open is None:
            return False
        ended, self._open = self._open, None
        seconds = max(0.0, self._clock() - ended.since)
        self._log.log(level, message, extra={"reason": ended.kind, "rounds": ended.rounds,
                                             "seconds": round(seconds, 3), **(extra or {})})
        return True
