"""CPU normalization on the real hierarchy of each cgroup version: the reconciler, with the daemon's hooks and the
real resource executor, divides an LS pod's and a BE pod's CFS quotas by the node's ratio and follows the ratio
when it changes, read back from the kernel.

Lowering and raising both meet the v1 rule that a child's quota may not exceed its parent's (EINVAL): the
container must fit under the pod at every step, so a lower quota is written container first and a higher one
pod first; the executor orders the writes, and a write the kernel refused would show here as a value that did
not move.

Expected values are worked out here (kubelet's quota for a limit: milli x 100 at the 100 ms period; upstream's
scaling: ``ceil(quota / ratio)``), not by the hooks' arithmetic.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from koordlet.apis.pod import Resources
from koordlet.config import gates
from koordlet.resourceexecutor import AuditLog, ResourceExecutor
from koordlet.runtimehooks.apply import Applier
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRunner
from koordlet.runtimehooks.hooks import build_hooks
from koordlet.runtimehooks.reconciler import Reconciler
from koordlet.system.hostpaths import HostPaths
from koordlet.system.layout import detect_layout
from tests.fixtures.realcgroup import RealCgroups
from tests.unit.qosmanager.fakes import FakeInformer, make_pod

PERIOD_US = 100_000
LS_LIMIT_MILLI = 2000
BE_LIMIT_MILLI = 1000


def kubelet_quota(milli: int) -> int:
    return milli * PERIOD_US // 1000


def scaled(milli: int, ratio: float) -> int:
    return math.ceil(kubelet_quota(milli) / ratio) if ratio > 1 else kubelet_quota(milli)


def test_quotas_follow_the_ratio(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    prefix = real_cgroups.name
    ls = make_pod("norm-ls", "LS", limits=Resources(cpu_milli=LS_LIMIT_MILLI), kube_parent=prefix)
    be = make_pod("norm-be", "BE", requests=Resources(batch_cpu_milli=500),
                  limits=Resources(batch_cpu_milli=BE_LIMIT_MILLI), kube_parent=prefix)
    rels = {}
    for meta, milli in ((ls, LS_LIMIT_MILLI), (be, BE_LIMIT_MILLI)):
        pod_rel = meta.cgroup_dir.removeprefix(prefix + "/")
        container_rel = meta.containers[0].cgroup_dir.removeprefix(prefix + "/")
        real_cgroups.mkdir(container_rel)
        if meta is ls:  # what kubelet writes for the LS pod; the BE pod starts unlimited (kubelet's BestEffort)
            for rel in (pod_rel, container_rel):
                real_cgroups.set_cpu_quota(rel, kubelet_quota(milli), PERIOD_US)
        rels[meta.pod.name] = (pod_rel, container_rel)
    layout = detect_layout(HostPaths())
    executor = ResourceExecutor(layout, time.monotonic, AuditLog(tmp_path / "audit"))
    ratio: list[float] = [1.25]
    deps = HookDeps(gates=gates.resolve({gates.CPU_NORMALIZATION: True}), cpu_normalization_ratio=lambda: ratio[0])
    reconciler = Reconciler(HookRunner(build_hooks(deps)), Applier(executor.apply), FakeInformer([ls, be]))

    def quotas(name: str) -> tuple[int, int]:
        pod_rel, container_rel = rels[name]
        return real_cgroups.cpu_quota(pod_rel)[0], real_cgroups.cpu_quota(container_rel)[0]

    for value in (1.25, 2.0, 1.5, 1.0):  # lower, lower, raise, back to kubelet's
        ratio[0] = value
        reconciler.reconcile([ls, be])
        ls_quota, be_quota = scaled(LS_LIMIT_MILLI, value), scaled(BE_LIMIT_MILLI, value)
        assert quotas("norm-ls") == (ls_quota, ls_quota), f"ratio {value}"
        assert quotas("norm-be")[1] == be_quota, f"ratio {value}"
        print(f"ratio {value}: LS pod/container {quotas('norm-ls')}, BE pod/container {quotas('norm-be')}")
