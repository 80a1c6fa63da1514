"""The QoS manager: runs each enabled strategy at its own interval in one thread, against the NodeSLO in
force, and keeps every strategy's last decision (Koordinator ``pkg/koordlet/qosmanager``).

Besides its interval a strategy runs when something wakes it (:meth:`QoSManager.wake`: a PSI trigger fired).
A woken round is the strategy's ordinary round, run sooner: its cooldowns and the evictor's limits hold.  Woken
rounds of one strategy are at least ``wake_debounce`` seconds apart, so a storm of wakes is one round."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.component import Worker
from koordlet.qosmanager.framework import QUIET_ACTIONS, Action, Decision, Options, Strategy, Wakeable
from koordlet.qosmanager.shadow import Shadow, StrategyWriters
from koordlet.statesinformer.nodeslo import FileNodeSLOSource, NodeSLOHolder
from koordlet.streaklog import Streak

log = logging.getLogger(__name__)


class _Slot:
    __slots__ = ("errors", "last_woken", "next_due", "strategy", "wake_cause", "wakes", "was_enabled")

    def __init__(self, strategy: Strategy, clock: Callable[[], float]) -> None:
        self.strategy = strategy
        self.next_due = 0.0
        self.was_enabled = False
        self.wake_cause = ""
        """Why the strategy was woken, until a round (woken or regular) serves it."""
        self.last_woken = float("-inf")
        """Monotonic time of the last woken round (the debounce counts from it)."""
        self.wakes = WakeCounts()
        self.errors = Streak(log, clock)
        """A strategy raising every round is logged once per exception type, and once when it stops."""


class WakeCounts:
    """A strategy's wakes: asked for, served by a woken round (that acted, or was quiet: nothing to do), or
    folded into a woken round another wake had already asked for (debounced)."""

    __slots__ = ("acted", "folded", "quiet", "received")

    def __init__(self) -> None:
        self.received = self.acted = self.quiet = self.folded = 0

    def to_json(self) -> dict[str, int]:
        return {"received": self.received, "woken_rounds_acted": self.acted, "woken_rounds_quiet": self.quiet,
                "folded": self.folded}


class QoSManager:
    """A daemon component; :meth:`run_once` is one pass of its loop (tests call it with a fake clock)."""

    name = "qosmanager"

    def __init__(self, options: Options, strategies: Sequence[Strategy], holder: NodeSLOHolder,
                 source: FileNodeSLOSource | None = None, monotonic: Callable[[], float] | None = None,
                 shadow: Shadow | None = None, wake_debounce: float = 0.5) -> None:
        self.options = options
        self.holder = holder
        self.source = source
        self.shadow = shadow
        """Shadow mode (None: every strategy always active); its strategies must be built by
        ``build_strategies(..., shadow=shadow)``."""
        self._monotonic = monotonic or time.monotonic
        self._slots = [_Slot(s, options.clock) for s in strategies]
        self._by_name = {slot.strategy.name: slot for slot in self._slots}
        self.wake_debounce = wake_debounce
        self._wake_lock = threading.Lock()
        self._woken = threading.Event()
        """Set by :meth:`wake`: the loop's wait ends at once."""
        self._worker = Worker("qosmanager")
        self.rounds = 0

    @property
    def strategies(self) -> list[str]:
        return [slot.strategy.name for slot in self._slots]

    @property
    def strategy_objects(self) -> list[Strategy]:
        """The strategies themselves, in run order (the debug API asks each for enabled() and interval())."""
        return [slot.strategy for slot in self._slots]

    def wake(self, strategies: Sequence[str], cause: str) -> None:
        """Asks for a round of each named strategy now (from any thread); a name this manager does not run
        is ignored.  The round comes at once unless the strategy's last woken round was less than
        ``wake_debounce`` seconds ago, then when that time is up; wakes arriving meanwhile are one round."""
        with self._wake_lock:
            for name in strategies:
                slot = self._by_name.get(name)
                if slot is None:
                    continue
                slot.wakes.received += 1
                if slot.wake_cause:
                    slot.wakes.folded += 1
                slot.wake_cause = cause
        self._woken.set()

    def wake_counts(self) -> dict[str, dict[str, int]]:
        with self._wake_lock:
            return {slot.strategy.name: slot.wakes.to_json() for slot in self._slots if slot.wakes.received}

    def run_once(self, force: bool = False) -> float:
        """Runs every due strategy (all when ``force``) and every woken one whose debounce is over; returns
        seconds until the next is due."""
        if self.source is not None:
            self.source.poll()
        spec = self.holder.current().spec
        now = self._monotonic()
        for slot in self._slots:
            cause = self._take_wake(slot, now)
            regular = force or now >= slot.next_due
            if not regular and not cause:
                continue
            if regular:
                # Scheduled from the previous due time so rounds do not drift by their own cost; a round
                # that fell behind (a slow strategy, a suspended host) starts the schedule again from now.
                due = slot.next_due + slot.strategy.interval()
                slot.next_due = due if slot.next_due and due > now else now + slot.strategy.interval()
            if cause:
                slot.last_woken = now
            self._run(slot, spec, cause)
        self.rounds += 1
        if not self._slots:
            return 1.0
        return max(0.0, min(self._next_time(s) for s in self._slots) - self._monotonic())

    def _take_wake(self, slot: _Slot, now: float) -> str:
        """The wake a round may serve now ("" for none, or while its debounce lasts)."""
        # Most rounds: no wake, and no lock taken; a wake set meanwhile also sets the event, so the next pass serves it.
        if not slot.wake_cause:
            return ""
        with self._wake_lock:
            cause = slot.wake_cause
            if not cause or now < slot.last_woken + self.wake_debounce:
                return ""
            slot.wake_cause = ""
            return cause

    def _next_time(self, slot: _Slot) -> float:
        if not slot.wake_cause:  # read without the lock as in _take_wake; wake() also sets the event
            return slot.next_due
        with self._wake_lock:
            if slot.wake_cause:
                return min(slot.next_due, slot.last_woken + self.wake_debounce)
        return slot.next_due

    def _run(self, slot: _Slot, spec: NodeSLOSpec, woken_by: str = "") -> None:
        strategy = slot.strategy
        started = time.perf_counter()
        ok = True
        try:
            enabled = strategy.enabled(spec)
            if not enabled and not slot.was_enabled:
                return
            writers = self._begin_shadow_round(strategy.name)
            # One last round with enabled=False lets a strategy undo what it did (recover BE's cpuset).
            if woken_by and isinstance(strategy, Wakeable):
                decision = strategy.run_woken(spec, enabled)
            else:
                decision = strategy.run_once(spec, enabled)
            if woken_by:
                decision = replace(decision, woken_by=woken_by)
                self._count_woken(slot, decision.action not in QUIET_ACTIONS)
            if writers is not None and writers.shadow:
                decision = replace(decision, shadow=True, intended=tuple(writers.intended))
            slot.was_enabled = enabled
            slot.errors.ok("QoS strategy runs again", extra={"strategy": strategy.name})
        except Exception as exc:
            ok = False
            slot.errors.fail(type(exc).__name__, "QoS strategy failed", level=logging.ERROR, exc_info=True,
                             extra={"strategy": strategy.name})
            decision = Decision(strategy.name, self.options.clock(), Action.ERROR, f"{type(exc).__name__}: {exc}")
        self.options.decisions.record(decision)
        self.options.metrics.strategy_run(strategy.name, time.perf_counter() - started, ok)

    def _count_woken(self, slot: _Slot, acted: bool) -> None:
        """A woken round that did something, or found nothing to do (a spurious wake-up)."""
        self.options.metrics.woken_round(slot.strategy.name, acted)
        with self._wake_lock:
            if acted:
                slot.wakes.acted += 1
            else:
                slot.wakes.quiet += 1

    def _begin_shadow_round(self, strategy: str) -> StrategyWriters | None:
        """The strategy's writers, switched to the mode in force now; None without shadow mode."""
        if self.shadow is None:
            return None
        writers = self.shadow.writers.get(strategy)
        if writers is not None:
            writers.begin_round(self.shadow.modes.shadow(strategy))
        return writers

    # --------------------------------------------------------------------------------- component

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        # A strategy's exception is caught per round (_run); only a bug in the loop itself ends it.
        log.info("qosmanager starting", extra={"strategies": self.strategies})
        stopping = self._worker.stopping

        def loop() -> None:
            try:
                while not stopping.is_set():
                    self._woken.wait(self.run_once())
                    self._woken.clear()
            except BaseException as exc:
                on_failure(exc)

        self._worker.start(loop)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stopping.set()
        self._woken.set()
        self._worker.stop(timeout_seconds)
