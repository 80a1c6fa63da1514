"""Consecutive-round anomaly detection (upstream ``pkg/descheduler/utils/anomaly``): a node counts as abnormal
only after it was seen overloaded more than ``consecutiveAbnormalities`` rounds in a row, and stays abnormal until
``timeout`` passes or it was seen normal more than ``consecutiveNormalities`` times."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class State(enum.Enum):
    OK = "ok"
    ANOMALY = "anomaly"


@dataclass
class Counter:
    total_detects: int = 0
    total_normalities: int = 0
    total_abnormalities: int = 0
    consecutive_normalities: int = 0
    consecutive_abnormalities: int = 0

    def on_normality(self) -> None:
        self.total_normalities += 1
        self.consecutive_normalities += 1
        self.consecutive_abnormalities = 0

    def on_abnormality(self) -> None:
        self.total_abnormalities += 1
        self.consecutive_abnormalities += 1
        self.consecutive_normalities = 0


class BasicDetector:
    """Upstream ``BasicDetector``: the counters restart whenever the state changes; an anomaly expires
    ``timeout_seconds`` after it was last confirmed."""

    def __init__(self, name: str, *, consecutive_abnormalities: int, consecutive_normalities: int,
                 timeout_seconds: float, clock: Callable[[], float]) -> None:
        self.name = name
        self._abnormal_after = consecutive_abnormalities
        self._normal_after = consecutive_normalities
        self._timeout = timeout_seconds
        self._clock = clock
        self._state = State.OK
        self.counter = Counter()
        self._expiration: float | None = None

    def _is_normal_again(self) -> bool:
        return self.counter.consecutive_normalities > self._normal_after

    def _current_state(self, now: float) -> State:
        if self._state is State.ANOMALY and (
                (self._expiration is not None and self._expiration < now) or self._is_normal_again()):
            self._set_state(State.OK, now)
        return self._state

    def _set_state(self, state: State, now: float) -> None:
        if self._state is state:
            return
        self._state = state
        self._new_generation(now)

    def _new_generation(self, now: float) -> None:
        self.counter = Counter()
        self._expiration = now + self._timeout if self._state is State.ANOMALY else None

    @property
    def state(self) -> State:
        return self._current_state(self._clock())

    def mark(self, normal: bool) -> State:
        """Records one observation and returns the state after it."""
        now = self._clock()
        state = self._current_state(now)
        self.counter.total_detects += 1
        if normal:
            self.counter.on_normality()
            if state is State.ANOMALY and self._is_normal_again():
                self._set_state(State.OK, now)
        else:
            self.counter.on_abnormality()
            if state is State.OK and self.counter.consecutive_abnormalities > self._abnormal_after:
                self._set_state(State.ANOMALY, now)
        return self._current_state(now)

    def reset(self) -> None:
        self._set_state(State.OK, self._clock())


class DetectorCache:
    """Detectors by node name, each forgotten ``ttl_seconds`` after it was last stored (upstream keeps them in a
    go-cache with ``detectorCacheTimeout``)."""

    def __init__(self, ttl_seconds: float, clock: Callable[[], float]) -> None:
        self._ttl = ttl_seconds
        self._clock = clock
        self._items: dict[str, tuple[BasicDetector, float]] = {}

    def get(self, name: str) -> BasicDetector | None:
        item = self._items.get(name)
        if item is None:
            return None
        if item[1] <= self._clock():
            del self._items[name]
            return None
        return item[0]

    def set(self, name: str, detector: BasicDetector) -> None:
        self._items[name] = (detector, self._clock() + self._ttl)

    def __len__(self) -> int:
        return len(self._items)
