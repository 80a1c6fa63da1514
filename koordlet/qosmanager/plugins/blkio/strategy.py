"""Block IO QoS reconcile (Koordinator ``qosmanager/plugins/blkio``, gate ``BlkIOReconcile``, off by default).

Every round, for ``beClass.blkioQOS`` the besteffort QoS cgroup gets, per disk of each block, the four
blk-throttle limits (v1 ``blkio.throttle.{read,write}_{bps,iops}_device`` lines ``maj:min value``, v2
``io.max`` keys ``rbps wbps riops wiops``) and the iocost weight (``blkio.cost.weight`` on Anolis,
``io.weight`` on v2; only where the kernel has the file).  A value left out or 0 removes the limit (v1
``maj:min 0``, v2 ``max``) and an absent weight is 100.  For ``cgroupRoot.blkioQOS`` the root cgroup gets
``io.cost.qos`` / ``blkio.cost.qos`` ``maj:min enable=1 ctrl=user rpct rlat wpct wlat``.

Like Koordinator's disk recorder, every disk with a rule in the besteffort throttle files that the
configuration does not name gets its rules removed (the directory is Koordinator's, and this is what makes
a restart forget nothing), as do disks this strategy configured earlier.  ``blkioQOS`` of the LSR, LS and
SYSTEM classes is ignored with a note, as Koordinator does.  Pods annotated ``koordinator.sh/blkioQOS``
(``device``, ``volumegroup`` and ``podvolume`` blocks) get limits in their own cgroups: :mod:`.pods`.

A bad block fails the whole round before any write, with an error naming the field; the values in force
stay.  Switched off (gate or both ``enable`` flags), the strategy removes everything it set and every rule
left in the besteffort throttle files, and turns iocost off on the disks it turned it on for."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.nodeslo import NodeSLOSpec, ResourceQOS
from koordlet.config import gates
from koordlet.errors import KoordletError
from koordlet.isolation.slo import qos_strategy
from koordlet.qosmanager import helpers
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.qosmanager.plugins.blkio import plan, pods
from koordlet.qosmanager.plugins.blkio.devices import BlockDevices
from koordlet.qosmanager.plugins.blkio.plan import COST_QOS, THROTTLES, WEIGHT, DeviceLimits, PlanError, RootCost
from koordlet.qosmanager.plugins.blkio.pods import PodBlkIO
from koordlet.resourceexecutor import CgroupUpdate, Result
from koordlet.system.cgroupfile import CgroupFile
from koordlet.system.resources import BLKIO_WRITE_BPS

log = logging.getLogger(__name__)

NAME = "blkio"
BE_FIELD = "resourceQOSStrategy.beClass.blkioQOS"
ROOT_FIELD = "resourceQOSStrategy.cgroupRoot.blkioQOS"
_IGNORED = (("lsrClass", "lsr_class"), ("lsClass", "ls_class"), ("systemClass", "system_class"))
_V2_KEYS = frozenset({"rbps", "wbps", "riops", "wiops"})

DevNo = tuple[int, int]


def _blkio(cls: ResourceQOS | None) -> Any:
    return None if cls is None else cls.blkio_qos


def number(dev: DevNo) -> str:
    return f"{dev[0]}:{dev[1]}"


@dataclass
class _Round:
    now: float
    updates: list[CgroupUpdate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    cost_listed: set[DevNo] | None = None
    """The disks with iocost on in the root's file, read once a round."""


class BlkIOReconcile:
    """The ``blkio`` strategy."""

    name = NAME

    def __init__(self, options: Options, devices: BlockDevices | None = None) -> None:
        self.options = options
        self.devices = devices or BlockDevices(options.layout.paths.sys_root)
        self._be_applied: dict[DevNo, bool] = {}
        """BE disks given limits -> whether their weight was written too."""
        self._root_applied: set[DevNo] = set()
        self._pods = PodBlkIO(self.devices, options.kubelet_root_dir, options.layout.paths.proc_root)
        self._last_error: str | None = None
        self._decide = Decider(NAME, log, options.clock)

    # ------------------------------------------------------------------------------------------ protocol

    def enabled(self, slo: NodeSLOSpec) -> bool:
        """The gate and ``blkioQOS.enable`` of the BE class or the cgroup root."""
        if not gates.enabled(self.options.gates, gates.BLKIO_RECONCILE):
            return False
        strategy = qos_strategy(slo)
        return any(cfg is not None and cfg.enable is True
                   for cfg in (_blkio(strategy.be_class), _blkio(strategy.cgroup_root))) or (
            pods.annotated(self.options.informer.pods()))

    def interval(self) -> float:
        return self.options.config.reconcile_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        now = self.options.clock()
        be_dir = helpers.be_qos_dir(self.options)
        if not enabled:
            return self._reset(now, be_dir)
        strategy = qos_strategy(slo)
        try:
            limits = plan.class_limits(BE_FIELD, _blkio(strategy.be_class), self.devices)
            root_cfg = _blkio(strategy.cgroup_root)
            costs = plan.root_costs(ROOT_FIELD, root_cfg, self.devices)
        except PlanError as exc:
            return self._rejected(now, str(exc))
        self._last_error = None
        rnd = _Round(now)
        for name, attr in _IGNORED:
            cfg = _blkio(getattr(strategy, attr))
            if cfg is not None and cfg.enable is True and cfg.blocks:
                rnd.notes.append(f"resourceQOSStrategy.{name}.blkioQOS ignored: Koordinator applies block IO QoS "
                                 "to the BE class and the cgroup root only")
        # The root first: a disk's iocost must be on before its besteffort weight is written.
        root_removed = self._plan_root(rnd, costs, root_cfg is not None and root_cfg.enable is True)
        be_removed = self._plan_be(rnd, be_dir, limits, self._iocost_disks(rnd, costs, root_removed))
        pod_report = self._pods.plan(self, rnd, self.options.informer.pods())
        results = self._apply(rnd)
        return self._reconciled(rnd, be_dir, limits, be_removed, costs, root_removed, results, pod_report)

    # ------------------------------------------------------------------------------------------ pods.Queue

    def listed(self, rnd: _Round, rel_dir: str) -> set[DevNo]:
        return self._listed_throttles(rnd, rel_dir)

    def queue(self, rnd: _Round, key: CgroupFile, rel_dir: str, dev: DevNo, value: int, owner: str) -> None:
        self._queue(rnd, key, rel_dir, dev, value, owner)

    def forget(self, rel_dir: str, keys: Iterable[CgroupFile], disks: Iterable[DevNo]) -> None:
        self._forget_files(rel_dir, tuple(keys), disks)

    def note(self, rnd: _Round, text: str) -> None:
        rnd.notes.append(text)

    def directory(self, rel_dir: str) -> str:
        return BLKIO_WRITE_BPS.directory(self.options.layout, rel_dir)

    # ------------------------------------------------------------------------------------------ besteffort

    def _plan_be(self, rnd: _Round, be_dir: str, limits: dict[Any, DeviceLimits], iocost_on: set[DevNo]) -> list[str]:
        """Queues the besteffort updates; returns the disks whose rules are removed.  A per-disk weight is
        written only for the disks in ``iocost_on``."""
        why = self._unusable(be_dir)
        if why is not None:
            if limits:
                rnd.notes.append(f"BE limits not applied: {why}")
            if self._be_applied:
                # The cgroup (and its rules) went: a new one of the same name must get every line again,
                # although the executor remembers writing the same text to the same path.
                self._forget_files(be_dir, (*(k for k, _ in THROTTLES), WEIGHT))
                self._be_applied.clear()
            return []
        weight_ok = bool(WEIGHT.supported(self.options.layout, be_dir))
        if not weight_ok and any(lim.weight_percent != plan.DEFAULT_WEIGHT_PERCENT for lim in limits.values()):
            rnd.notes.append(f"ioWeightPercent not applied: {self._why_unsupported(WEIGHT, be_dir)}")
        wanted: dict[DevNo, DeviceLimits] = {(lim.device.major, lim.device.minor): lim for lim in limits.values()}
        listed = self._listed_throttles(rnd, be_dir)
        removed = sorted((listed | set(self._be_applied)) - set(wanted))
        owner = f"{NAME}: {BE_FIELD}"
        self._forget_files(be_dir, (*(k for k, _ in THROTTLES), WEIGHT), removed)
        self._queue_removals(rnd, be_dir, removed, weight_ok, f"{owner}: disk {{disk}} no longer configured")
        for dev in removed:
            self._be_applied.pop(dev, None)
        for dev, lim in wanted.items():
            for key, attr in THROTTLES:
                self._queue(rnd, key, be_dir, dev, getattr(lim, attr), f"{owner}.{lim.block}")
            weighted = weight_ok and dev in iocost_on
            if weighted:
                self._queue(rnd, WEIGHT, be_dir, dev, lim.weight_percent, f"{owner}.{lim.block}")
            elif weight_ok and lim.weight_percent != plan.DEFAULT_WEIGHT_PERCENT:
                rnd.notes.append(f"ioWeightPercent of disk {number(dev)} ({lim.block}) not applied: iocost is off "
                                 f"for it (enable it with {ROOT_FIELD})")
            self._be_applied[dev] = weighted
        return [number(d) for d in removed]

    def _iocost_disks(self, rnd: _Round, costs: dict[Any, RootCost], root_removed: list[str]) -> set[DevNo]:
        """Disks whose iocost is on in the root and stays on, or is turned on this round.  The kernel takes a
        per-disk ``io.weight`` / ``blkio.cost.weight`` line only for those (EOPNOTSUPP otherwise, as the v2
        guest of tests/vm showed), so the weight of any other disk is left alone."""
        on = {(cost.device.major, cost.device.minor) for cost in costs.values()}
        if COST_QOS.supported(self.options.layout, ""):
            on |= self._listed_cost(rnd)
        return on - {dev for dev in map(_devno, root_removed) if dev is not None}

    def _unusable(self, be_dir: str) -> str | None:
        descriptor = BLKIO_WRITE_BPS
        try:
            directory = descriptor.directory(self.options.layout, be_dir)
        except KoordletError as exc:
            return str(exc)
        if not os.path.isdir(directory):
            return f"besteffort cgroup {directory} does not exist"
        support = descriptor.supported(self.options.layout, be_dir)
        return None if support else support.reason

    def _why_unsupported(self, descriptor: CgroupFile, rel_dir: str) -> str:
        try:
            spec = descriptor.spec_for(self.options.layout)
        except KoordletError as exc:
            return str(exc)
        if spec.anolis_only:
            return f"{spec.name} exists on Anolis kernels only"
        return descriptor.supported(self.options.layout, rel_dir).reason

    def _listed_throttles(self, rnd: _Round, be_dir: str) -> set[DevNo]:
        """Disks with a limit in the besteffort throttle files (v1: a non-zero line; v2: an io.max line
        with a key other than max)."""
        listed: set[DevNo] = set()
        seen_paths: set[str] = set()
        for key, _ in THROTTLES:
            try:
                path = self.options.reader.path(key, be_dir)
                if path in seen_paths:  # v2: the four keys share io.max
                    continue
                seen_paths.add(path)
                text = self.options.reader.read(key, be_dir)
            except (KoordletError, OSError) as exc:
                rnd.notes.append(f"cannot read the {key.key} rules of {be_dir}: {exc}")
                continue
            listed |= parse_limited(str(text))
        return listed

    # ------------------------------------------------------------------------------------------ root

    def _plan_root(self, rnd: _Round, costs: dict[Any, RootCost], owned: bool) -> list[str]:
        """Queues the root iocost updates; returns the disks iocost is turned off for.  Disks listed
        enabled in the root file are only turned off while ``cgroupRoot.blkioQOS`` is enabled: that is
        when the NodeSLO claims the root's iocost, as Koordinator's recorder assumes."""
        if not costs and not self._root_applied and not owned:
            return []
        support = COST_QOS.supported(self.options.layout, "")
        if not support:
            if costs:
                rnd.notes.append(f"cgroupRoot iocost not applied: {self._why_unsupported(COST_QOS, '')}")
            self._root_applied.clear()
            return []
        if any(cost.user_model for cost in costs.values()):
            rnd.notes.append("enableUserModel: io.cost.model not written (no registry resource for it)")
        wanted = {(c.device.major, c.device.minor): c for c in costs.values()}
        stale = set(self._root_applied)
        if owned:
            stale |= self._listed_cost(rnd)
        removed = sorted(stale - set(wanted))
        self._forget_files("", (COST_QOS,), removed)
        for dev in removed:
            self._queue(rnd, COST_QOS, "", dev, plan.cost_off(dev), f"{NAME}: {ROOT_FIELD}: disk {number(dev)} "
                        "no longer configured")
            self._root_applied.discard(dev)
        for dev, cost in wanted.items():
            self._queue(rnd, COST_QOS, "", dev, cost.qos, f"{NAME}: {ROOT_FIELD}.{cost.block}")
            self._root_applied.add(dev)
        return [number(d) for d in removed]

    def _listed_cost(self, rnd: _Round) -> set[DevNo]:
        if rnd.cost_listed is not None:
            return rnd.cost_listed
        try:
            text = str(self.options.reader.read(COST_QOS, ""))
        except (KoordletError, OSError) as exc:
            rnd.notes.append(f"cannot read the root iocost QoS: {exc}")
            return set()
        listed: set[DevNo] = set()
        for line in text.splitlines():
            tokens = line.split()
            dev = _devno(tokens[0]) if tokens else None
            if dev is not None and "enable=1" in tokens[1:]:
                listed.add(dev)
        rnd.cost_listed = listed
        return listed

    # ------------------------------------------------------------------------------------------ writing

    def _queue_removals(self, rnd: _Round, be_dir: str, removed: Iterable[DevNo], weight_ok: bool, owner: str
                        ) -> None:
        """Queues the removal of every rule of the ``removed`` disks in the besteffort files, and the
        default weight back where one was set; ``owner`` names the disk as ``{disk}``."""
        for dev in removed:
            why = owner.format(disk=number(dev))
            for key, _ in THROTTLES:
                self._queue(rnd, key, be_dir, dev, 0, why)
            if self._be_applied.get(dev) and weight_ok:
                self._queue(rnd, WEIGHT, be_dir, dev, plan.DEFAULT_WEIGHT_PERCENT, why)

    @staticmethod
    def _queue(rnd: _Round, key: CgroupFile, rel_dir: str, dev: DevNo, value: int | str, owner: str) -> None:
        """An int is a per-device value (``maj:min value``); a str is a whole iocost QoS line.  Queued
        every round: the executor keeps each disk's line of a file apart and skips one it wrote less
        than its force-update interval ago."""
        update_value: object = (dev[0], dev[1], value) if isinstance(value, int) else value
        rnd.updates.append(CgroupUpdate(key, rel_dir, update_value, owner))

    def _apply(self, rnd: _Round) -> list[Result]:
        return self.options.executor.apply(rnd.updates) if rnd.updates else []

    def _forget_files(self, rel_dir: str, keys: Iterable[CgroupFile], disks: Iterable[DevNo] | None = None) -> None:
        """A removal must reach the kernel even when the executor wrote the same ``maj:min 0`` line to
        that file a moment ago: the rule being removed was set behind its back since.  With ``disks``
        only those disks' lines are forgotten (the executor keeps a per-device file's lines apart, as
        ``<file>/<maj:min>``), so the other disks' lines of the file are not rewritten for nothing."""
        wanted = list(disks) if disks is not None else None
        if wanted == []:
            return
        for key in keys:
            try:
                path = self.options.reader.path(key, rel_dir)
            except KoordletError:
                continue
            for target in ([path] if wanted is None else [f"{path}/{number(dev)}" for dev in wanted]):
                self.options.executor.forget(target)

    # ------------------------------------------------------------------------------------------ reset

    def _reset(self, now: float, be_dir: str) -> Decision:
        """Switched off: every limit in the besteffort files and every one set goes, iocost goes off on
        the disks it was turned on for."""
        rnd = _Round(now)
        be_removed: list[str] = []
        if self._unusable(be_dir) is None:
            weight_ok = bool(WEIGHT.supported(self.options.layout, be_dir))
            removed = sorted(self._listed_throttles(rnd, be_dir) | set(self._be_applied))
            self._forget_files(be_dir, (*(k for k, _ in THROTTLES), WEIGHT))
            self._queue_removals(rnd, be_dir, removed, weight_ok, f"{NAME}: switched off, reset disk {{disk}}")
            be_removed = [number(d) for d in removed]
        self._pods.reset(self, rnd)
        root_removed = sorted(self._root_applied)
        if root_removed and COST_QOS.supported(self.options.layout, ""):
            self._forget_files("", (COST_QOS,))
            for dev in root_removed:
                self._queue(rnd, COST_QOS, "", dev, plan.cost_off(dev),
                            f"{NAME}: switched off, iocost off on disk {number(dev)}")
        results = self._apply(rnd)
        self._be_applied.clear()
        self._root_applied.clear()
        counts = helpers.write_outcomes(results)
        numbers = {"be_dir": be_dir, "be_removed": be_removed, "root_removed": [number(d) for d in root_removed],
                   "updates": len(rnd.updates), **counts, "problems": helpers.write_problems(results),
                   "notes": rnd.notes}
        if not rnd.updates:
            return self._decide(Action.NONE, "blkio QoS off: no limit of ours left to remove", numbers, at=now)
        summary = (f"blkio QoS off: removed the limits of {_disks(len(be_removed))} in {be_dir}"
                   f"{f', iocost off on {_disks(len(root_removed))}' if root_removed else ''}: "
                   f"{helpers.writes_made(counts)} writes{helpers.write_tail(counts)}")
        return self._decide(Action.RECOVER, summary, numbers, at=now)

    # ------------------------------------------------------------------------------------------ decisions

    def _rejected(self, now: float, error: str) -> Decision:
        if error != self._last_error:
            self._last_error = error
            log.warning("blkio QoS configuration rejected, the values in force stay", extra={"error": error})
        in_force = {number(d): ("with weight" if w else "throttles only") for d, w in self._be_applied.items()}
        return self._decide(Action.ERROR, f"blkio QoS not changed: {error}",
                            {"error": error, "be_in_force": in_force,
                             "root_in_force": [number(d) for d in sorted(self._root_applied)]}, at=now)

    def _reconciled(self, rnd: _Round, be_dir: str, limits: dict[Any, DeviceLimits], be_removed: list[str],
                costs: dict[Any, RootCost], root_removed: list[str], results: list[Result],
                pod_report: dict[str, Any] | None = None) -> Decision:
        counts = helpers.write_outcomes(results)
        be = {lim.device.number: lim.numbers() for lim in sorted(limits.values(), key=lambda x: x.device)}
        root = {c.device.number: c.qos for c in sorted(costs.values(), key=lambda x: x.device)}
        parts = [f"BE {be_dir}: " + (", ".join(_describe(lim) for lim in sorted(limits.values(),
                                                                                  key=lambda x: x.device))
                                     or "no limits")]
        if be_removed:
            parts.append(f"limits removed on {', '.join(be_removed)}")
        if root:
            parts.append(f"root iocost on {', '.join(root)}")
        if root_removed:
            parts.append(f"root iocost off on {', '.join(root_removed)}")
        if pod_report:
            parts.append(f"{len(pod_report)} annotated pods")
        parts.append(f"{helpers.writes_made(counts)} writes{helpers.write_tail(counts)}")
        parts += rnd.notes
        numbers = {"be_dir": be_dir, "be": be, "be_removed": be_removed, "root": root, "root_removed": root_removed,
                   "updates": len(rnd.updates), **counts,
                   "problems": helpers.write_problems(results), "notes": rnd.notes, "pods": pod_report or {}}
        acted = helpers.writes_made(counts)
        return self._decide(Action.RECONCILE if acted else Action.NONE, "blkio: " + "; ".join(parts), numbers,
                            at=rnd.now)


# ------------------------------------------------------------------------------------------ file parsing


def parse_limited(text: str) -> set[DevNo]:
    """Disks with a limit in a v1 throttle file (``maj:min value``, value not 0) or in ``io.max``
    (``maj:min rbps=.. wbps=.. riops=.. wiops=..``, some value not ``max``)."""
    listed: set[DevNo] = set()
    for line in text.splitlines():
        tokens = line.split()
        dev = _devno(tokens[0]) if tokens else None
        if dev is None:
            continue
        for token in tokens[1:]:
            key, sep, value = token.partition("=")
            limited = (key in _V2_KEYS and value != "max") if sep else token != "0"
            if limited:
                listed.add(dev)
    return listed


def _devno(token: str) -> DevNo | None:
    major, sep, minor = token.partition(":")
    if not sep or not major.isdigit() or not minor.isdigit():
        return None
    return int(major), int(minor)


def _disks(count: int) -> str:
    return f"{count} disk{'' if count == 1 else 's'}"


def _describe(lim: DeviceLimits) -> str:
    pieces = [f"{short}={getattr(lim, attr)}" for short, attr in
              (("rbps", "read_bps"), ("wbps", "write_bps"), ("riops", "read_iops"), ("wiops", "write_iops"))
              if getattr(lim, attr)]
    if lim.weight_percent != plan.DEFAULT_WEIGHT_PERCENT:
        pieces.append(f"weight={lim.weight_percent}%")
    return f"{lim.device.number} ({lim.device.name}) {' '.join(pieces) or 'no limit'}"



