"""A node's filter and score reduced to what depends on the incoming pod: a few numbers per node, compared with
the pod's estimate, so that a request costs a comparison or two per node instead of the arithmetic of
upstream's formulas.  Computed from the node's :class:`~koordlet.companion.extender.views.NodeView` whenever
it is rebuilt, and kept in the store's :class:`~koordlet.companion.extender.table.GateTable`.

The reductions are exact, not approximations: :func:`fail_from` searches the smallest estimate for which the
filter's own floating-point test fails (the test is monotone in the estimate), and the score's integer
arithmetic is only rearranged.  They hold for estimates in ``0..EST_MAX``; a pod outside that range, and a node
whose test is not monotone (negative allocatable) or overflows, take the formulas themselves
(:mod:`koordlet.companion.extender.loadaware`).
"""

from __future__ import annotations

import math
from typing import Final

from koordlet.companion.extender.args import LoadAwareArgs
from koordlet.companion.extender.views import NodeView

EST_MAX: Final = 2**62
"""Largest estimate (milli-cores, bytes) the gates answer for; a pod estimated above it is rare enough to take
the formulas."""

FilterGate = tuple[float, int | float, int | float, bool]
"""``(expires_at, cpu_from, mem_from, aggregated)``: the node fails as expired from ``expires_at`` on (``inf``
when expiry is not checked or there is no metric), else on CPU when the pod's CPU estimate is at least
``cpu_from``, else on memory likewise (``inf``: never); ``aggregated`` picks the reason's wording."""

ScoreGate = tuple[float, int, int, int, int]
"""``(expires_at, cpu_free, cpu_alloc, mem_free, mem_alloc)``: the node scores 0 from ``expires_at`` on
(``-inf``: always), else per resource ``(free - estimate) * 100 // alloc`` while the estimate fits in
``free`` (``free`` is -1 for a resource with no allocatable, which no estimate fits)."""

_ALWAYS_PASSES: Final[FilterGate] = (math.inf, math.inf, math.inf, False)
SCORES_ZERO: Final[ScoreGate] = (-math.inf, -1, 1, -1, 1)


def fail_from(used: int, total: int, threshold: int) -> int | float | None:
    """The smallest estimate ``e`` in ``0..EST_MAX`` for which the filter's test
    ``(used + e) / total * 100 >= threshold + 0.5`` holds, ``inf`` when none does or the test is off (threshold
    or total 0); None when the test is not monotone in ``e`` (``total < 0``) or overflows.

    With ``total > 0`` every step of the test (int true division, correctly rounded; a product; a comparison) is
    monotone in ``e``, so the failing estimates are exactly those from the returned one on.  The search starts
    at the real-valued crossing and corrects it, a few evaluations of the test."""
    if not threshold or not total:
        return math.inf
    if total < 0:
        return None
    limit = threshold + 0.5

    def fails(e: int) -> bool:
        return (used + e) / total * 100 >= limit

    try:
        if not fails(EST_MAX):
            return math.inf
        if fails(0):
            return 0
        lo, hi = 0, EST_MAX  # fails(lo) is False, fails(hi) True, all along
        guess = limit * total / 100 - used
        g = int(min(max(guess, 1.0), float(EST_MAX - 1)))
        g = min(max(g, 1), EST_MAX - 1)
        step = 1
        if fails(g):
            hi = g
            while g - step > lo:
                if not fails(g - step):
                    lo = g - step
                    break
                hi = g - step
                step *= 2
        else:
            lo = g
            while g + step < hi:
                if fails(g + step):
                    hi = g + step
                    break
                lo = g + step
                step *= 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fails(mid):
                hi = mid
            else:
                lo = mid
        return hi
    except OverflowError:
        return None


Gates = tuple[FilterGate | None, FilterGate | None, ScoreGate, ScoreGate]
"""A node's filter gates (non-prod pods, prod pods) and score gates (``score_used``, ``prod_used``)."""


def node_gates(args: LoadAwareArgs, view: NodeView) -> Gates:
    """The gates of a node, checked in the order the filter and score check it: unknown (no filter gate: the
    formulas answer), no metric (passes, scores 0), expired, no ``status.nodeMetric`` (passes, scores 0),
    thresholds."""
    if not view.known:
        return None, None, SCORES_ZERO, SCORES_ZERO
    if not view.has_metric:
        return _ALWAYS_PASSES, _ALWAYS_PASSES, SCORES_ZERO, SCORES_ZERO
    filter_expires = view.expires_at if args.filter_expired_node_metrics else math.inf
    if not view.node_metric_ok:
        passes = (filter_expires, math.inf, math.inf, False)
        return passes, passes, SCORES_ZERO, SCORES_ZERO
    alloc = (view.alloc_cpu, view.alloc_mem)
    plain = _filter_gate(filter_expires, alloc, view.thresholds, view.filter_used, view.aggregated_filter)
    prod = plain if view.prod_thresholds is None else _filter_gate(filter_expires, alloc, view.prod_thresholds,
                                                                   view.prod_used, False)
    return plain, prod, _score_gate(view.expires_at, alloc, view.score_used), _score_gate(view.expires_at, alloc,
                                                                                           view.prod_used)


def _filter_gate(expires_at: float, alloc: tuple[int, int], thresholds: tuple[int, int], used: tuple[int, int],
                 aggregated: bool) -> FilterGate | None:
    """None when a resource's test has no gate (:func:`fail_from`)."""
    cpu_from = fail_from(used[0], alloc[0], thresholds[0])
    mem_from = fail_from(used[1], alloc[1], thresholds[1])
    if cpu_from is None or mem_from is None:
        return None
    return expires_at, cpu_from, mem_from, aggregated


def _score_gate(expires_at: float, alloc: tuple[int, int], used: tuple[int, int]) -> ScoreGate:
    cpu, mem = alloc
    return (expires_at, cpu - used[0] if cpu else -1, cpu or 1, mem - used[1] if mem else -1, mem or 1)
