"""The real probes on the test kernels: the host (kernel 6.18 KVM guest, cgroup hybrid, no PMU, no core
scheduling) and the v2 guest (Debian's 6.1, pure cgroup v2 with every controller, TCG: no PMU, no RDT).

The expected answers are those kernels' (shared/reference/test-host.md).  Probes only read the host,
except the per-cgroup perf probe, which creates and removes its own ``koordlet-probe-*`` directory.
"""

from __future__ import annotations

import os

import pytest

from koordlet import native
from koordlet.system import PROBE_NAMES, CgroupMode, HostPaths, detect_driver, detect_layout, probe_all
from koordlet.system.probes import PROBE_DIR_PREFIX
from tests.fixtures.realcgroup import ONLY_V1

pytestmark = pytest.mark.integration

EXPECTED_V1 = {
    "cgroup_mode": True,
    "cgroup_v2_controllers": False,
    "psi": True,
    "psi_trigger": True,
    "perf_software": True,
    "perf_cgroup": True,
    "perf_hardware": False,
    "core_sched": False,
    "resctrl": False,
    "cpu_cfs_burst": True,
    "cpu_idle": True,
    "cpu_bvt_warp_ns": False,
    "memory_min": False,
    "memory_low": False,
    "memory_high": False,
    "memory_wmark_ratio": False,
    "memory_wmark_scale_factor": False,
    "memory_wmark_min_adj": False,
    "memory_priority": False,
    "memory_use_priority_oom": False,
    "memory_oom_group": False,
    "blkio_cost_weight": False,
    "blkio_cost_qos": False,
    "cpu_pressure": True,
    "memory_pressure": True,
    "io_pressure": True,
}
# A pure v2 node: the v2 names of the same resources (cpu.max.burst, io.weight, io.cost.qos at the root...) are
# all there; the Anolis-only files, core scheduling, RDT and a PMU are not.
EXPECTED_V2 = {
    **EXPECTED_V1,
    "cgroup_v2_controllers": True,
    "memory_min": True,
    "memory_low": True,
    "memory_high": True,
    "memory_oom_group": True,
    "blkio_cost_weight": True,
    "blkio_cost_qos": True,
}


@pytest.fixture
def results(cgroup_version: int) -> dict[str, tuple[bool, str]]:
    return {r.name: (r.supported, r.reason) for r in probe_all(HostPaths(), native)}


def test_every_probe_answers_as_the_kernel_is(results: dict[str, tuple[bool, str]], cgroup_version: int) -> None:
    assert tuple(results) == PROBE_NAMES
    assert all(reason for _, reason in results.values())
    expected = EXPECTED_V2 if cgroup_version == 2 else EXPECTED_V1
    wrong = {name: results[name][1] for name in expected if results[name][0] is not expected[name]}
    assert not wrong, f"probes that disagree with this cgroup v{cgroup_version} kernel: {wrong}"


@ONLY_V1  # the reasons quoted are the hybrid host's
def test_reasons_name_the_cause(results: dict[str, tuple[bool, str]]) -> None:
    assert results["perf_hardware"][1] == (
        "perf_event_open(PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_HW_INSTRUCTIONS): ENOENT "
        "(no hardware PMU exposed, e.g. a VM without vPMU)"
    )
    assert results["core_sched"][1] == (
        "prctl(PR_SCHED_CORE, PR_SCHED_CORE_GET): EINVAL (kernel built without CONFIG_SCHED_CORE)"
    )
    assert results["resctrl"][1].startswith("resctrl not in /proc/filesystems")
    assert "missing cpu, cpuset, io, memory" in results["cgroup_v2_controllers"][1]
    assert results["cgroup_mode"][1].startswith("hybrid: ")
    assert results["cpu_cfs_burst"][1].startswith("cpu.cfs_burst_us present in /sys/fs/cgroup/cpu")
    assert results["cpu_bvt_warp_ns"][1].endswith("(a file of Alibaba Cloud Linux / Anolis kernels)")
    assert results["memory_min"][1].startswith("memory.min absent from /sys/fs/cgroup/memory")
    assert results["perf_cgroup"][1].startswith(
        "task-clock counted per cgroup on a temporary child cgroup of /sys/fs/cgroup/unified"
    )


@pytest.mark.cgroupv2
def test_v2_reasons_name_the_v2_files() -> None:
    results = {r.name: r.reason for r in probe_all(HostPaths(), native)}
    assert results["cgroup_mode"].startswith("v2: ")
    assert "cpu.max.burst present in /sys/fs/cgroup/" in results["cpu_cfs_burst"]
    assert "io.cost.qos present in /sys/fs/cgroup" in results["blkio_cost_qos"]
    assert "absent from /sys/fs/cgroup/koordlet-probe-" in results["cpu_bvt_warp_ns"]
    assert "(a file of Alibaba Cloud Linux / Anolis kernels)" in results["cpu_bvt_warp_ns"]


def test_perf_probe_leaves_no_directory_behind(cgroup_version: int) -> None:
    probe_all(HostPaths(), native)
    mine = f"{PROBE_DIR_PREFIX}{os.getpid()}-"
    unified = "/sys/fs/cgroup" if cgroup_version == 2 else "/sys/fs/cgroup/unified"
    assert not [d for d in os.listdir(unified) if d.startswith(mine)]


def test_layout_and_driver_of_the_host(cgroup_version: int) -> None:
    layout = detect_layout(HostPaths())
    if cgroup_version == 2:
        assert layout.mode is CgroupMode.V2
        assert layout.unified_root == "/sys/fs/cgroup"
        assert {"cpu", "cpuset", "memory", "io"} <= layout.v2_controllers()
        base = "/sys/fs/cgroup"
    else:
        assert layout.mode is CgroupMode.HYBRID
        assert layout.unified_root == "/sys/fs/cgroup/unified"
        for subsystem in ("cpu", "cpuacct", "cpuset", "memory", "blkio"):
            assert layout.subsystem_dir(subsystem) == f"/sys/fs/cgroup/{subsystem}"
        assert not {"cpu", "memory", "io"} & layout.v2_controllers()
        base = "/sys/fs/cgroup/cpu"
    # Other suites may leave kubepods parents behind (runc removes only the leaf), so only check that
    # the guess agrees with what is on disk.
    guess = detect_driver(layout)
    cgroupfs = os.path.isdir(f"{base}/kubepods")
    systemd = os.path.isdir(f"{base}/kubepods.slice")
    assert guess.guessed is (cgroupfs == systemd)
    if cgroupfs != systemd:
        assert guess.driver.value == ("cgroupfs" if cgroupfs else "systemd")
