"""The fault run's plan and matrix (tests/e2e/faults.py): a seed replays the same kills, every component gets
its count, and the matrix adds up what the checks counted."""

from __future__ import annotations

import pytest

from tests.e2e.faults import (
    CheckResult,
    Matrix,
    kill_plan,
    kills_of_variant,
    kills_per_component,
    per_component,
    run_seed,
)


def test_a_seed_replays_the_same_plan() -> None:
    kills = kills_of_variant(20, "proxy")
    assert kill_plan("abc", "proxy", kills) == kill_plan("abc", "proxy", kills)
    assert kill_plan("abc", "proxy", kills) != kill_plan("abd", "proxy", kills)


@pytest.mark.parametrize("total", [1, 4, 20])
def test_each_component_is_killed_total_times_over_both_nodes(total: int) -> None:
    plans = [kill_plan("s", v, kills_of_variant(total, v)) for v in ("nri", "proxy")]
    counts: dict[str, int] = {}
    for plan in plans:
        for name, n in per_component(plan).items():
            counts[name] = counts.get(name, 0) + n
    assert counts["koord-runtime-proxy"] == total
    assert all(counts[c] >= total for c in ("koordlet", "koord-companion", "containerd"))
    assert "koord-runtime-proxy" not in per_component(plans[0])


def test_a_small_run_kills_every_component_in_every_phase() -> None:
    seen: dict[str, set[str]] = {}
    for variant in ("nri", "proxy"):
        for kill in kill_plan("s", variant, kills_of_variant(4, variant)):
            seen.setdefault(kill.component, set()).add(kill.phase)
            assert 0.0 <= kill.delay <= 4.0
    assert seen == {c: {"churn", "b", "c"} for c in ("koordlet", "koord-companion", "containerd",
                                                      "koord-runtime-proxy")}


def test_seed_and_count_from_the_environment() -> None:
    assert run_seed({"KOORDLET_FAULT_SEED": " 1f2e "}) == "1f2e"
    assert run_seed({}) != run_seed({})
    assert kills_per_component({"KOORDLET_FAULT_KILLS": "20"}) == 20
    assert kills_per_component({}) == 4
    with pytest.raises(ValueError, match="KOORDLET_FAULT_KILLS must be a positive integer, got '0'"):
        kills_per_component({"KOORDLET_FAULT_KILLS": "0"})


def test_matrix_counts_violations_and_the_worst_recovery() -> None:
    matrix = Matrix()
    matrix.record("koordlet", [CheckResult("pods_lost", 0, 2.5), CheckResult("be_limits", 0, 0.4)])
    matrix.record("koordlet", [CheckResult("pods_lost", 1, None, ("pod x not running",)),
                               CheckResult("be_limits", 0, 1.25)])
    other = Matrix()
    other.record("containerd", [CheckResult("pods_lost", 0, 7.0)])
    matrix.merge(other)
    assert matrix.violations == 1
    assert matrix.problems() == ["kill 2 of koordlet: pod x not running"]
    cells = matrix.as_dict()["cells"]
    assert cells["koordlet/pods_lost"] == {"kills": 2, "violations": 1, "worst_recover_seconds": 2.5}
    assert cells["koordlet/be_limits"]["worst_recover_seconds"] == 1.25
    assert matrix.kills == {"koordlet": 2, "containerd": 1}
    table = matrix.table().splitlines()
    assert table[1].split()[:4] == ["koordlet", "2", "1/2.5s", "-"]
    assert table[2].split()[:3] == ["containerd", "1", "0/7.0s"]
