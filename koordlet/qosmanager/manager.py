"""The QoS manager: runs each enabled strategy at its own interval in one thread, against the NodeSLO in
force, and keeps every strategy's last decision (Koordinator ``pkg/koordlet/qosmanager``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.component import Worker
from koordlet.qosmanager.framework import Action, Decision, Options, Strategy
from koordlet.qosmanager.shadow import Shadow, StrategyWriters
from koordlet.statesinformer.nodeslo import FileNodeSLOSource, NodeSLOHolder
from koordlet.streaklog import Streak

log = logging.getLogger(__name__)


class _Slot:
    __slots__ = ("errors", "next_due", "strategy", "was_enabled")

    def __init__(self, strategy: Strategy, clock: Callable[[], float]) -> None:
        self.strategy = strategy
        self.next_due = 0.0
        self.was_enabled = False
        self.errors = Streak(log, clock)
        """A strategy raising every round is logged once per exception type, and once when it stops."""


class QoSManager:
    """A daemon component; :meth:`run_once` is one pass of its loop (tests call it with a fake clock)."""

    name = "qosmanager"

    def __init__(self, options: Options, strategies: Sequence[Strategy], holder: NodeSLOHolder,
                 source: FileNodeSLOSource | None = None, monotonic: Callable[[], float] | None = None,
                 shadow: Shadow | None = None) -> None:
        self.options = options
        self.holder = holder
        self.source = source
        self.shadow = shadow
        """Shadow mode (None: every strategy always active); its strategies must be built by
        ``build_strategies(..., shadow=shadow)``."""
        self._monotonic = monotonic or time.monotonic
        self._slots = [_Slot(s, options.clock) for s in strategies]
        self._worker = Worker("qosmanager")
        self.rounds = 0

    @property
    def strategies(self) -> list[str]:
        return [slot.strategy.name for slot in self._slots]

    @property
    def strategy_objects(self) -> list[Strategy]:
        """The strategies themselves, in run order (the debug API asks each for enabled() and interval())."""
        return [slot.strategy for slot in self._slots]

    def run_once(self, force: bool = False) -> float:
        """Runs every due strategy (all when ``force``); returns seconds until the next is due."""
        if self.source is not None:
            self.source.poll()
        spec = self.holder.current().spec
        now = self._monotonic()
        for slot in self._slots:
            if not force and now < slot.next_due:
                continue
            # Scheduled from the previous due time so rounds do not drift by their own cost; a round
            # that fell behind (a slow strategy, a suspended host) starts the schedule again from now.
            due = slot.next_due + slot.strategy.interval()
            slot.next_due = due if slot.next_due and due > now else now + slot.strategy.interval()
            self._run(slot, spec)
        self.rounds += 1
        if not self._slots:
            return 1.0
        return max(0.0, min(s.next_due for s in self._slots) - self._monotonic())

    def _run(self, slot: _Slot, spec: NodeSLOSpec) -> None:
        strategy = slot.strategy
        started = time.perf_counter()
        ok = True
        try:
            enabled = strategy.enabled(spec)
            if not enabled and not slot.was_enabled:
                return
            writers = self._begin_shadow_round(strategy.name)
            if writers is not None and writers.shadow and strategy.name in self._no_shadow_path:
                decision = Decision(strategy.name, self.options.clock(), Action.SKIP,
                                    "shadow mode: not run, its writes have no shadow path yet", shadow=True)
                self.options.decisions.record(decision)
                return
            # One last round with enabled=False lets a strategy undo what it did (recover BE's cpuset).
            decision = strategy.run_once(spec, enabled)
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

    def _begin_shadow_round(self, strategy: str) -> StrategyWriters | None:
        """The strategy's writers, switched to the mode in force now; None without shadow mode."""
        if self.shadow is None:
            return None
        writers = self.shadow.writers.get(strategy)
        if writers is not None:
            writers.begin_round(self.shadow.modes.shadow(strategy))
        return writers

    @property
    def _no_shadow_path(self) -> frozenset[str]:
        return self.shadow.unsupported if self.shadow is not None else frozenset()

    # --------------------------------------------------------------------------------- component

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        # A strategy's exception is caught per round (_run); only a bug in the loop itself ends it.
        log.info("qosmanager starting", extra={"strategies": self.strategies})
        self._worker.loop(self.run_once, on_failure)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stop(timeout_seconds)
