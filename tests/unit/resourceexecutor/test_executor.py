"""ResourceExecutor on fake v1 and v2 trees: validation, translation, the skip-unchanged cache, error
classes (EINVAL backoff, gone cgroups, permission errors), metrics, audit and locking."""

from __future__ import annotations

import dataclasses
import errno
import logging
import shutil
import threading
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from koordlet.errors import ConfigError
from koordlet.metrics.executor import RESOURCE_UPDATE_DURATION, ResourceExecutorMetrics
from koordlet.resourceexecutor import CgroupUpdate, Outcome, ResourceExecutor
from koordlet.system import CgroupFile
from koordlet.system import resources as r
from koordlet.system.validators import shares_to_weight
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, IntendedSink, MemoryAudit, RecordingWriter

BE = "kubepods/besteffort"
LOGGER = "koordlet.resourceexecutor.executor"


def make(
    host: FakeHost, force_update_seconds: float = 60.0, unsupported_retry_seconds: float = 600.0
) -> tuple[ResourceExecutor, FakeClock, RecordingWriter, MemoryAudit]:
    clock, writer, audit = FakeClock(), RecordingWriter(), MemoryAudit()
    executor = ResourceExecutor(
        host.layout(),
        clock,
        audit,
        force_update_seconds=force_update_seconds,
        unsupported_retry_seconds=unsupported_retry_seconds,
        writer=writer,
    )
    return executor, clock, writer, audit


def upd(resource: CgroupFile, value: object, rel_dir: str = BE, owner: str = "test") -> CgroupUpdate:
    return CgroupUpdate(resource, rel_dir, value, owner)


def content(host: FakeHost, resource: CgroupFile, rel_dir: str = BE) -> str:
    return host.read_cgroup(rel_dir, resource).strip()


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [rec for rec in caplog.records if rec.name == LOGGER and rec.levelno >= logging.WARNING]


# ---------------------------------------------------------------------------------- writes, translations


@pytest.mark.parametrize(
    ("resource", "value", "v1_text", "v2_text"),
    [
        (r.CPU_SHARES, 512, "512", str(shares_to_weight(512))),
        (r.CPU_SHARES, 2, "2", "1"),
        (r.CPU_SHARES, 262144, "262144", "10000"),
        (r.CPU_CFS_QUOTA, 50_000, "50000", "50000"),
        (r.CPU_CFS_QUOTA, -1, "-1", "max"),
        (r.MEMORY_LIMIT, 1 << 30, str(1 << 30), str(1 << 30)),
        (r.MEMORY_LIMIT, -1, "-1", "max"),
        (r.CPUSET_CPUS, [3, 0, 1], "0-1,3", "0-1,3"),
    ],
    ids=lambda v: str(v.key) if isinstance(v, CgroupFile) else str(v),
)
def test_writes_the_text_of_the_hosts_version(
    fake_cgroup_host: FakeHost, resource: CgroupFile, value: object, v1_text: str, v2_text: str
) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, writer, _ = make(fake_cgroup_host)
    (result,) = executor.apply([upd(resource, value)])
    expected = v1_text if fake_cgroup_host.mode == "v1" else v2_text
    assert result.outcome is Outcome.WRITTEN, result.error
    assert result.ok
    assert result.text == expected
    assert content(fake_cgroup_host, resource) == expected
    assert writer.writes == [(str(fake_cgroup_host.cgroup_path(BE, resource)), expected)]


def test_v2_file_names(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2")
    fake_host.mkdir_cgroup(BE)
    executor, _, writer, _ = make(fake_host)
    executor.apply([upd(r.CPU_SHARES, 1024), upd(r.CPU_CFS_QUOTA, -1), upd(r.MEMORY_LIMIT, 4096)])
    assert [Path(p).name for p, _ in writer.writes] == ["cpu.weight", "cpu.max", "memory.max"]


# ---------------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("resource", "value", "reason"),
    [
        ("cpu_shares", 1, "out of range"),
        ("cpu_shares", "lots", "expected an integer"),
        ("cpu_cfs_quota", 500, "out of range"),
        ("cpuset_cpus", "5-3", "descending range"),
        ("cpuset_cpus", "", "empty list"),
        ("memory_limit", True, "expected an integer"),
        ("cpu_stat", 1, "read-only"),
    ],
)
def test_invalid_value_is_rejected_before_any_write(
    fake_cgroup_host: FakeHost, caplog: pytest.LogCaptureFixture, resource: str, value: object, reason: str
) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    descriptor = r.REGISTRY[resource]
    path = fake_cgroup_host.cgroup_path(BE, descriptor)
    before = path.read_text()
    executor, _, writer, audit = make(fake_cgroup_host)
    (result,) = executor.apply([upd(descriptor, value)])
    assert result.outcome is Outcome.INVALID
    assert not result.ok
    assert result.error is not None
    assert str(path) in result.error
    assert path.name in result.error
    assert repr(value) in result.error
    assert reason in result.error
    assert writer.attempts == []
    assert audit.entries == []
    assert path.read_text() == before
    assert len(warnings(caplog)) == 1


def test_invalid_update_does_not_stop_the_rest_of_the_batch(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, *_ = make(fake_cgroup_host)
    results = executor.apply([upd(r.CPU_SHARES, 1), upd(r.CPU_CFS_QUOTA, 20_000), upd(r.CPUSET_CPUS, "9-1")])
    assert [res.outcome for res in results] == [Outcome.INVALID, Outcome.WRITTEN, Outcome.INVALID]
    assert [res.update.key for res in results] == ["cpu_shares", "cpu_cfs_quota", "cpuset_cpus"]
    assert content(fake_cgroup_host, r.CPU_CFS_QUOTA) == "20000"


def test_cpu_max_period_alone_is_invalid_on_v2(fake_host: FakeHost) -> None:
    fake_host.set_mode("v2")
    fake_host.mkdir_cgroup(BE)
    executor, _, writer, _ = make(fake_host)
    (result,) = executor.apply([upd(r.CPU_CFS_PERIOD, 100_000)])
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and "cpu.max" in result.error
    assert writer.attempts == []


def test_rel_dir_leaving_the_hierarchy_is_invalid(fake_cgroup_host: FakeHost) -> None:
    executor, _, writer, _ = make(fake_cgroup_host)
    (result,) = executor.apply([upd(r.CPU_SHARES, 1024, rel_dir="kubepods/../../etc")])
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and ".." in result.error
    assert writer.attempts == []


def test_resource_without_a_file_in_this_version_is_unsupported(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, writer, _ = make(fake_cgroup_host)
    (result,) = executor.apply([upd(r.NET_CLS_CLASSID, 0x10001)])
    if fake_cgroup_host.mode == "v1":
        assert result.outcome is Outcome.WRITTEN
        assert fake_cgroup_host.read_cgroup(BE, "net_cls.classid") == "65537"
    else:
        assert result.outcome is Outcome.UNSUPPORTED
        assert result.error is not None and "net_cls" in result.error
        assert writer.attempts == []


def test_update_needs_a_known_resource_and_an_owner() -> None:
    with pytest.raises(ConfigError, match=r"unknown cgroup resource 'cpu_shares': not a descriptor"):
        CgroupUpdate("cpu_shares", BE, 1024, "test")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs an owner"):
        CgroupUpdate(r.CPU_SHARES, BE, 1024, "")


@pytest.mark.parametrize("field", ["force_update_seconds", "unsupported_retry_seconds"])
def test_negative_intervals_are_refused(fake_host: FakeHost, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ResourceExecutor(fake_host.layout(), FakeClock(), None, **{field: -1.0})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- skip-unchanged cache


def test_unchanged_value_is_skipped_until_the_forced_rewrite(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, clock, writer, audit = make(fake_cgroup_host, force_update_seconds=60)
    path = str(fake_cgroup_host.cgroup_path(BE, r.CPU_CFS_QUOTA))
    assert executor.apply([upd(r.CPU_CFS_QUOTA, 30_000)])[0].outcome is Outcome.WRITTEN
    # Someone else changes the file; the cache does not notice until the forced rewrite.
    fake_cgroup_host.write_cgroup(BE, r.CPU_CFS_QUOTA, "-1")
    clock.advance(59.9)
    (again,) = executor.apply([upd(r.CPU_CFS_QUOTA, 30_000)])
    assert again.outcome is Outcome.SKIPPED_UNCHANGED
    assert again.ok
    assert writer.calls_to(path) == 1
    assert len(audit.entries) == 1
    clock.advance(0.1)
    assert executor.apply([upd(r.CPU_CFS_QUOTA, 30_000)])[0].outcome is Outcome.WRITTEN
    assert writer.calls_to(path) == 2
    assert content(fake_cgroup_host, r.CPU_CFS_QUOTA) == "30000"
    # The forced rewrite restarted the period.
    clock.advance(30)
    assert executor.apply([upd(r.CPU_CFS_QUOTA, 30_000)])[0].outcome is Outcome.SKIPPED_UNCHANGED


def test_a_steady_batch_answered_whole_keeps_every_rule(fake_cgroup_host: FakeHost) -> None:
    """A batch of the same update objects, every one unchanged, is answered at once (a strategy over 1,000
    containers every second): the answers are the ones update by update would give, and a write anywhere, a
    forget or the end of the force-update window has it answered update by update again."""
    dirs = [f"{BE}/pod{i}" for i in range(40)]
    for rel_dir in dirs:
        fake_cgroup_host.mkdir_cgroup(rel_dir)
    executor, clock, writer, audit = make(fake_cgroup_host, force_update_seconds=60)
    batch = [upd(r.CPU_SHARES, 1024, rel_dir) for rel_dir in dirs]
    assert {res.outcome for res in executor.apply(batch)} == {Outcome.WRITTEN}
    for _ in range(3):
        clock.advance(1)
        results = executor.apply(batch)
        assert [(res.update, res.outcome) for res in results] == [(u, Outcome.SKIPPED_UNCHANGED) for u in batch]
    assert len(writer.writes) == 40 and len(audit.entries) == 40
    # Forgotten behind the batch's back: written again at once.
    executor.forget(str(fake_cgroup_host.cgroup_path(dirs[3], r.CPU_SHARES)))
    assert [res.outcome for res in executor.apply(batch)][2:5] == [
        Outcome.SKIPPED_UNCHANGED, Outcome.WRITTEN, Outcome.SKIPPED_UNCHANGED]
    # The batch's oldest write leaves the window: each file is read back; the ones that still hold the value
    # are not written again, the one changed behind the executor's back is repaired.
    clock.advance(56)  # the first writes were 59 s ago
    assert [res.outcome for res in executor.apply(batch)].count(Outcome.SKIPPED_UNCHANGED) == 40
    ours = content(fake_cgroup_host, r.CPU_SHARES, dirs[5])
    fake_cgroup_host.write_cgroup(dirs[5], r.CPU_SHARES, "2")
    clock.advance(1)
    outcomes = [res.outcome for res in executor.apply(batch)]
    assert outcomes.count(Outcome.WRITTEN) == 1 and outcomes[5] is Outcome.WRITTEN
    assert content(fake_cgroup_host, r.CPU_SHARES, dirs[5]) == ours
    # Another value of one update (a new object in the batch): only that one is written.
    batch[7] = upd(r.CPU_SHARES, 2048, dirs[7])
    assert [res.outcome for res in executor.apply(batch)].count(Outcome.WRITTEN) == 1
    assert len(writer.writes) == 40 + 1 + 1 + 1
    assert len(audit.entries) == 40 + 1 + 1 + 1  # a value verified in place is no change to audit


def test_changed_value_is_written_at_once(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, clock, writer, _ = make(fake_cgroup_host)
    executor.apply([upd(r.CPU_SHARES, 1024)])
    clock.advance(1)
    assert executor.apply([upd(r.CPU_SHARES, 2048)])[0].outcome is Outcome.WRITTEN
    assert executor.apply([upd(r.CPU_SHARES, 1024)])[0].outcome is Outcome.WRITTEN
    assert len(writer.writes) == 3


def test_equal_values_of_different_spelling_share_the_cache(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, writer, _ = make(fake_cgroup_host)
    executor.apply([upd(r.CPUSET_CPUS, "0,1,2")])
    assert executor.apply([upd(r.CPUSET_CPUS, [0, 1, 2])])[0].outcome is Outcome.SKIPPED_UNCHANGED
    assert executor.apply([upd(r.CPU_CFS_QUOTA, "max")])[0].outcome is Outcome.WRITTEN
    assert executor.apply([upd(r.CPU_CFS_QUOTA, -1)])[0].outcome is Outcome.SKIPPED_UNCHANGED
    assert len(writer.writes) == 2


def test_forget_makes_the_next_apply_write(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE + "/pod1")
    executor, _, writer, _ = make(fake_cgroup_host)
    batch = [upd(r.CPU_SHARES, 512), upd(r.CPU_SHARES, 256, rel_dir=BE + "/pod1")]
    executor.apply(batch)
    executor.forget(
        str(fake_cgroup_host.cgroup_path(BE + "/pod1", "cpu.shares" if fake_cgroup_host.mode == "v1" else "cpu.weight"))
    )
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.SKIPPED_UNCHANGED, Outcome.WRITTEN]
    executor.forget()
    assert [res.outcome for res in executor.apply(batch)] == [Outcome.WRITTEN, Outcome.WRITTEN]
    assert len(writer.writes) == 5


# ---------------------------------------------------------------------------------- error classes


def test_einval_marks_the_value_unsupported_and_is_not_retried(
    fake_cgroup_host: FakeHost, caplog: pytest.LogCaptureFixture
) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, clock, writer, audit = make(fake_cgroup_host, force_update_seconds=60, unsupported_retry_seconds=600)
    path = str(fake_cgroup_host.cgroup_path(BE, r.CPU_CFS_BURST))
    writer.fail[path] = errno.EINVAL
    (first,) = executor.apply([upd(r.CPU_CFS_BURST, 50_000)])
    assert first.outcome is Outcome.UNSUPPORTED
    assert first.error is not None and "Invalid argument" in first.error and path in first.error
    for _ in range(5):  # every tick of a strategy, and past the forced-rewrite period
        clock.advance(60)
        (again,) = executor.apply([upd(r.CPU_CFS_BURST, 50_000)])
        assert again.outcome is Outcome.UNSUPPORTED
        assert again.error is not None and "not retried" in again.error
    assert writer.calls_to(path) == 1
    assert len(audit.entries) == 1
    assert len(warnings(caplog)) == 1
    # A new value is worth one try...
    assert executor.apply([upd(r.CPU_CFS_BURST, 10_000)])[0].outcome is Outcome.UNSUPPORTED
    assert writer.calls_to(path) == 2
    # ...and the backoff ends after unsupported_retry_seconds.
    clock.advance(600)
    del writer.fail[path]
    assert executor.apply([upd(r.CPU_CFS_BURST, 10_000)])[0].outcome is Outcome.WRITTEN
    assert writer.calls_to(path) == 3
    assert content(fake_cgroup_host, r.CPU_CFS_BURST) == "10000"


def test_einval_elsewhere_does_not_block_other_files(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE + "/pod1")
    executor, _, writer, _ = make(fake_cgroup_host)
    writer.fail[str(fake_cgroup_host.cgroup_path(BE, r.CPU_CFS_QUOTA))] = errno.EINVAL
    results = executor.apply([upd(r.CPU_CFS_QUOTA, 10_000), upd(r.CPU_CFS_QUOTA, 10_000, rel_dir=BE + "/pod1")])
    assert [res.outcome for res in results] == [Outcome.UNSUPPORTED, Outcome.WRITTEN]


def test_missing_file_is_unsupported_for_any_value(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    fake_cgroup_host.remove_cgroup_file(BE, r.CPU_CFS_BURST)  # a kernel older than 5.14
    executor, clock, writer, _ = make(fake_cgroup_host)
    path = str(fake_cgroup_host.cgroup_path(BE, r.CPU_CFS_BURST))
    (first,) = executor.apply([upd(r.CPU_CFS_BURST, 1000)])
    assert first.outcome is Outcome.UNSUPPORTED
    assert first.error is not None and "kernel lacks it" in first.error
    clock.advance(120)
    assert executor.apply([upd(r.CPU_CFS_BURST, 2000)])[0].outcome is Outcome.UNSUPPORTED
    assert writer.calls_to(path) == 1
    assert not Path(path).exists()  # never created


def test_memory_min_is_unsupported_on_plain_v1(fake_host: FakeHost) -> None:
    fake_host.mkdir_cgroup(BE)
    executor, *_ = make(fake_host)
    (result,) = executor.apply([upd(r.MEMORY_MIN, 1 << 20)])
    assert result.outcome is Outcome.UNSUPPORTED


def test_missing_cgroup_is_gone_without_warnings(fake_cgroup_host: FakeHost, caplog: pytest.LogCaptureFixture) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, _, audit = make(fake_cgroup_host)
    (result,) = executor.apply([upd(r.CPU_SHARES, 512, rel_dir=BE + "/pod-deleted")])
    assert result.outcome is Outcome.GONE
    assert result.error is not None and "No such file" in result.error
    assert warnings(caplog) == []
    assert [e.outcome for e in audit.entries] == ["gone"]


def test_cgroup_removed_after_a_write_is_gone_and_forgotten(fake_cgroup_host: FakeHost) -> None:
    pod = BE + "/pod1"
    fake_cgroup_host.mkdir_cgroup(pod)
    executor, _, writer, _ = make(fake_cgroup_host)
    assert executor.apply([upd(r.CPU_SHARES, 512, rel_dir=pod)])[0].outcome is Outcome.WRITTEN
    path = fake_cgroup_host.cgroup_path(pod, r.CPU_SHARES)
    shutil.rmtree(path.parent)
    assert executor.apply([upd(r.CPU_SHARES, 256, rel_dir=pod)])[0].outcome is Outcome.GONE
    # Same name re-created (a restarted pod): the old cache entry must not skip the write.
    fake_cgroup_host.mkdir_cgroup(pod)
    assert executor.apply([upd(r.CPU_SHARES, 512, rel_dir=pod)])[0].outcome is Outcome.WRITTEN
    assert writer.calls_to(str(path)) == 3


@pytest.mark.parametrize("code", [errno.ENODEV, errno.ESRCH])
def test_enodev_and_esrch_are_gone(fake_cgroup_host: FakeHost, code: int) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, writer, _ = make(fake_cgroup_host)
    path = str(fake_cgroup_host.cgroup_path(BE, r.CPU_SHARES))
    writer.fail[path] = code
    assert executor.apply([upd(r.CPU_SHARES, 512)])[0].outcome is Outcome.GONE
    assert executor.apply([upd(r.CPU_SHARES, 512)])[0].outcome is Outcome.GONE
    assert writer.calls_to(path) == 2  # not marked: a new cgroup of that name must be written


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.EROFS])
def test_permission_error_fails_and_is_logged_once(
    fake_cgroup_host: FakeHost, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, clock, writer, _ = make(fake_cgroup_host)
    path = str(fake_cgroup_host.cgroup_path(BE, r.CPU_SHARES))
    writer.fail[path] = code
    for _ in range(3):
        (result,) = executor.apply([upd(r.CPU_SHARES, 512)])
        assert result.outcome is Outcome.FAILED
        clock.advance(1)
    assert result.error is not None and path in result.error
    assert writer.calls_to(path) == 3
    assert len(warnings(caplog)) == 1
    del writer.fail[path]
    assert executor.apply([upd(r.CPU_SHARES, 512)])[0].outcome is Outcome.WRITTEN
    assert any(rec.getMessage() == "cgroup write succeeds again" for rec in caplog.records)


def test_audit_records_attempted_writes_with_old_and_new_values(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, writer, audit = make(fake_cgroup_host)
    writer.fail[str(fake_cgroup_host.cgroup_path(BE, r.MEMORY_LIMIT))] = errno.EBUSY
    executor.apply([upd(r.CPU_CFS_QUOTA, 40_000, owner="cpusuppress: be quota"), upd(r.MEMORY_LIMIT, 4096)])
    executor.apply([upd(r.CPU_CFS_QUOTA, 40_000)])  # skipped: not audited
    unlimited = "-1" if fake_cgroup_host.mode == "v1" else "max 100000"
    quota, limit = audit.entries
    assert (quota.old, quota.new, quota.owner, quota.outcome, quota.error) == (
        unlimited,
        "40000",
        "cpusuppress: be quota",
        "written",
        None,
    )
    assert quota.resource == "cpu_cfs_quota"
    assert quota.path == str(fake_cgroup_host.cgroup_path(BE, r.CPU_CFS_QUOTA))
    assert limit.outcome == "failed"
    assert limit.error is not None and "busy" in limit.error


def test_metrics_observe_each_write(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    registry = CollectorRegistry()
    clock, writer = FakeClock(), RecordingWriter()
    executor = ResourceExecutor(
        fake_cgroup_host.layout(), clock, None, ResourceExecutorMetrics(registry), writer=writer
    )
    writer.fail[str(fake_cgroup_host.cgroup_path(BE, r.MEMORY_LIMIT))] = errno.EBUSY
    executor.apply([upd(r.CPU_SHARES, 512), upd(r.CPU_SHARES, 1, rel_dir=BE), upd(r.MEMORY_LIMIT, 4096)])
    executor.apply([upd(r.CPU_SHARES, 512)])  # skipped: no write, no observation

    def count(kind: str, status: str) -> float | None:
        return registry.get_sample_value(RESOURCE_UPDATE_DURATION + "_count", {"type": kind, "status": status})

    assert count("cpu_shares", "success") == 1
    assert count("cpu_shares", "failed") is None
    assert count("memory_limit", "failed") == 1


class GatedWriter(RecordingWriter):
    """Blocks every write of ``gated`` text until ``release`` is set (a cgroup v1 memory.limit_in_bytes write
    the kernel holds while it reclaims); ``entered`` is set once such a write is under way."""

    def __init__(self, gated: str) -> None:
        super().__init__()
        self.gated = gated
        self.entered, self.release = threading.Event(), threading.Event()
        self.inside: dict[str, int] = {}
        self.overlaps: list[str] = []

    def write(self, path: str, text: str) -> None:
        self.inside[path] = self.inside.get(path, 0) + 1
        if self.inside[path] > 1:
            self.overlaps.append(path)
        try:
            if text == self.gated:
                self.entered.set()
                assert self.release.wait(10)
            super().write(path, text)
        finally:
            self.inside[path] -= 1


def in_thread(executor: ResourceExecutor, *updates: CgroupUpdate) -> threading.Thread:
    thread = threading.Thread(target=executor.apply, args=(list(updates),), daemon=True)
    thread.start()
    return thread


def test_a_slow_write_holds_no_other_file(fake_cgroup_host: FakeHost) -> None:
    """A write stuck in the kernel keeps neither another file's writer nor readers of the executor's state
    waiting: the state lock is not held across a write."""
    fake_cgroup_host.mkdir_cgroup(BE)
    writer = GatedWriter("4096")
    executor = ResourceExecutor(fake_cgroup_host.layout(), FakeClock(), None, writer=writer)
    slow = in_thread(executor, upd(r.MEMORY_LIMIT, 4096))
    try:
        assert writer.entered.wait(10)
        fast = in_thread(executor, upd(r.CPU_SHARES, 512))
        fast.join(10)
        assert not fast.is_alive()  # done while the memory write is still blocked
        assert executor.last_written(str(fake_cgroup_host.cgroup_path(BE, r.CPU_SHARES))) is not None
        assert slow.is_alive()
    finally:
        writer.release.set()
        slow.join(10)
    assert content(fake_cgroup_host, r.MEMORY_LIMIT) == "4096"


def test_writes_to_one_file_keep_their_order_and_cache(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    writer = GatedWriter("4096")
    executor = ResourceExecutor(fake_cgroup_host.layout(), FakeClock(), None, writer=writer)
    first = in_thread(executor, upd(r.MEMORY_LIMIT, 4096))
    try:
        assert writer.entered.wait(10)
        second = in_thread(executor, upd(r.MEMORY_LIMIT, 8192))
        second.join(timeout=0.2)
        assert second.is_alive()  # waits for the same file's write, does not overtake it
    finally:
        writer.release.set()
        first.join(10)
        second.join(10)
    assert not writer.overlaps
    assert not executor._path_locks  # a file's lock lives only while someone writes it
    assert [text for _, text in writer.writes] == ["4096", "8192"]
    assert content(fake_cgroup_host, r.MEMORY_LIMIT) == "8192"
    # The cache followed the file: the value now in it is skipped, the older one written again.
    assert executor.apply([upd(r.MEMORY_LIMIT, 8192)])[0].outcome is Outcome.SKIPPED_UNCHANGED
    assert executor.apply([upd(r.MEMORY_LIMIT, 4096)])[0].outcome is Outcome.WRITTEN


def test_leveled_batches_are_serialised(fake_cgroup_host: FakeHost) -> None:
    """Two batches of leveled writes never interleave (one widens a parent the other may shrink)."""
    fake_cgroup_host.mkdir_cgroup(BE)
    fake_cgroup_host.mkdir_cgroup("kubepods/burstable")
    writer = GatedWriter("0-1")
    executor = ResourceExecutor(fake_cgroup_host.layout(), FakeClock(), None, writer=writer)
    first = in_thread(executor, upd(r.CPUSET_CPUS, "0-1"))
    try:
        assert writer.entered.wait(10)
        second = in_thread(executor, upd(r.CPUSET_CPUS, "2-3", rel_dir="kubepods/burstable"))
        other = in_thread(executor, upd(r.CPU_SHARES, 512))
        other.join(10)
        assert not other.is_alive()  # not leveled: does not wait for the tree
        second.join(timeout=0.2)
        assert second.is_alive()
    finally:
        writer.release.set()
        first.join(10)
        second.join(10)
    assert [text for _, text in writer.writes if text in ("0-1", "2-3")] == ["0-1", "2-3"]


def test_update_takes_only_registered_descriptors() -> None:
    update = CgroupUpdate(r.CPU_SHARES, BE, 1024, "test")
    assert update.resource is r.CPU_SHARES and update.key == "cpu_shares"
    stranger = dataclasses.replace(r.CPU_SHARES, key="cpu_shares_copy")
    with pytest.raises(ConfigError, match=r"unknown cgroup resource 'cpu_shares_copy'"):
        CgroupUpdate(stranger, BE, 1024, "test")


def test_each_device_line_of_a_per_device_file_is_remembered_on_its_own(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, clock, writer, _ = make(fake_cgroup_host)
    disks = [upd(r.BLKIO_READ_BPS, (8, 0, 100)), upd(r.BLKIO_READ_BPS, (8, 16, 200))]
    assert [res.outcome for res in executor.apply(disks)] == [Outcome.WRITTEN] * 2
    # Two disks' lines in one file: neither is rewritten while unchanged.
    assert [res.outcome for res in executor.apply(disks)] == [Outcome.SKIPPED_UNCHANGED] * 2
    changed = executor.apply([upd(r.BLKIO_READ_BPS, (8, 0, 300)), disks[1]])
    assert [res.outcome for res in changed] == [Outcome.WRITTEN, Outcome.SKIPPED_UNCHANGED]
    path = changed[0].path
    assert path is not None and len(writer.writes) == 3
    v2 = fake_cgroup_host.mode != "v1"
    assert executor.last_written(path) == ("8:0 rbps=300\n8:16 rbps=200" if v2 else "8:0 300\n8:16 200")
    executor.forget(f"{path}/8:16")  # one disk's lines only
    assert [res.outcome for res in executor.apply(disks)] == [Outcome.WRITTEN, Outcome.WRITTEN]
    assert [res.outcome for res in executor.apply(disks)] == [Outcome.SKIPPED_UNCHANGED] * 2
    executor.forget(f"{path}/8:16")
    assert [res.outcome for res in executor.apply(disks)] == [Outcome.SKIPPED_UNCHANGED, Outcome.WRITTEN]
    executor.forget(path)
    assert [res.outcome for res in executor.apply(disks)] == [Outcome.WRITTEN] * 2
    clock.advance(60)
    assert [res.outcome for res in executor.apply(disks)] == [Outcome.WRITTEN] * 2


# ------------------------------------------------------------------------------------------ shadow mode


def test_intend_writes_nothing_and_audits_what_it_would_write(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    clock, writer, audit, sink = FakeClock(), RecordingWriter(), MemoryAudit(), IntendedSink()
    executor = ResourceExecutor(fake_cgroup_host.layout(), clock, audit, sink, writer=writer)
    before = content(fake_cgroup_host, r.CPU_CFS_QUOTA)
    quota, same = upd(r.CPU_CFS_QUOTA, 50_000, owner="cpusuppress: be quota"), upd(r.CPU_CFS_QUOTA, -1)
    assert before in ("-1", "max 100000")  # a fresh cgroup: unlimited
    results = executor.intend([same, quota, upd(r.CPU_SHARES, -5)], "cpusuppress")
    assert [res.outcome for res in results] == [Outcome.SKIPPED_UNCHANGED, Outcome.INTENDED, Outcome.INVALID]
    assert results[0].ok and results[1].ok and not results[2].ok
    assert writer.attempts == [] and content(fake_cgroup_host, r.CPU_CFS_QUOTA) == before
    (entry,) = audit.entries
    assert (entry.old, entry.new, entry.owner, entry.outcome) == (before, results[1].text, "cpusuppress: be quota",
                                                                  "intended")
    assert sink.counted == [("cpu_cfs_quota", "cpusuppress")]
    # The same intention again within the force-update window: unchanged, as apply answers a value it wrote
    # within the window; the file is not read again, nor the intention audited or counted again...
    reads = writer.reads
    assert executor.intend([quota], "cpusuppress")[0].outcome is Outcome.SKIPPED_UNCHANGED
    assert len(audit.entries) == 1 and len(sink.counted) == 1 and writer.reads == reads
    # ... another value is news at once, and the same one again a window later.
    executor.intend([upd(r.CPU_CFS_QUOTA, 60_000)], "cpusuppress")
    assert len(audit.entries) == 2
    clock.advance(61)
    executor.intend([upd(r.CPU_CFS_QUOTA, 60_000)], "cpusuppress")
    assert len(audit.entries) == 3 and len(sink.counted) == 3


def test_after_shadow_mode_active_mode_writes_what_is_due(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, writer, _ = make(fake_cgroup_host)
    executor.intend([upd(r.CPU_CFS_QUOTA, 50_000)], "cpusuppress")
    (result,) = executor.apply([upd(r.CPU_CFS_QUOTA, 50_000)])
    assert result.outcome is Outcome.WRITTEN and len(writer.writes) == 1


def test_intend_knows_a_device_line_already_in_place(fake_cgroup_host: FakeHost) -> None:
    fake_cgroup_host.mkdir_cgroup(BE)
    executor, _, writer, audit = make(fake_cgroup_host)
    executor.apply([upd(r.BLKIO_READ_BPS, (8, 0, 100)), upd(r.BLKIO_READ_BPS, (8, 16, 200))])
    writes = len(writer.writes)
    held, changed = executor.intend([upd(r.BLKIO_READ_BPS, (8, 16, 200)), upd(r.BLKIO_READ_BPS, (8, 0, 300))], "blkio")
    assert (held.outcome, changed.outcome) == (Outcome.SKIPPED_UNCHANGED, Outcome.INTENDED)
    assert len(writer.writes) == writes and audit.entries[-1].outcome == "intended"
