"""Shadow mode's views of the writers a QoS strategy or a runtime hook holds besides the cgroup executor and the
evictor (see :mod:`koordlet.qosmanager.shadow` and :meth:`koordlet.runtimehooks.deps.HookDeps.for_hook`): each is
the writer itself in an active round, and in a shadow round decides as the writer would, records the intention
(audit log, counter, the strategy's decision) and writes nothing.

A view believes what its shadow rounds would have done (the knob values, groups, cookies they would have set), so
the next shadow rounds decide from there as they would have in active mode.  Its round (:class:`ShadowRound`)
drops those beliefs when it turns active: the files then hold what is written."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

from koordlet.resourceexecutor import Outcome, Result
from koordlet.resourceexecutor.netqos import NetQoS, NetQoSPlan, plan_text
from koordlet.resourceexecutor.resctrl import ResctrlExecutor
from koordlet.resourceexecutor.sysctl import (
    FEATURE_KEY,
    FEATURES_RESOURCE,
    SysctlExecutor,
    SysctlUpdate,
    read_failure,
)
from koordlet.shadowmodes import ShadowModes
from koordlet.system.sysfiles import SysFile, check_feature_name


class ShadowRound(Protocol):
    """What a view needs of its strategy's writers (:class:`~koordlet.qosmanager.shadow.StrategyWriters`) or of its
    runtime hook (:class:`HookShadow`)."""

    @property
    def strategy(self) -> str:
        """Who intends: the strategy, or ``runtimehooks/<hook>``."""

    @property
    def shadow(self) -> bool:
        """Whether the round (or hook call) running is a shadow one."""

    def note(self, sentences: Iterable[str]) -> None:
        """Adds "would set ..." sentences to the round's decision."""

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str) -> None:
        """Audits and counts one intention."""


class Resettable(Protocol):
    def reset(self) -> None:
        """Drops what the view believes its shadow rounds did."""


class IntentRecorder(Protocol):
    """Audits and counts an intention (:meth:`~koordlet.resourceexecutor.executor.ResourceExecutor.record_intended`)."""

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str, strategy: str) -> None:
        ...


class NoIntents:
    """An :class:`IntentRecorder` keeping nothing (hooks built without an executor: unit tests)."""

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str, strategy: str) -> None:
        return None


_V = TypeVar("_V", bound=Resettable)


def intend(writers: ShadowRound, path: str, kind: str, old: str | None, new: str, owner: str) -> None:
    """One intention of a view: audited, counted and said in the round's decision."""
    writers.record_intended(path, kind, old, new, owner)
    writers.note([f"would set {path} to {new!r} because {owner}"])


class HookShadow:
    """A runtime hook's :class:`ShadowRound`: its mode is read from the hooks' shadow modes at every call, so a switch
    (``koordctl shadow``) takes effect at the next request; its intentions are audited and counted as
    ``runtimehooks/<hook>``.  A hook call has no decision to list them in: what its answer would have set is in
    the call's record (``/v1/hooks``), and what it would have done through these views is in the audit log.

    A hook has no rounds: the first call after a switch to active mode drops what the views believed."""

    def __init__(self, hook: str, modes: ShadowModes, recorder: IntentRecorder) -> None:
        self.hook = hook
        self._modes = modes
        self._recorder = recorder
        self._views: list[Resettable] = []
        self._lock = threading.Lock()
        self._was_shadow = False

    @property
    def strategy(self) -> str:
        return f"runtimehooks/{self.hook}"

    @property
    def shadow(self) -> bool:
        shadow = self._modes.shadow(self.hook)
        if shadow != self._was_shadow:
            with self._lock:
                if self._was_shadow and not shadow:
                    for view in self._views:
                        view.reset()
                self._was_shadow = shadow
        return shadow

    def own(self, view: _V) -> _V:
        """Registers ``view`` to be reset when the hook turns active; returns it."""
        self._views.append(view)
        return view

    def note(self, sentences: Iterable[str]) -> None:
        return None

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str) -> None:
        self._recorder.record_intended(path, kind, old, new, owner, self.strategy)


class ShadowNetQoS:
    """A network QoS backend as one strategy sees it: the backend itself in active rounds; in shadow rounds a plan
    is recorded as intended (audit log, counter, decision) and neither tc nor the Terway agent is touched.  The
    strategy keeps the plan it believes in force, so its next rounds decide as they would have."""

    def __init__(self, writers: ShadowRound, backend: NetQoS, policy: str) -> None:
        self._writers = writers
        self._backend = backend
        self._policy = policy

    def apply(self, plan: NetQoSPlan) -> None:
        if not self._writers.shadow:
            self._backend.apply(plan)
            return
        self._intend(f"netqos:{self._policy}:{plan.interface}", plan_text(plan))

    def clear(self) -> None:
        if not self._writers.shadow:
            self._backend.clear()
            return
        self._intend(f"netqos:{self._policy}", "cleared")

    def describe(self) -> dict[str, object]:
        return self._backend.describe()

    def _intend(self, path: str, text: str) -> None:
        intend(self._writers, path, "netqos", None, text,
               f"{self._writers.strategy}: NodeSLO networkQOS through {self._policy}")


class ShadowSysctl:
    """The kernel knob executor as one strategy sees it: itself in active rounds; in shadow rounds each knob and
    scheduler feature is compared with what the strategy would have set (or, before that, the file), and what
    differs is audited and counted as intended and not written.  It keeps the values found before the first
    intention, so a knob no longer wanted "goes back" as it would in active mode."""

    def __init__(self, writers: ShadowRound, executor: SysctlExecutor) -> None:
        self._writers = writers
        self._executor = executor
        self._would: dict[str, str] = {}
        """Knob path, or ``sched_features:<NAME>`` -> the text it would hold."""
        self._originals: dict[str, str] = {}
        """As the executor's originals: knob key (or feature key) -> its text before the first intention."""

    def reset(self) -> None:
        self._would.clear()
        self._originals.clear()

    def path(self, file: SysFile) -> str:
        return self._executor.path(file)

    def read(self, file: SysFile) -> int:
        return self._executor.read(file)

    def sched_features(self) -> dict[str, bool]:
        return self._executor.sched_features()

    def original(self, file: SysFile) -> str | None:
        if self._writers.shadow and file.key in self._originals:
            return self._originals[file.key]
        return self._executor.original(file)

    def restorable(self) -> Mapping[str, str]:
        known = self._executor.restorable()
        return {**known, **self._originals} if self._writers.shadow else known

    def apply(self, update: SysctlUpdate) -> Result:
        if not self._writers.shadow:
            return self._executor.apply(update)
        checked = self._executor.checked(update)
        if isinstance(checked, Result):
            return checked
        path, text = checked
        return self._intend(update.file.key, path, path, update.file.key, text, update.owner,
                            lambda: self._executor.text(update.file))

    def restore(self, file: SysFile, owner: str) -> Result | None:
        if not self._writers.shadow:
            return self._executor.restore(file, owner)
        original = self.original(file)
        if original is None:
            return None
        path = self._executor.path(file)
        result = self._intend(file.key, path, path, file.key, original, owner, lambda: self._executor.text(file))
        if result.ok:
            self._originals.pop(file.key, None)
            self._would.pop(path, None)  # the file holds the original again: nothing written was left
        return result

    def apply_feature(self, name: str, enabled: bool, owner: str) -> Result:
        if not self._writers.shadow:
            return self._executor.apply_feature(name, enabled, owner)
        path = self._executor.features_path()
        try:
            check_feature_name(name)
            current = self._executor.sched_features()
        except ValueError as exc:
            return Result(None, Outcome.INVALID, path=path, error=str(exc))
        except OSError as exc:
            return read_failure(path, FEATURES_RESOURCE, exc)
        if name not in current:
            return Result(None, Outcome.INVALID, path=path,
                          error=f"{path}: this kernel has no scheduler feature {name}")
        key = FEATURE_KEY + name
        held = current[name]
        result = self._intend(key, key, path, FEATURES_RESOURCE, name if enabled else f"NO_{name}", owner,
                              lambda: name if held else f"NO_{name}")
        if result.outcome is Outcome.INTENDED:
            self._originals.setdefault(key, "1" if held else "0")
        return result

    def restore_feature(self, name: str, owner: str) -> Result | None:
        if not self._writers.shadow:
            return self._executor.restore_feature(name, owner)
        key = FEATURE_KEY + name
        original = self.restorable().get(key)
        if original is None:
            return None
        result = self.apply_feature(name, original == "1", owner)
        if result.ok:
            self._originals.pop(key, None)
            self._would.pop(key, None)
        return result

    def _intend(self, key: str, slot: str, path: str, resource: str, text: str, owner: str,
                read: Callable[[], str]) -> Result:
        """``text`` for the knob (``slot``: where its would-be text is kept) as an intention, or unchanged."""
        believed = self._would.get(slot)
        if believed is None:
            try:
                believed = read()
            except OSError as exc:
                return read_failure(path, resource, exc)
        if believed == text:
            return Result(None, Outcome.SKIPPED_UNCHANGED, path=path, text=text)
        if resource != FEATURES_RESOURCE:
            self._originals.setdefault(key, self._would.get(slot, believed))
        self._would[slot] = text
        self._executor.intended(path, resource, believed, text, owner, self._writers.strategy)
        self._writers.note([f"would set {path} to {text!r} because {owner}"])
        return Result(None, Outcome.INTENDED, path=path, text=text)


class ShadowResctrl:
    """The resctrl executor as one strategy or hook sees it: itself in active rounds; in shadow rounds it keeps the
    groups it would have made and removed, their schemata and their tasks, answers as the executor would have (a
    schemata text is written the first time and again once the force-update window passed, a task not listed yet
    is moved), records each intention and touches nothing under the resctrl mount.  Thread-safe: a hook's view
    serves the NRI and hook-server threads."""

    def __init__(self, writers: ShadowRound, executor: ResctrlExecutor) -> None:
        self._writers = writers
        self._executor = executor
        self.root = executor.root
        self._lock = threading.RLock()
        self._made: set[str] = set()
        self._removed: set[str] = set()
        self._schemata: dict[str, tuple[str, float]] = {}
        """Group -> (text, when) it would hold."""
        self._tasks: dict[str, set[int]] = {}
        """Group -> tasks that would have been moved there."""

    def reset(self) -> None:
        with self._lock:
            self._made.clear()
            self._removed.clear()
            self._schemata.clear()
            self._tasks.clear()

    def unsupported_reason(self) -> str | None:
        return self._executor.unsupported_reason()

    def forget(self, group: str | None = None) -> None:
        self._executor.forget(group)
        if self._writers.shadow:
            with self._lock:
                if group is None:
                    self._schemata.clear()
                else:
                    self._schemata.pop(group, None)

    def groups(self) -> list[str]:
        real = self._executor.groups()
        if not self._writers.shadow:
            return real
        with self._lock:
            return sorted((set(real) - self._removed) | self._made)

    def apply_schemata(self, group: str, lines: Sequence[str], owner: str) -> Result:
        if not self._writers.shadow:
            return self._executor.apply_schemata(group, lines, owner)
        planned = self._executor.planned_schemata(group, lines)
        if isinstance(planned, Result):
            return planned
        path, text = planned
        with self._lock:
            now = self._executor.clock()
            held = self._schemata.get(group)
            if held is not None and held[0] == text and now - held[1] < self._executor.force_update_seconds:
                return Result(None, Outcome.SKIPPED_UNCHANGED, path, text, group=group)
            if group and group not in self.groups():
                self._made.add(group)
                self._removed.discard(group)
            old = held[0] if held is not None else self._executor.current_schemata(group)
            self._schemata[group] = (text, now)
        intend(self._writers, path, "resctrl_schemata", old, text, owner)
        return Result(None, Outcome.INTENDED, path, text, group=group)

    def assign_tasks(self, group: str, pids: Iterable[int], owner: str) -> Result:
        if not self._writers.shadow:
            return self._executor.assign_tasks(group, pids, owner)
        wanted = list(dict.fromkeys(pids))
        with self._lock:
            listed = self._tasks.get(group, set()) | (self._executor.listed_tasks(group) if group not in self._made
                                                       else set())
            moving = [p for p in wanted if p not in listed]
            already = tuple(p for p in wanted if p in listed)
            if not moving:
                return Result(None, Outcome.SKIPPED_UNCHANGED, group=group, already=already)
            for other in self._tasks.values():
                other.difference_update(moving)  # a task is in one group at a time
            self._tasks.setdefault(group, set()).update(moving)
        path = self._executor.tasks_path(group)
        intend(self._writers, path, "resctrl_tasks", None, " ".join(map(str, moving)), owner)
        return Result(None, Outcome.INTENDED, path, group=group, applied=tuple(moving), already=already)

    def remove_group(self, group: str, owner: str) -> Result:
        if not self._writers.shadow:
            return self._executor.remove_group(group, owner)
        directory = f"{self.root}/{group}"
        with self._lock:
            if group not in self.groups():
                return Result(None, Outcome.GONE, directory, group=group)
            self._made.discard(group)
            self._removed.add(group)
            self._schemata.pop(group, None)
            self._tasks.pop(group, None)
        intend(self._writers, directory, "resctrl_group", "exists", "rmdir", owner)
        return Result(None, Outcome.INTENDED, directory, group=group)

