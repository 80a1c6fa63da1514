"""Shadow mode's views of the writers a strategy holds besides the cgroup executor and the evictor (see
:mod:`koordlet.qosmanager.shadow`): each is the writer itself in an active round, and in a shadow round decides as
the writer would, records the intention (audit log, counter, the round's decision) and writes nothing."""

from __future__ import annotations

import errno
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from koordlet.resourceexecutor import Outcome, Result
from koordlet.resourceexecutor.netqos import NetQoS, NetQoSPlan, plan_text
from koordlet.resourceexecutor.sysctl import FEATURE_KEY, FEATURES_RESOURCE, SysctlExecutor, SysctlUpdate
from koordlet.system.sysfiles import SysFile, check_feature_name


class ShadowRound(Protocol):
    """What a view needs of its strategy's writers (:class:`~koordlet.qosmanager.shadow.StrategyWriters`)."""

    strategy: str
    shadow: bool
    """Whether the round running is a shadow one."""

    def note(self, sentences: Iterable[str]) -> None:
        """Adds "would set ..." sentences to the round's decision."""

    def record_intended(self, path: str, kind: str, old: str | None, new: str, owner: str) -> None:
        """Audits and counts one intention."""


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
        owner = f"{self._writers.strategy}: NodeSLO networkQOS through {self._policy}"
        self._writers.record_intended(path, "netqos", None, text, owner)
        self._writers.note([f"would set {path} to {text!r} because {owner}"])


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
            return _read_failed(path, FEATURES_RESOURCE, exc)
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
                return _read_failed(path, resource, exc)
        if believed == text:
            return Result(None, Outcome.SKIPPED_UNCHANGED, path=path, text=text)
        if resource != FEATURES_RESOURCE:
            self._originals.setdefault(key, self._would.get(slot, believed))
        self._would[slot] = text
        self._executor.intended(path, resource, believed, text, owner, self._writers.strategy)
        self._writers.note([f"would set {path} to {text!r} because {owner}"])
        return Result(None, Outcome.INTENDED, path=path, text=text)


def _read_failed(path: str, resource: str, exc: OSError) -> Result:
    if exc.errno in (errno.ENOENT, errno.ENODEV):
        return Result(None, Outcome.UNSUPPORTED, path=path, error=f"{path}: this kernel has no {resource}")
    return Result(None, Outcome.FAILED, path=path, error=f"{path}: {exc.strerror or exc}")
