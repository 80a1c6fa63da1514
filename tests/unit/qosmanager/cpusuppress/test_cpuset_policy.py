"""BE CPU selection (Koordinator ``calculateBESuppressCPUSetPolicy``) on nodes built by ``make_node``.

make_node(8, numa_nodes=2): cores 0-3, CPU i on core i % 4, siblings (0,4) (1,5) (2,6) (3,7);
NUMA 0 = cores 0,1 = CPUs 0,1,4,5 and NUMA 1 = CPUs 2,3,6,7.
make_node(16, numa_nodes=2): siblings (i, i+8); NUMA 0 = CPUs 0-3,8-11 and NUMA 1 = CPUs 4-7,12-15."""

from __future__ import annotations

import json

import pytest

from koordlet.apis.extension import ANNOTATION_RESOURCE_STATUS
from koordlet.qosmanager.plugins.cpusuppress.cpuset_policy import choose, pick, pod_cpuset, split_pools
from tests.unit.qosmanager.fakes import make_node, make_pod


def _status(cpuset: str) -> dict[str, str]:
    return {ANNOTATION_RESOURCE_STATUS: json.dumps({"cpuset": cpuset})}


@pytest.mark.parametrize(
    ("cpus", "threads", "count", "chosen"),
    [
        (8, 2, 1, [0]),                  # no pair for one CPU: the first CPU of the largest bucket
        (8, 2, 2, [0, 4]),               # an HT pair, not one CPU per NUMA node
        (8, 2, 3, [0, 2, 4]),            # pair (0,4) on NUMA 0, then a single on NUMA 1
        (8, 2, 4, [0, 2, 4, 6]),         # one pair per NUMA node
        (8, 2, 5, [0, 1, 2, 4, 6]),      # two pairs, the single goes round from NUMA 0
        (8, 2, 6, [0, 1, 2, 4, 5, 6]),
        (8, 2, 8, list(range(8))),
        (8, 2, 9, []),                   # more than there are: Koordinator picks nothing
        (16, 2, 5, [0, 1, 4, 8, 12]),    # pairs (0,8) (4,12), then CPU 1
        (16, 2, 6, [0, 1, 4, 8, 9, 12]),  # three pairs alternate NUMA 0, 1, 0
        (8, 1, 3, [0, 1, 4]),            # no HT (NUMA 0 = 0-3, 1 = 4-7): singles 0, 4, 1
    ],
)
def test_pick_pairs_first_and_spreads_numa(cpus: int, threads: int, count: int, chosen: list[int]) -> None:
    node = make_node(cpus, threads_per_core=threads, numa_nodes=2)
    assert sorted(pick(count, node.cpus)) == chosen


def test_pick_on_one_node_takes_sibling_pairs() -> None:
    node = make_node(8, numa_nodes=1)
    assert sorted(pick(4, node.cpus)) == [0, 1, 4, 5]


@pytest.mark.parametrize(
    ("pods", "reserved", "lsr", "others", "excluded"),
    [
        ([], (), [], list(range(8)), []),
        ([make_pod("lse", "LSE", annotations=_status("0,4"))], (), [], [1, 2, 3, 5, 6, 7], [0, 4]),
        ([], (0, 4), [], [1, 2, 3, 5, 6, 7], [0, 4]),
        ([make_pod("lsr", "LSR", annotations=_status("1,5"))], (), [1, 5], [0, 2, 3, 4, 6, 7], []),
        # an LS or BE pod's cpuset leaves its CPUs in the shared pool
        ([make_pod("ls", "LS", annotations=_status("1,5"))], (), [], list(range(8)), []),
        ([make_pod("lse", "LSE", annotations=_status("3,7")), make_pod("lsr", "LSR", annotations=_status("1"))],
         (0,), [1], [2, 4, 5, 6], [0, 3, 7]),
    ],
)
def test_split_pools(pods: list, reserved: tuple[int, ...], lsr: list[int], others: list[int],
                     excluded: list[int]) -> None:
    pools = split_pools(make_node(8, numa_nodes=2), pods, reserved)
    assert sorted(p.cpu for p in pools.lsr) == lsr
    assert sorted(p.cpu for p in pools.others) == others
    assert sorted(pools.excluded) == excluded
    assert pools.bad_annotations == ()


@pytest.mark.parametrize(
    ("pods", "reserved", "count", "chosen"),
    [
        # LSE pair (0,4) excluded: NUMA 1 (4 CPUs) is the larger bucket: pair (2,6), then CPU 1
        ([make_pod("lse", "LSE", annotations=_status("0,4"))], (), 3, [1, 2, 6]),
        ([], (0, 4), 3, [1, 2, 6]),
        # LSR 1,5 is 2 of 8 allowed: 3 * 2 // 8 = 0 from LSR, 3 from the others
        ([make_pod("lsr", "LSR", annotations=_status("1,5"))], (), 3, [0, 2, 6]),
        # 4 * 2 // 8 = 1 from LSR (CPU 1), 3 from the others
        ([make_pod("lsr", "LSR", annotations=_status("1,5"))], (), 4, [0, 1, 2, 6]),
        ([], (), 0, []),
    ],
)
def test_choose_excludes_lse_and_reserved_and_shares_lsr(pods: list, reserved: tuple[int, ...], count: int,
                                                         chosen: list[int]) -> None:
    pools = split_pools(make_node(8, numa_nodes=2), pods, reserved)
    assert choose(count, pools) == chosen


@pytest.mark.parametrize(
    ("annotation", "error"),
    [
        ("{not json", "resource-status: not JSON"),
        ("[1, 2]", "resource-status: expected a JSON object"),
        ('{"cpuset": 3}', "cpuset: expected a string"),
        ('{"cpuset": "0-x"}', "bad list element"),
    ],
)
def test_garbage_resource_status_is_reported_and_ignored(annotation: str, error: str) -> None:
    bad = make_pod("lse", "LSE", annotations={ANNOTATION_RESOURCE_STATUS: annotation})
    with pytest.raises(ValueError, match=error):
        pod_cpuset(bad)
    pools = split_pools(make_node(8, numa_nodes=2), [bad], ())
    assert pools.allowed == list(range(8))
    assert len(pools.bad_annotations) == 1 and pools.bad_annotations[0].startswith("default/lse: ")
    assert error in pools.bad_annotations[0]


def test_resource_status_without_cpuset_binds_nothing() -> None:
    pod = make_pod("lse", "LSE", annotations={ANNOTATION_RESOURCE_STATUS: '{"numaNodeResources": []}'})
    assert pod_cpuset(pod) == []
