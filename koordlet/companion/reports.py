"""Which companion replica writes a node's own objects, its NodeMetric and NodeResourceTopology.

Upstream each koordlet writes them itself; here the koordlet has no write access and reports over one gRPC
connection to one replica (the Service picked it), so that replica is the only one holding the node's reports and
writes them, leader or not: they are facts of the node, not decisions of the leader.  The other replicas learn
the node's metric from the NodeMetric object (the watch), as upstream's koord-manager does.

A koordlet that moves (its replica restarted, its connection was balanced elsewhere) leaves its old replica with
a report that only gets older.  That replica must not write it again (a write retried, a periodic resync, the
replica becoming leader) over what the new one writes, so a replica writes a node's objects only while the
node's last report *to it* is fresh: received within :data:`STALE_AFTER_INTERVALS` report intervals.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

STALE_AFTER_INTERVALS = 3
"""A node's reports stop being this replica's to write after this many report intervals without one (180 s at
the default 60 s interval): one or two reports lost or late (a reconnect backs off, a busy node) keep the writer
in place, while a koordlet that moved away has been reporting to its new replica for a while already."""


class ReportedNodes:
    """When each node last reported to this replica, on a monotonic clock (a wall-clock step must not make a
    departed node look fresh).  ``interval`` gives a node's report interval in seconds (its collect policy)."""

    def __init__(self, interval: Callable[[str], float], clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def seen(self, node: str) -> bool:
        """Records a report of ``node``; True when its reports start (again) here, i.e. it was not fresh before:
        what this replica remembers having written for it may have been overwritten by another replica since."""
        bound = STALE_AFTER_INTERVALS * self._interval(node)
        now = self._clock()
        with self._lock:
            last = self._last.get(node)
            self._last[node] = now
        return last is None or now - last > bound

    def fresh(self, node: str) -> bool:
        """Whether this replica writes ``node``'s objects now: its last report here is within the bound."""
        bound = STALE_AFTER_INTERVALS * self._interval(node)
        with self._lock:
            last = self._last.get(node)
        return last is not None and self._clock() - last <= bound

    def forget(self, node: str) -> None:
        with self._lock:
            self._last.pop(node, None)
