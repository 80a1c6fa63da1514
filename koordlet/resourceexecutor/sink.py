"""Where the executors report how long each write took and whether it worked.

The executors sit below the metrics package, so they name only this protocol; the node agent's composition
root hands them :class:`koordlet.metrics.executor.ResourceExecutorMetrics`, which implements it."""

from __future__ import annotations

from typing import Protocol


class WriteSink(Protocol):
    """Receives one observation per attempted write; must never raise."""

    def observe(self, kind: str, ok: bool, seconds: float) -> None:
        """One write of kind ``kind`` (a cgroup resource key, ``resctrl_schemata``...) took ``seconds``."""

    def intended(self, kind: str, strategy: str) -> None:
        """Shadow mode: ``strategy`` would have written a value of kind ``kind``, and nothing was written."""


class NullSink:
    """The sink of an executor nobody measures."""

    def observe(self, kind: str, ok: bool, seconds: float) -> None:
        return None

    def intended(self, kind: str, strategy: str) -> None:
        return None


NULL_SINK: WriteSink = NullSink()
