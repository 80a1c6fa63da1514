"""The fault run's plan, supervisor and matrix: which component dies when (seeded), how it comes back, and
what each check counted.

A kill is SIGKILL of the component's process at a random moment of a phase (pod churn, scenario b's LS load
step, scenario c's memory pressure); the supervisor starts it again after its restart delay, as systemd
(``RestartSec``) or kubelet (a DaemonSet's container) would.  The plan is a pure function of the seed, so a run
is replayed with ``KOORDLET_FAULT_SEED=<seed>``.
"""

from __future__ import annotations

import os
import random
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PHASES = ("churn", "b", "c")
KILL_WINDOWS = {"churn": (0.3, 4.0), "b": (0.0, 4.0), "c": (0.0, 3.0)}
"""Seconds into the phase at which the kill comes, drawn uniformly: in b from the LS pod's creation, in c from the
moment the threshold drops under the measured usage (before or after the eviction)."""
RESTART_DELAY_SECONDS = 1.0
"""The supervisor's delay before a restart: koord-runtime-proxy.service's RestartSec (kubelet's first
CrashLoopBackOff step is 10 s; a shorter one keeps 80 kills inside a CI run)."""
DEFAULT_KILLS = 4
"""Kills per component in a run of ``tox -e tests``; ``tox -e faults`` sets ``KOORDLET_FAULT_KILLS=20``."""

COMPONENTS = ("koordlet", "koord-companion", "koord-runtime-proxy", "containerd")
CHECKS = ("pods_lost", "ls_protected", "be_limits", "half_adjusted", "nri_registrations", "eviction_storm",
          "companion_converged")
"""The matrix's columns; each counts violations (must stay 0) and the worst time to recover after a restart."""


def run_seed(environ: Mapping[str, str] | None = None) -> str:
    """``KOORDLET_FAULT_SEED`` when set (a replay), else a fresh one; printed with the matrix."""
    env = os.environ if environ is None else environ
    return env.get("KOORDLET_FAULT_SEED", "").strip() or secrets.token_hex(4)


def kills_per_component(environ: Mapping[str, str] | None = None) -> int:
    env = os.environ if environ is None else environ
    raw = env.get("KOORDLET_FAULT_KILLS", "").strip()
    if not raw:
        return DEFAULT_KILLS
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"KOORDLET_FAULT_KILLS must be a positive integer, got {raw!r}")
    return int(raw)


def kills_of_variant(total: int, variant: str) -> dict[str, int]:
    """How many kills each component gets on the node of ``variant`` so that the run kills each ``total`` times:
    koordlet, the companion and containerd run on both nodes (half each), koord-runtime-proxy only on ``proxy``."""
    half = -(-total // 2)
    kills = {"koordlet": half, "koord-companion": half, "containerd": half}
    if variant == "proxy":
        kills["koord-runtime-proxy"] = total
    return kills


@dataclass(frozen=True)
class Kill:
    index: int
    component: str
    phase: str
    delay: float
    """Seconds into the phase."""


def kill_plan(seed: str, variant: str, kills: Mapping[str, int]) -> list[Kill]:
    """Every component's kills spread over the phases in turn, shuffled, each at a random moment of its phase;
    the same seed and variant give the same plan."""
    rng = random.Random(f"{seed}/{variant}")
    # The proxy node starts each component's turn where the NRI node's left off, so that a small run (two kills
    # per component and node) still has every component die in every phase.
    offset = 2 if variant == "proxy" else 0
    items = [(name, PHASES[(i + offset) % len(PHASES)]) for name in COMPONENTS if name in kills
             for i in range(kills[name])]
    rng.shuffle(items)
    return [Kill(i, name, phase, round(rng.uniform(*KILL_WINDOWS[phase]), 2)) for i, (name, phase) in enumerate(items)]


# ------------------------------------------------------------------------------------------------- supervisor


@dataclass
class Supervised:
    """One component under its supervisor: ``kill`` SIGKILLs and reaps the process (returning its PID),
    ``start`` starts it again exactly as before, ``ready`` says it serves again."""

    name: str
    kill: Callable[[], int]
    start: Callable[[], object]
    ready: Callable[[], bool]


# ------------------------------------------------------------------------------------------------- matrix


@dataclass
class Cell:
    kills: int = 0
    violations: int = 0
    worst_recover_seconds: float | None = None
    details: list[str] = field(default_factory=list)

    def add(self, violations: int, recover_seconds: float | None, details: Iterable[str]) -> None:
        self.kills += 1
        self.violations += violations
        if recover_seconds is not None:
            self.worst_recover_seconds = max(self.worst_recover_seconds or 0.0, round(recover_seconds, 2))
        self.details.extend(details)


@dataclass(frozen=True)
class CheckResult:
    """One check after one kill: violations found, seconds from the restart until it held (None: not applicable
    or nothing to recover), and what was wrong."""

    check: str
    violations: int = 0
    recover_seconds: float | None = None
    details: tuple[str, ...] = ()


class Matrix:
    """Component x check -> kills, violations and the worst time to recover."""

    def __init__(self) -> None:
        self.cells: dict[tuple[str, str], Cell] = {}
        self.kills: dict[str, int] = {}

    def record(self, component: str, results: Iterable[CheckResult]) -> None:
        self.kills[component] = self.kills.get(component, 0) + 1
        for result in results:
            cell = self.cells.setdefault((component, result.check), Cell())
            cell.add(result.violations, result.recover_seconds,
                     (f"kill {self.kills[component]} of {component}: {d}" for d in result.details))

    def merge(self, other: Matrix) -> None:
        for component, count in other.kills.items():
            self.kills[component] = self.kills.get(component, 0) + count
        for key, cell in other.cells.items():
            mine = self.cells.setdefault(key, Cell())
            mine.kills += cell.kills
            mine.violations += cell.violations
            if cell.worst_recover_seconds is not None:
                mine.worst_recover_seconds = max(mine.worst_recover_seconds or 0.0, cell.worst_recover_seconds)
            mine.details.extend(cell.details)

    @property
    def violations(self) -> int:
        return sum(cell.violations for cell in self.cells.values())

    def problems(self) -> list[str]:
        return [d for cell in self.cells.values() for d in cell.details]

    def as_dict(self) -> dict[str, Any]:
        return {"kills": dict(self.kills),
                "cells": {f"{c}/{k}": {"kills": cell.kills, "violations": cell.violations,
                                       "worst_recover_seconds": cell.worst_recover_seconds}
                          for (c, k), cell in sorted(self.cells.items())},
                "problems": self.problems()}

    def table(self) -> str:
        """``violations/worst recovery`` per cell ('-' where the check does not apply to the component)."""
        width = max(len(c) for c in CHECKS) + 2
        lines = ["component".ljust(22) + "kills  " + "".join(c.rjust(width) for c in CHECKS)]
        for component in COMPONENTS:
            if component not in self.kills:
                continue
            row = component.ljust(22) + str(self.kills[component]).rjust(5) + "  "
            for check in CHECKS:
                cell = self.cells.get((component, check))
                if cell is None:
                    text = "-"
                else:
                    worst = cell.worst_recover_seconds
                    text = f"{cell.violations}/{'-' if worst is None else f'{worst:.1f}s'}"
                row += text.rjust(width)
            lines.append(row)
        lines.append("each cell: violations / worst seconds from restart until the check held")
        return "\n".join(lines)


def per_component(plan: Sequence[Kill]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for kill in plan:
        counts[kill.component] = counts.get(kill.component, 0) + 1
    return counts
