"""An on-CPU profile of the running daemon, for ``koordctl profile`` (the debug API's ``/v1/profile``).

Every ``interval`` the sampler takes each thread's Python stack (``sys._current_frames``) and its CPU clock
(``pthread_getcpuclockid``), and charges the CPU time the thread used since the previous sample to the stack it
is in now.  A thread that waited (an event, a socket, a sleep) used no CPU and adds nothing, so the profile shows
where the daemon's CPU goes, not where its threads sit.  Time in C (the native batch reads, the kernel's side of
a write) is charged to the Python frame that called it.  Statistical, like any sampler: a stack that ran briefly
between two samples is charged to whatever the thread runs at the next one, so short intervals and a window of
several seconds make the figures meaningful.

The result is collapsed stacks (``thread;outer;...;inner`` -> CPU microseconds: the input of flamegraph.pl and
speedscope) and the functions ranked by their own and their total CPU.  Only one profile runs at a time: two
samplers would each cost the daemon, and each would see the other.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Final

MAX_SECONDS: Final = 120.0
MIN_INTERVAL_SECONDS: Final = 0.001
DEFAULT_INTERVAL_SECONDS: Final = 0.01
MAX_DEPTH: Final = 64
"""Deeper stacks keep their innermost frames (where the CPU goes) and are marked ``...``."""

_busy = threading.Lock()


class ProfileBusy(RuntimeError):
    """Another profile is running."""


def thread_cpu_ns(ident: int) -> int | None:
    """CPU nanoseconds used so far by the thread ``ident`` (``threading.get_ident``); None once it is gone."""
    try:
        return time.clock_gettime_ns(time.pthread_getcpuclockid(ident))
    except (OSError, OverflowError):
        return None


def frame_name(frame: FrameType) -> str:
    code = frame.f_code
    module = frame.f_globals.get("__name__", "?")
    return f"{module}.{getattr(code, 'co_qualname', code.co_name)}"


def stack_of(frame: FrameType | None) -> tuple[str, ...]:
    """The frames from outermost to innermost."""
    names: list[str] = []
    while frame is not None:
        names.append(frame_name(frame))
        frame = frame.f_back
    names.reverse()
    if len(names) > MAX_DEPTH:
        names = ["...", *names[-MAX_DEPTH:]]
    return tuple(names)


@dataclass
class Profile:
    seconds: float
    interval_seconds: float
    samples: int = 0
    stacks: Counter[tuple[str, ...]] = field(default_factory=Counter)
    """(thread name, frames...) -> CPU nanoseconds."""

    def to_json(self, top: int = 30) -> dict[str, Any]:
        own: Counter[str] = Counter()
        total: Counter[str] = Counter()
        for stack, ns in self.stacks.items():
            frames = stack[1:]
            if frames:
                own[frames[-1]] += ns
            for name in set(frames):
                total[name] += ns
        cpu_ns = sum(self.stacks.values())

        def ranked(counter: Counter[str]) -> list[dict[str, Any]]:
            return [{"function": name, "cpu_seconds": ns / 1e9} for name, ns in counter.most_common(top)]

        return {"seconds": self.seconds, "interval_seconds": self.interval_seconds, "samples": self.samples,
                "cpu_seconds": cpu_ns / 1e9,
                "collapsed": {";".join(stack): ns // 1000 for stack, ns in self.stacks.most_common() if ns >= 1000},
                "top_self": ranked(own), "top_total": ranked(total)}


def take(seconds: float, interval: float = DEFAULT_INTERVAL_SECONDS, *,
         clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> Profile:
    """Samples every thread but this one for ``seconds``; raises :class:`ProfileBusy` while another runs and
    ValueError for a window or interval out of range."""
    if not 0 < seconds <= MAX_SECONDS:
        raise ValueError(f"seconds: must be in (0, {MAX_SECONDS:g}], got {seconds!r}")
    if not MIN_INTERVAL_SECONDS <= interval <= seconds:
        raise ValueError(f"interval: must be in [{MIN_INTERVAL_SECONDS:g}, seconds], got {interval!r}")
    if not _busy.acquire(blocking=False):
        raise ProfileBusy("a profile is already running")
    try:
        return _sample(seconds, interval, clock, sleep)
    finally:
        _busy.release()


def _sample(seconds: float, interval: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> Profile:
    profile = Profile(seconds, interval)
    me = threading.get_ident()
    last: dict[int, int] = {}
    deadline = clock() + seconds
    while True:
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            cpu = thread_cpu_ns(ident)
            if cpu is None:
                continue
            before = last.get(ident)
            last[ident] = cpu
            if before is not None and cpu > before:
                profile.stacks[(names.get(ident, f"thread-{ident}"), *stack_of(frame))] += cpu - before
        profile.samples += 1
        remaining = deadline - clock()
        if remaining <= 0:
            return profile
        sleep(min(interval, remaining))
