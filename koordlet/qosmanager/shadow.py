"""Shadow mode: a strategy decides exactly as it would, and nothing is written or evicted.

An operator deciding whether to let koordlet change a production node runs it in shadow mode first (for every
strategy, or for some) and reads, per pod, what would have happened: every intended cgroup write and eviction
goes to the audit log marked ``intended``, to ``koordlet_shadow_intended_total{strategy, action}``, and to the
strategy's decision (``koordctl qos``: "would set ... because ...").

:class:`~koordlet.shadowmodes.ShadowModes` holds which strategies are in shadow mode: the configured default
and per-strategy overrides, changed at run time through the debug API (``koordctl shadow``).  The manager reads
it at the start of every round, so a switch takes effect in the strategy's next round, with no restart.

Each strategy gets its own :class:`StrategyWriters`: the cgroup executor and the evictor as the strategy sees
them.  In a shadow round the executor is asked what it *would* write (:meth:`ResourceExecutor.intend`) and the
evictor records the eviction without launching it (a pod so "evicted" is pending, as after a real eviction, so
the next rounds decide as they would have).  Kernel knobs (sysreconcile) go through :class:`ShadowSysctl` the
same way, network QoS plans (netqos) through :class:`ShadowNetQoS`, resctrl groups through :class:`ShadowResctrl`
and core-scheduling cookies (coresched) through :class:`ShadowCoreSched` and :class:`ShadowCookies`.  A strategy
holds no writer but these views, so in shadow mode none can write.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol, TypeVar

from koordlet.isolation.coresched.cookies import CookieBook
from koordlet.isolation.coresched.shadow import ShadowCookies, ShadowCoreSched
from koordlet.qosmanager.framework import Evictor, Executor, Options, Reader
from koordlet.resourceexecutor import CgroupUpdate, Outcome, Result
from koordlet.resourceexecutor.netqos import NetQoS
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.resourceexecutor.shadowviews import Resettable, ShadowNetQoS, ShadowResctrl, ShadowSysctl
from koordlet.resourceexecutor.sysctl import SysctlExecutor
from koordlet.shadowmodes import ShadowModes
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.cgroupfile import CgroupFile, FileKind
from koordlet.system.validators import parse_cpulist

MAX_INTENDED: Final = 256
"""Intentions a decision lists at most (a cgreconcile round over 1,000 containers intends thousands)."""
MAX_WOULD_HOLD: Final = 20_000
"""Files whose would-be value a strategy keeps at most (those of pods long gone are dropped with the rest)."""
_V = TypeVar("_V", bound=Resettable)
_READ_BACK: Final = (FileKind.INT, FileKind.CPU_MAX, FileKind.CPULIST)
"""Files the reader decodes to one value, which a would-be value stands in for (not per-device files)."""


class IntendingExecutor(Executor, Protocol):
    """The cgroup executor, which can also say what it would write (:class:`ResourceExecutor`)."""

    def intend(self, updates: Iterable[CgroupUpdate], strategy: str) -> list[Result]:
        ...

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str, strategy: str) -> None:
        ...


class ShadowEvictor(Evictor, Protocol):
    """The evictor, which can also record an eviction as intended (:class:`Evictions`)."""

    def evict(self, pod: PodMeta, reason: str, message: str, shadow: str | None = None) -> bool:
        ...


class StrategyWriters:
    """One strategy's executor, evictor and cgroup reader: active or shadow per round (:meth:`begin_round`), and
    the round's intentions (:attr:`intended`) for its decision.  Implements the framework's ``Executor`` and
    ``Evictor``, and the reader's ``read`` and ``path``.

    A strategy reads back what it set (cpusuppress grows BE's cpuset from the one in force).  In shadow mode the
    reader answers with the value the strategy would have written, so it goes on from there exactly as it would
    have in active mode, rather than starting again from the untouched file every round."""

    def __init__(self, strategy: str, executor: IntendingExecutor, evictor: ShadowEvictor,
                 reader: Reader) -> None:
        self.strategy = strategy
        self._executor = executor
        self._evictor = evictor
        self._reader = reader
        self.shadow = False
        self.intended: list[str] = []
        """What this round would have done, one sentence each ("would set <file> to <value> because <owner>")."""
        self._would_hold: dict[str, Any] = {}
        """File -> the value it would hold had shadow mode written it (as the reader reads it)."""

        self._views: list[Resettable] = []
        """The strategy's views of its other writers (kernel knobs, resctrl, core scheduling), which an active
        round resets."""

    def own(self, view: _V) -> _V:
        """Registers a view of another writer of the strategy's (:mod:`~koordlet.resourceexecutor.shadowviews`),
        reset by every active round; returns it."""
        self._views.append(view)
        return view

    def begin_round(self, shadow: bool) -> None:
        """The mode of the round about to run (kept for all of it, whatever the debug API does meanwhile)."""
        if not shadow:
            self._would_hold.clear()  # active: the files hold what is written
            for view in self._views:
                view.reset()
        self.shadow = shadow
        self.intended = []

    # --------------------------------------------------------------------------------- the executor

    def apply(self, updates: Iterable[CgroupUpdate]) -> list[Result]:
        if not self.shadow:
            return self._executor.apply(updates)
        results = self._executor.intend(updates, self.strategy)
        for index, result in enumerate(results):
            path = result.path
            if path is None:
                continue
            if result.outcome is Outcome.INTENDED:
                if (value := _as_read(result.update)) is not _NOT_READ_BACK:
                    if len(self._would_hold) >= MAX_WOULD_HOLD:
                        self._would_hold.clear()
                    self._would_hold[path] = value
            elif result.outcome is Outcome.SKIPPED_UNCHANGED and path in self._would_hold:
                results[index] = self._back_to_file(result, path)
        self.note(f"would set {r.path} to {r.text!r} because {r.update.owner}"
                   for r in results if r.outcome is Outcome.INTENDED)
        return results

    def _back_to_file(self, result: Result, path: str) -> Result:
        """An unchanged result for a file a shadow round would have set: unchanged indeed when the value is the
        one it would hold (intended again within the force-update window); else the file holds the value the
        strategy goes back to (cpu.idle=0 after 1), a write in active mode, so an intention here."""
        held = self._would_hold[path]
        if held == _as_read(result.update):
            return result
        del self._would_hold[path]  # from now on the file holds what the strategy wants
        update = result.update
        self._executor.record_intended(path, update.resource.key, str(held), result.text or "", update.owner,
                                       self.strategy)
        return Result(update, Outcome.INTENDED, path, result.text)

    def forget(self, path: str | None = None) -> None:
        self._executor.forget(path)

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str) -> None:
        """A shadow round's intention through a writer of the strategy's own (tc, resctrl, core scheduling)."""
        self._executor.record_intended(path, kind, old, new, owner, self.strategy)

    # ---------------------------------------------------------------------------------- the evictor

    def evict(self, pod: PodMeta, reason: str, message: str) -> bool:
        if not self.shadow:
            return self._evictor.evict(pod, reason, message)
        if pod.uid not in self._evictor.pending([pod]):  # a pending pod is not evicted twice, nor noted
            self.note([f"would evict {pod.pod.key} because {reason}: {message}"])
        return self._evictor.evict(pod, reason, message, shadow=self.strategy)

    def pending(self, pods: Iterable[PodMeta]) -> set[str]:
        return self._evictor.pending(pods)

    # ----------------------------------------------------------------------------------- the reader

    def path(self, resource: CgroupFile | str, rel_dir: str) -> str:
        return self._reader.path(resource, rel_dir)

    def read(self, resource: CgroupFile | str, rel_dir: str) -> Any:
        if self.shadow:
            path = self._reader.path(resource, rel_dir)
            if path in self._would_hold:
                return self._would_hold[path]
        return self._reader.read(resource, rel_dir)

    def note(self, sentences: Iterable[str]) -> None:
        room = MAX_INTENDED - len(self.intended)
        if room > 0:
            self.intended.extend(list(sentences)[:room])


_NOT_READ_BACK: Final = object()


def _as_read(update: CgroupUpdate) -> Any:
    """The update's value as :meth:`CgroupReader.read` would give it back (a cpuset as its sorted CPU ids), or
    :data:`_NOT_READ_BACK` for a file the reader does not decode to one value."""
    resource = update.resource
    kinds = {spec.kind for spec in (resource.v1, resource.v2) if spec is not None}
    if not kinds or not kinds <= set(_READ_BACK):  # either version's file may be this host's
        return _NOT_READ_BACK
    canonical = resource.validate(update.value)
    return parse_cpulist(canonical) if FileKind.CPULIST in kinds and isinstance(canonical, str) else canonical


@dataclass
class Shadow:
    """Shadow mode as the QoS manager runs it: the modes, the executor and evictor every strategy's writers go
    through, and those writers (made by :meth:`options_for` as the strategies are built)."""

    modes: ShadowModes
    executor: IntendingExecutor
    evictor: ShadowEvictor
    sysctl: SysctlExecutor | None = None
    """The kernel knob executor strategies' knobs go through (None: none, or they keep the options' own)."""
    resctrl: ResctrlExecutor | None = None
    """The resctrl executor strategies' groups go through (None: none, or they keep the options' own)."""
    writers: dict[str, StrategyWriters] = field(default_factory=dict)

    def options_for(self, strategy: str, options: Options) -> Options:
        """``options`` with ``strategy``'s own executor, evictor and reader, and its views of the other writers."""
        writers = self.writers[strategy] = StrategyWriters(strategy, self.executor, self.evictor, options.reader)
        sysctl = options.sysctl
        if self.sysctl is not None and sysctl is not None:
            sysctl = writers.own(ShadowSysctl(writers, self.sysctl))
        netqos = options.netqos
        if netqos is not None:
            make = netqos

            def netqos_for(policy: str) -> NetQoS:
                return ShadowNetQoS(writers, make(policy), policy)

            netqos = netqos_for
        resctrl = options.resctrl
        if self.resctrl is not None and resctrl is not None:
            resctrl = writers.own(ShadowResctrl(writers, self.resctrl))
        coresched, cookies = options.coresched, options.cookies
        if coresched is not None:
            book = options.cookies if isinstance(options.cookies, CookieBook) else CookieBook(coresched)
            coresched = writers.own(ShadowCoreSched(writers, coresched))
            cookies = writers.own(ShadowCookies(writers, book, coresched))
        return replace(options, executor=writers, evictor=writers, reader=writers, sysctl=sysctl, netqos=netqos,
                       resctrl=resctrl, coresched=coresched, cookies=cookies)
