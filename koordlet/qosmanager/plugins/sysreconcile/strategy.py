"""Node-wide kernel knobs from NodeSLO ``systemStrategy`` (Koordinator ``qosmanager/plugins/sysreconcile``,
gate ``SystemConfig``, off by default).

Every ``reconcile_interval_seconds`` the knobs the NodeSLO sets (:mod:`.calc`: ``min_free_kbytes`` as a
factor of the node's memory, ``watermark_scale_factor``, memcg background reaping, the Alibaba Cloud
Linux / Anolis switches where the kernel has them, and ``schedFeatures`` in debugfs' ``sched_features``) go
through the kernel-knob executor, which writes only what differs and remembers what each knob held before
koordlet's first write.

Unlike Koordinator, which leaves its values behind for good, a knob koordlet changed goes back to the value
found at start when the NodeSLO stops setting it, and every one does when the strategy is switched off
(gate off or interval 0).  The originals outlive a restart (the executor keeps them in the state dir), so a
koordlet restarted with the gate off still restores what the previous run changed, in one round.

A value outside the knob's bounds is rejected with its reason and the value in force stays; a knob the
kernel lacks is reported once as unsupported.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.nodeslo import NodeSLOSpec
from koordlet.config import gates
from koordlet.qosmanager.framework import Action, Decider, Decision, KernelKnobs, Options
from koordlet.qosmanager.plugins.sysreconcile import calc
from koordlet.resourceexecutor.sysctl import FEATURE_KEY, SysctlUpdate
from koordlet.resourceexecutor.update import Outcome, Result
from koordlet.system.sysfiles import SCHED_GROUP_IDENTITY_ENABLED, SysFile

log = logging.getLogger(__name__)

NAME = "sysreconcile"
NO_BACKEND = "no kernel knob writer: the agent started without a SysctlExecutor"


class SystemConfig:
    """The ``sysreconcile`` strategy."""

    name = NAME

    def __init__(self, options: Options) -> None:
        self.options = options
        self._decide = Decider(NAME, log, options.clock)
        self._owned: set[SysFile] = set()
        """Knobs this strategy set in this process: the ones it puts back when unset or switched off."""
        self._owned_features: set[str] = set()
        """The same for scheduler features."""
        self._adopted = False
        """Whether the knobs an earlier run of koordlet changed (the executor's persisted originals) were
        taken over; done on the first round."""
        self._last: tuple[Any, ...] | None = None
        """What the previous round reported (rejections, unsupported and failed knobs): a steady state is
        decided quietly instead of filling the decision history every second."""

    # ------------------------------------------------------------------------------------------ protocol

    def enabled(self, slo: NodeSLOSpec) -> bool:
        if self._switched_on():
            return True
        # Gates are start-up flags, so "switched off" usually means "restarted with the gate off": one round
        # then puts back what the earlier run changed (the manager never calls a strategy that never ran).
        return not self._adopted and any(self._leftovers())

    def interval(self) -> float:
        return self.options.config.reconcile_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        executor = self.options.sysctl
        if executor is None:
            return self._decide(Action.SKIP, NO_BACKEND, reason="no_backend")
        if not self._adopted:
            knobs, features = self._leftovers()
            self._owned.update(knobs)
            self._owned_features.update(features)
            self._adopted = True
        if not enabled or not self._switched_on():
            return self._switch_off(executor)
        return self._reconcile(executor, slo)

    def _switched_on(self) -> bool:
        return gates.enabled(self.options.gates, gates.SYSTEM_CONFIG) and self.interval() > 0

    def _leftovers(self) -> tuple[set[SysFile], set[str]]:
        """The knobs and features an earlier run changed and did not put back.  The group identity switch
        is left out: the group identity runtime hook writes it too, and taking over its value would flip
        the switch at every start."""
        executor = self.options.sysctl
        if executor is None:
            return set(), set()
        originals = executor.restorable()
        knobs = {k for k, _, _ in calc.KNOBS if k.key in originals and k is not SCHED_GROUP_IDENTITY_ENABLED}
        return knobs, {key.removeprefix(FEATURE_KEY) for key in originals if key.startswith(FEATURE_KEY)}

    # ------------------------------------------------------------------------------------------ rounds

    def _reconcile(self, executor: KernelKnobs, slo: NodeSLOSpec) -> Decision:
        memory = self.options.informer.node().memory_total_bytes
        plan = calc.plan(slo.system_strategy, memory)
        tally = _Tally()
        tally.rejected.update({k.key: why for k, why in plan.rejected.items()})
        tally.rejected.update({FEATURE_KEY + n: why for n, why in plan.rejected_features.items()})
        for knob, want in plan.wanted.items():
            self._owned.add(knob)
            tally.add(knob.key, executor.apply(SysctlUpdate(knob, want.value, f"{NAME}: {want.why}")))
        for name, on in plan.features.items():
            self._owned_features.add(name)
            why = f"{NAME}: systemStrategy.schedFeatures.{name}={str(on).lower()}"
            tally.add(FEATURE_KEY + name, executor.apply_feature(name, on, why))
        self._restore(executor, [k for k in plan.unset if k in self._owned],
                      [n for n in self._owned_features if n not in plan.features], "unset in systemStrategy", tally)
        numbers: dict[str, Any] = {"memory_total_bytes": memory,
                                   "wanted": {k.key: w.value for k, w in plan.wanted.items()},
                                   "sched_features": dict(plan.features), **tally.numbers()}
        state = (tuple(sorted(tally.rejected)), tuple(sorted(tally.unsupported)), tuple(sorted(tally.failed)))
        changed, self._last = state != self._last, state
        if tally.rejected and changed:
            log.warning("systemStrategy values rejected; the values in force stay", extra={"rejected": tally.rejected})
        summary = tally.summary() or "kernel knobs as systemStrategy asks"
        if tally.failed and changed:
            return self._decide(Action.ERROR, summary, numbers)
        if tally.rejected and changed:
            return self._decide(Action.INVALID, summary, numbers)
        if tally.unsupported and changed:
            return self._decide(Action.UNSUPPORTED, summary, numbers)
        if tally.written or tally.restored:
            return self._decide(Action.APPLY, summary, numbers)
        return self._decide(Action.NONE, summary, numbers)

    def _switch_off(self, executor: KernelKnobs) -> Decision:
        tally = _Tally()
        self._restore(executor, sorted(self._owned, key=lambda k: k.key), sorted(self._owned_features),
                      "switched off", tally)
        self._last = None
        numbers = {"restored": tally.restored, "failed": tally.failed}
        if tally.failed:
            # The knobs that failed stay owned: a later round (switched on and off again) retries them.
            return self._decide(Action.ERROR, f"restoring kernel knobs failed: {_join(tally.failed)}", numbers)
        if not tally.restored:
            return self._decide(Action.NONE, "switched off; no kernel knob to restore", numbers)
        return self._decide(Action.RECOVER, f"switched off; restored {_join(tally.restored)}", numbers)

    def _restore(self, executor: KernelKnobs, knobs: list[SysFile], features: list[str], why: str,
                 tally: _Tally) -> None:
        owner = f"{NAME}: {why}; restoring the value found at start"
        for knob in knobs:
            original = executor.original(knob)
            if tally.restore(knob.key, original, executor.restore(knob, owner)):
                self._owned.discard(knob)
        originals = executor.restorable()
        for name in features:
            key = FEATURE_KEY + name
            if tally.restore(key, originals.get(key), executor.restore_feature(name, owner)):
                self._owned_features.discard(name)


@dataclass
class _Tally:
    """What one round did, by knob key."""

    written: dict[str, str] = field(default_factory=dict)
    restored: dict[str, str] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)
    unsupported: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def add(self, key: str, result: Result) -> None:
        if result.outcome in (Outcome.WRITTEN, Outcome.INTENDED):  # intended: shadow mode, decided as written
            self.written[key] = result.text or ""
        elif result.outcome is Outcome.UNSUPPORTED:
            self.unsupported[key] = result.error or "unsupported"
        elif result.outcome is Outcome.INVALID:
            self.rejected[key] = f"{result.error}; the value in force stays"
        elif not result.ok:
            self.failed[key] = result.error or result.outcome.value

    def restore(self, key: str, original: str | None, result: Result | None) -> bool:
        """Counts one restore; True when nothing is left to put back for ``key``."""
        if result is None or result.ok:
            if result is not None and original is not None:
                self.restored[key] = original
            return True
        self.add(key, result)
        return result.outcome is Outcome.UNSUPPORTED  # the knob is gone: nothing left to put back

    def numbers(self) -> dict[str, Any]:
        return {"written": self.written, "restored": self.restored, "rejected": self.rejected,
                "unsupported": self.unsupported, "failed": self.failed}

    def summary(self) -> str:
        parts = []
        if self.written:
            parts.append(f"set {_join(self.written)}")
        if self.restored:
            parts.append(f"restored {_join(self.restored)}")
        parts.extend(self.rejected.values())
        if self.unsupported:
            parts.append(f"unsupported here: {', '.join(self.unsupported)}")
        parts.extend(self.failed.values())
        return "; ".join(parts)


def _join(values: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in values.items())
