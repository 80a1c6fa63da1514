"""Event-driven pressure: PSI triggers (Documentation/accounting/psi.rst) on the node and on the kubepods or BE
cgroups, polled on one thread, wake the eviction strategies for an immediate round.

A trigger is ``<scope> <resource> <some|full> <stall_us> <window_us>``: it fires when tasks of the scope stall
on the resource for ``stall_us`` within any ``window_us``.  Memory triggers wake memoryevict, CPU triggers
cpuevict.  A wake only asks for a round sooner than the interval would give it: the strategy decides on its
thresholds as in any round, and its cooldown and the evictor's limits hold (the manager also spaces woken rounds
by ``qos.pressureWakeDebounceSeconds``, so a storm of firings is one round).

The kernel checks a trigger's window against the opener's CAP_SYS_RESOURCE: without it the window must be a
multiple of 2 s and the kernel evaluates the trigger every 2 s only.  Such a koordlet widens each window to the
next multiple of 2 s (the stall scaled with it, the same share of the window) and says so in the trigger's
status, rather than refusing to start."""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from koordlet import native
from koordlet.component import Worker
from koordlet.errors import ConfigError, KoordletError
from koordlet.qosmanager.plugins.cpuevict import NAME as CPUEVICT
from koordlet.qosmanager.plugins.memoryevict import NAME as MEMORYEVICT
from koordlet.system.kubepaths import CgroupDriver, KubeQoS, kubepods_dir, qos_dir, under_parent
from koordlet.system.layout import CgroupLayout

log = logging.getLogger(__name__)

SCOPES = ("node", "kubepods", "besteffort")
WAKES = {"memory": (MEMORYEVICT,), "cpu": (CPUEVICT,)}
"""Which strategies a trigger on each resource wakes."""
WINDOW_MIN_US, WINDOW_MAX_US = 500_000, 10_000_000
"""The kernel's bounds on a trigger window."""
UNPRIVILEGED_WINDOW_US = 2_000_000
"""Without CAP_SYS_RESOURCE a window must be a multiple of this."""
CAP_SYS_RESOURCE = 24

RETRY_SECONDS = 10.0
"""How often a trigger that could not be registered (its cgroup not there yet) is tried again."""
POLL_MS = 1000
"""The longest the thread sleeps in poll(): a stop request is seen within it."""


@dataclass(frozen=True)
class TriggerSpec:
    """One configured trigger."""

    scope: str
    resource: str
    kind: str
    stall_us: int
    window_us: int
    note: str = ""
    """Why the window differs from the configured one (widened without CAP_SYS_RESOURCE)."""

    @property
    def name(self) -> str:
        return f"{self.scope}-{self.resource}-{self.kind}"

    @property
    def text(self) -> str:
        """What is written to the pressure file."""
        return f"{self.kind} {self.stall_us} {self.window_us}"

    @property
    def wakes(self) -> tuple[str, ...]:
        return WAKES[self.resource]

    def widened(self) -> TriggerSpec:
        """This trigger as an opener without CAP_SYS_RESOURCE may register it."""
        if self.window_us % UNPRIVILEGED_WINDOW_US == 0:
            return self
        window = -(-self.window_us // UNPRIVILEGED_WINDOW_US) * UNPRIVILEGED_WINDOW_US
        stall = self.stall_us * window // self.window_us
        return replace(self, stall_us=stall, window_us=window,
                       note=f"configured {self.text}; widened: no CAP_SYS_RESOURCE, so the window must be a multiple "
                            "of 2 s and the kernel checks the trigger every 2 s")


def parse_triggers(value: str) -> list[TriggerSpec]:
    """``qos.pressureTriggers``: triggers separated by ``;``; ConfigError naming the first bad one."""
    specs: list[TriggerSpec] = []
    for item in (part.strip() for part in value.split(";")):
        if not item:
            continue
        fields = item.split()
        if len(fields) != 5:
            raise ConfigError(f"qos.pressureTriggers: {item!r} must be '<scope> <resource> <some|full> <stall_us> "
                              "<window_us>'")
        scope, resource, kind, stall, window = fields
        problems = []
        if scope not in SCOPES:
            problems.append(f"scope {scope!r} is none of {', '.join(SCOPES)}")
        if resource not in WAKES:
            problems.append(f"resource {resource!r} is none of {', '.join(WAKES)}")
        if kind not in ("some", "full"):
            problems.append(f"{kind!r} is neither some nor full")
        if not (stall.isdigit() and window.isdigit()):
            problems.append("stall and window must be microseconds (integers)")
        elif not WINDOW_MIN_US <= int(window) <= WINDOW_MAX_US:
            problems.append(f"window {window} us is outside the kernel's {WINDOW_MIN_US}-{WINDOW_MAX_US}")
        elif not 0 < int(stall) <= int(window):
            problems.append(f"stall {stall} us must be positive and at most the window")
        if problems:
            raise ConfigError(f"qos.pressureTriggers: {item!r}: {'; '.join(problems)}")
        spec = TriggerSpec(scope, resource, kind, int(stall), int(window))
        if any(s.name == spec.name for s in specs):
            raise ConfigError(f"qos.pressureTriggers: {spec.name} given twice")
        specs.append(spec)
    return specs


def has_cap_sys_resource(status_path: str = "/proc/self/status") -> bool:
    """Whether this process's effective capabilities hold CAP_SYS_RESOURCE (the kernel's check on a trigger)."""
    try:
        with open(status_path, encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError):
        pass
    return False


def pressure_path(layout: CgroupLayout, driver: CgroupDriver, kube_parent: str, spec: TriggerSpec) -> str:
    """The PSI file a trigger is registered on: ``/proc/pressure/<resource>`` for the node, else the scope's
    cgroup in the unified hierarchy (hybrid hosts have per-cgroup PSI there without controllers)."""
    if spec.scope == "node":
        return layout.paths.proc("pressure", spec.resource)
    rel = kubepods_dir(driver) if spec.scope == "kubepods" else qos_dir(driver, KubeQoS.BESTEFFORT)
    return f"{layout.unified_dir(under_parent(kube_parent, rel))}/{spec.resource}.pressure"


class WakeSink(Protocol):
    def wake(self, strategies: Sequence[str], cause: str) -> None: ...


class PressureMetrics(Protocol):
    def psi_trigger_fired(self, trigger: str, at: float) -> None: ...


class NullPressureMetrics:
    def psi_trigger_fired(self, trigger: str, at: float) -> None:
        return None


@dataclass
class TriggerState:
    """A trigger as the watcher holds it (``koordctl status``)."""

    spec: TriggerSpec
    path: str
    trigger: native.PsiTrigger | None = None
    error: str = ""
    fired: int = 0
    last_fired: float | None = None
    """Wall-clock time of the last firing."""
    retry_at: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.spec.name, "path": self.path, "trigger": self.spec.text, "wakes": list(self.spec.wakes),
                "registered": self.trigger is not None, "error": self.error, "note": self.spec.note,
                "fired": self.fired, "last_fired": self.last_fired}


class PressureWatcher:
    """A daemon component: registers the triggers and polls them all on one thread; a firing wakes the
    trigger's strategies through ``sink``.  A trigger whose cgroup is missing (kubepods not made yet) or goes
    away is registered again every ``RETRY_SECONDS``; one whose path could not be worked out (``paths`` holds
    the error: no unified hierarchy on a v1-only host) stays unregistered, its status saying why."""

    name = "pressurewatcher"

    def __init__(self, specs: Sequence[TriggerSpec], paths: Mapping[str, str | Exception], sink: WakeSink,
                 metrics: PressureMetrics | None = None, clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 poll: Callable[[Sequence[native.PsiTrigger], int], native.PsiPoll] = native.psi_poll,
                 open_trigger: Callable[[str, str], native.PsiTrigger] = native.PsiTrigger) -> None:
        self._states = [TriggerState(spec, p) if isinstance(p := paths[spec.name], str)
                        else TriggerState(spec, "", error=f"no pressure file: {p}", retry_at=float("inf"))
                        for spec in specs]
        self._sink = sink
        self._metrics = metrics or NullPressureMetrics()
        self._clock = clock
        self._monotonic = monotonic
        self._poll = poll
        self._open = open_trigger
        self._lock = threading.Lock()
        self._worker = Worker("koordlet-pressure")

    def status(self) -> list[dict[str, Any]]:
        with self._lock:
            return [state.to_json() for state in self._states]

    def register(self) -> None:
        """Registers the triggers not registered yet whose retry time has come."""
        now = self._monotonic()
        for state in self._states:
            if state.trigger is not None or now < state.retry_at:
                continue
            try:
                trigger = self._open(state.path, state.spec.text)
            except (OSError, KoordletError) as exc:
                error = f"{exc}" if getattr(exc, "errno", None) != errno.ENOENT else f"{state.path} missing"
                if error != state.error:  # once per streak of the same refusal, not every retry
                    log.warning("PSI trigger not registered; retrying", extra={"trigger": state.spec.name,
                                                                              "error": error})
                with self._lock:
                    state.error, state.retry_at = error, now + RETRY_SECONDS
                continue
            with self._lock:
                state.trigger, state.error = trigger, ""
            log.info("PSI trigger registered", extra={"trigger": state.spec.name, "path": state.path,
                                                      "text": state.spec.text})

    def poll_once(self, timeout_ms: int) -> list[str]:
        """One poll of the registered triggers (sleeping ``timeout_ms`` when none is); returns the names of
        the triggers that fired, after waking their strategies."""
        self.register()
        live = {id(s.trigger): s for s in self._states if s.trigger is not None}
        if not live:
            self._worker.stopping.wait(timeout_ms / 1000)
            return []
        result = self._poll([s.trigger for s in live.values() if s.trigger is not None], timeout_ms)
        for trigger in result.broken:
            state = live[id(trigger)]
            trigger.close()
            with self._lock:
                state.trigger, state.error = None, f"{state.path} went away (cgroup removed); registering again"
                state.retry_at = self._monotonic() + RETRY_SECONDS
            log.warning("PSI trigger broke", extra={"trigger": state.spec.name, "path": state.path})
        fired = []
        now = self._clock()
        for trigger in result.fired:
            state = live[id(trigger)]
            with self._lock:
                state.fired += 1
                state.last_fired = now
            self._metrics.psi_trigger_fired(state.spec.name, now)
            fired.append(state)
        # One wake per strategy, naming every trigger that fired for it.
        wakes: dict[str, list[str]] = {}
        for state in fired:
            for strategy in state.spec.wakes:
                wakes.setdefault(strategy, []).append(state.spec.name)
        for strategy, names in wakes.items():
            self._sink.wake([strategy], "psi " + ",".join(names))
        return [state.spec.name for state in fired]

    def close(self) -> None:
        with self._lock:
            for state in self._states:
                if state.trigger is not None:
                    state.trigger.close()
                    state.trigger = None

    # --------------------------------------------------------------------------------- component

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        self.register()
        log.info("pressure watcher starting", extra={"triggers": [s.to_json() for s in self._states]})

        def loop() -> None:
            try:
                while not self._worker.stopping.is_set():
                    self.poll_once(POLL_MS)
            except BaseException as exc:
                on_failure(exc)
            finally:
                self.close()

        self._worker.start(loop)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stop(timeout_seconds)
