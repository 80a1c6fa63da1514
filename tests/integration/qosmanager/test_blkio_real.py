"""blkio on the real hierarchy of each cgroup version: the strategy limits ``writeBPS`` of one disk in
``<prefix>/kubepods/besteffort`` (v1 ``blkio.throttle.write_bps_device``, v2 ``io.max`` wbps), a direct-I/O
writer started in that cgroup writes at the configured rate, and switching the strategy off lifts the limit.

The disk: on the hybrid host the one holding the test's temporary directory (the writer fills a file
there); in the v2 guest, whose temporary directory is a tmpfs, the raw scratch disk ``$KOORDLET_VM_DISK``
(no filesystem: the writer writes the device itself).  The writer uses O_DIRECT with a page-aligned
(mmap) buffer, so every write is a bio of this cgroup that returns once the throttled bio completed: no
page cache, no writeback by the flusher threads (which the kernel charges to the cgroup only on v2).

The rate is the kernel's count of the bytes the cgroup wrote to that disk (v2 ``io.stat`` wbytes, v1
``blkio.throttle.io_service_bytes`` Write), over a window that starts once the writer is running and one
second has passed, away from the first throttle slice."""

from __future__ import annotations

import functools
import os
import stat
import time
from pathlib import Path

import pytest

from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config import gates
from koordlet.config.gates import BLKIO_RECONCILE as GATE
from koordlet.config.types import CollectorConfig, QoSManagerConfig
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.qosmanager.evictor import DryRunBackend, Evictions
from koordlet.qosmanager.framework import DecisionLog, Options
from koordlet.qosmanager.plugins.blkio import BlkIOReconcile
from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import ResourceExecutor
from koordlet.system.hostpaths import HostPaths
from koordlet.system.kubepaths import CgroupDriver
from koordlet.system.layout import detect_layout
from tests.fixtures.cleanup import Cleanup
from tests.fixtures.realcgroup import CGROUP_ROOT, SCRATCH_DISK, RealCgroups, disk_of
from tests.fixtures.waiting import wait_until
from tests.unit.qosmanager.fakes import FakeInformer

MIB = 1 << 20
LIMIT_BPS = 4 * MIB
TOLERANCE = 0.15
WARMUP_SECONDS = 1.0
WINDOW_SECONDS = 5.0
BLOCK = 64 << 10
BLOCKS = 1000  # 62.5 MiB: ~27 MiB go at the limit, the rest quickly once it is lifted
BE_DIR = "kubepods/besteffort"
WRITER = """
import mmap, os
fd = os.open({target!r}, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
buf = mmap.mmap(-1, {block})  # page aligned, as O_DIRECT needs
buf.write(b"\\x5a" * {block})
for _ in range({blocks}):
    os.write(fd, buf)
os.close(fd)
"""


def write_target(tmp_path: Path) -> tuple[Path, bool]:
    """Where the writer writes, and whether that is a raw disk (else a file in ``tmp_path``)."""
    scratch = os.environ.get(SCRATCH_DISK)
    if scratch and stat.S_ISBLK(os.stat(scratch).st_mode):
        return Path(scratch), True
    return tmp_path / "be-writer.bin", False


def slo(disk: str, write_bps: int, enable: bool = True) -> NodeSLOSpec:
    return merge_over_defaults(NodeSLOSpec.from_json({"resourceQOSStrategy": {"beClass": {"blkioQOS": {
        "enable": enable, "blocks": [{"name": disk, "type": "device", "ioCfg": {"writeBPS": write_bps}}]}}}}))


def test_write_bps_limits_a_direct_io_writer(real_cgroups: RealCgroups, tmp_path: Path) -> None:
    groups = real_cgroups
    if groups.version == 1 and not (CGROUP_ROOT / "blkio" / "cgroup.procs").exists():
        pytest.skip("cgroup v1 blkio not mounted")
    target, raw = write_target(tmp_path)
    disk, devno = disk_of(target if raw else tmp_path)
    groups.mkdir(BE_DIR, subsystems=("blkio",))
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
    spec = slo(f"/dev/{disk}", LIMIT_BPS)
    assert strategy.enabled(spec)

    decision = strategy.run_once(spec)
    print(decision.summary)
    assert decision.action == "reconcile", decision.summary
    # No failed write: no weight is sent to a disk whose iocost is off (v2 answers EOPNOTSUPP there).
    assert decision.numbers["problems"] == [], decision.numbers["problems"]
    assert groups.io_write_bps_limit(BE_DIR, devno) == LIMIT_BPS
    assert decision.numbers["be"][devno]["write_bps"] == LIMIT_BPS

    def written() -> int:
        return groups.io_written_bytes(BE_DIR, devno)

    def rate(seconds: float) -> tuple[float, int]:
        """Bytes per second the cgroup wrote to the disk over ``seconds``, and the bytes."""
        before, start = written(), time.monotonic()
        time.sleep(seconds)
        after, end = written(), time.monotonic()
        return (after - before) / (end - start), after - before

    pid = groups.spawn(BE_DIR, WRITER.format(target=str(target), block=BLOCK, blocks=BLOCKS), subsystems=("blkio",))
    try:
        wait_until("the writer's first bytes on the disk", written, timeout=30)
        time.sleep(WARMUP_SECONDS)
        measured, amount = rate(WINDOW_SECONDS)
        print(f"writeBPS {LIMIT_BPS} B/s configured on {devno} ({target}); the writer in the BE cgroup measured "
              f"{measured:.0f} B/s ({measured / MIB:.2f} MiB/s, {amount} B in {WINDOW_SECONDS:.0f} s), "
              f"{abs(measured - LIMIT_BPS) / LIMIT_BPS:.1%} off")
        assert abs(measured - LIMIT_BPS) <= TOLERANCE * LIMIT_BPS

        # The next round changes nothing; switching off removes the limit and the writer speeds up.
        assert strategy.run_once(spec).action == "none"
        off = strategy.run_once(spec, enabled=False)
        print(off.summary)
        assert off.action == "recover" and off.numbers["be_removed"] == [devno], off.summary
        assert off.numbers["problems"] == [], off.numbers["problems"]
        assert groups.io_write_bps_limit(BE_DIR, devno) == -1
        left = BLOCKS * BLOCK - written()
        unthrottled, _ = rate(0.5)
        print(f"after reset: {unthrottled / MIB:.1f} MiB/s ({left} B were left to write)")
        assert unthrottled > 2 * LIMIT_BPS or written() >= BLOCKS * BLOCK
    finally:
        with Cleanup("the writer") as cleanup:
            cleanup.attempt(f"writer process {pid}", functools.partial(groups.kill, pid))
            if not raw:
                cleanup.attempt(f"file {target}", functools.partial(target.unlink, missing_ok=True))
