"""blkio on the real cgroup v1 blkio hierarchy: the strategy limits ``writeBPS`` of the disk holding the test's
temporary directory (this VM's /dev/vda, 254:0) in ``<prefix>/kubepods/besteffort``, a direct-I/O ``dd``
started in that cgroup writes at the configured rate, and switching the strategy off lifts the limit.

The rate is the growth of the file ``dd`` writes with O_DIRECT (each 64 KiB write returns after the
throttled bio completed, so the file size is what got through), measured over a window that starts once
``dd`` is running and one second has passed, away from the first throttle slice."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config import gates
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.blkio import GATE, BlkIOReconcile
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import detect_layout
from tests.fixtures.realcgroup import CGROUP_ROOT, RealCgroups
from tests.unit.qosmanager.fakes import FakeInformer

LIMIT_BPS = 4 << 20
TOLERANCE = 0.15
WARMUP_SECONDS = 1.0
WINDOW_SECONDS = 5.0
BLOCK = 64 << 10
BLOCKS = 1000  # 62.5 MiB: ~27 MiB go at the limit, the rest quickly once it is lifted
BE_DIR = "kubepods/besteffort"


def disk_of(path: Path) -> tuple[str, str]:
    """(kernel name, maj:min) of the whole disk holding ``path``."""
    st = os.stat(path)
    sys_dir = Path(os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
    if (sys_dir / "partition").exists():
        sys_dir = sys_dir.parent
    return sys_dir.name, (sys_dir / "dev").read_text().strip()


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.02)


def size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def rate(path: Path, seconds: float) -> tuple[float, int]:
    """Bytes per second the file grew over ``seconds`` (or until it stopped growing for good), and bytes."""
    before, start = size(path), time.monotonic()
    time.sleep(seconds)
    after, end = size(path), time.monotonic()
    return (after - before) / (end - start), after - before


def slo(write_bps: int, enable: bool = True) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": {"beClass": {"blkioQOS": {
        "enable": enable, "blocks": [{"name": "/dev/vda", "type": "device", "ioCfg": {"writeBPS": write_bps}}]}}}}))


def test_write_bps_limits_a_direct_io_writer(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    if not (CGROUP_ROOT / "blkio" / "cgroup.procs").exists():
        pytest.skip("cgroup v1 blkio not mounted")
    disk, devno = disk_of(tmp_path)
    assert (disk, devno) == ("vda", "254:0"), "this test expects the VM's /dev/vda to hold the temporary directory"
    groups = real_cgroups
    groups.mkdir(BE_DIR, subsystems=("blkio",))
    be = groups.path("blkio", BE_DIR)
    paths = HostPaths()
    layout = detect_layout(paths)
    options = Options(layout=layout, driver=CgroupDriver.CGROUPFS, informer=FakeInformer(),
                      cache=MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time),
                      executor=ResourceExecutor(layout, time.time, None),
                      evictor=Evictions(DryRunBackend(), time.time), reader=CgroupReader(layout),
                      config=QoSManagerConfig(), collector=CollectorConfig(),
                      gates=gates.resolve({GATE: True}), clock=time.time, decisions=DecisionLog(),
                      kube_parent=groups.name)
    strategy = BlkIOReconcile(options)
    spec = slo(LIMIT_BPS)
    assert strategy.enabled(spec)

    decision = strategy.run_once(spec)
    print(decision.summary)
    assert decision.action == "reconcile", decision.summary
    assert (be / "blkio.throttle.write_bps_device").read_text().split() == [devno, str(LIMIT_BPS)]
    assert decision.numbers["be"][devno]["write_bps"] == LIMIT_BPS

    target = tmp_path / "be-writer.bin"
    dd = ["dd", "if=/dev/zero", f"of={target}", f"bs={BLOCK}", f"count={BLOCKS}", "oflag=direct", "status=none"]
    pid = groups.spawn(BE_DIR, f"os.execvp('dd', {dd!r})", subsystems=("blkio",))
    try:
        wait_for(lambda: size(target) > 0, 10, "dd to start writing")
        time.sleep(WARMUP_SECONDS)
        measured, written = rate(target, WINDOW_SECONDS)
        print(f"writeBPS {LIMIT_BPS} B/s configured on {devno}; dd in the BE cgroup measured {measured:.0f} B/s "
              f"({measured / (1 << 20):.2f} MiB/s, {written} B in {WINDOW_SECONDS:.0f} s), "
              f"{abs(measured - LIMIT_BPS) / LIMIT_BPS:.1%} off")
        assert abs(measured - LIMIT_BPS) <= TOLERANCE * LIMIT_BPS

        # The next round changes nothing; switching off removes the limit and dd speeds up.
        assert strategy.run_once(spec).action == "none"
        off = strategy.run_once(spec, enabled=False)
        print(off.summary)
        assert off.action == "recover" and off.numbers["be_removed"] == [devno], off.summary
        assert (be / "blkio.throttle.write_bps_device").read_text().strip() == ""
        left = BLOCKS * BLOCK - size(target)
        unthrottled, _ = rate(target, 0.5)
        print(f"after reset: {unthrottled / (1 << 20):.1f} MiB/s ({left} B were left to write)")
        assert unthrottled > 2 * LIMIT_BPS or size(target) == BLOCKS * BLOCK
    finally:
        groups.kill(pid)
        target.unlink(missing_ok=True)
