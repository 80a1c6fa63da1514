"""The pods of the fault run and what the kernel says of them: BE pods with batch limits, LS pods without a CPU
limit (so that any throttling of them is koordlet's doing), and the readers the checks use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.harness import cfs_quota, cpu_shares, memory_limit
from tests.e2e.node import BATCH_CPU, BATCH_MEMORY, MiB, container, pod_manifest
from tests.fixtures.containerd import CGROUP_ROOT, unified_cgroups
from tests.fixtures.realcgroup import kubelet_cpu_weight


def be_pod(name: str, script: str = "sleep 1000000", *, cpu_limit: int = 500, memory_limit_bytes: int = 96 * MiB,
           priority: int = 5000) -> dict[str, Any]:
    return pod_manifest(name, [container("main", script, requests={BATCH_CPU: "100", BATCH_MEMORY: "32Mi"},
                                         limits={BATCH_CPU: str(cpu_limit),
                                                 BATCH_MEMORY: str(memory_limit_bytes)})],
                        qos="BE", priority_class="koord-batch", priority=priority)


def ls_pod(name: str, script: str = "sleep 1000000") -> dict[str, Any]:
    """An LS pod without a CPU limit: any throttling of it is koordlet's doing."""
    return pod_manifest(name, [container("main", script, requests={"cpu": "100m", "memory": "32Mi"},
                                         limits={"memory": "256Mi"})],
                        qos="LS", priority_class="koord-prod", priority=9000)


@dataclass(frozen=True)
class BatchLimits:
    """What koordlet's hooks put in a BE container's and pod's cgroups (batchresource)."""

    shares: int
    quota_us: int
    memory_bytes: int

    @classmethod
    def of(cls, manifest: dict[str, Any]) -> BatchLimits:
        resources = manifest["spec"]["containers"][0]["resources"]
        request_milli = int(resources["requests"][BATCH_CPU])
        return cls(shares=request_milli * 1024 // 1000, quota_us=int(resources["limits"][BATCH_CPU]) * 100,
                   memory_bytes=int(resources["limits"][BATCH_MEMORY]))

    def applied(self, rel_dir: str) -> tuple[bool, bool, bool]:
        """Which of (shares, quota, memory) the cgroup holds; the quota may be lower (suppression caps it)."""
        shares = cpu_shares(rel_dir)
        want_shares = kubelet_cpu_weight(self.shares) if unified_cgroups() else self.shares
        quota = cfs_quota(rel_dir)[0]
        return shares == want_shares, 0 < quota <= self.quota_us, memory_limit(rel_dir) == self.memory_bytes


@dataclass
class Tracked:
    name: str
    manifest: dict[str, Any]
    qos: str
    pod_dir: str
    container_dirs: list[str]
    limits: BatchLimits | None
    unlimited_since: float | None = None
    reported: bool = False
    deleting: bool = False


def nr_throttled(rel_dir: str) -> int:
    path = (CGROUP_ROOT / rel_dir.strip("/") / "cpu.stat" if unified_cgroups()
            else CGROUP_ROOT / "cpu" / rel_dir.strip("/") / "cpu.stat")
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "nr_throttled":
            return int(value)
    raise AssertionError(f"no nr_throttled in {path}")


def live_unix_connections(path: Path) -> int:
    """Connected sockets the listener at ``path`` accepted (each a client's connection), from /proc/net/unix."""
    wanted = str(path)
    count = 0
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[7] == wanted and fields[5] == "03":  # SS_CONNECTED
            count += 1
    return count
