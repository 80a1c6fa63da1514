"""The audit log: JSON lines, size-based rotation, and failures that never reach the cgroup write."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from koordlet.errors import ConfigError
from koordlet.resourceexecutor import AuditEntry, AuditLog, CgroupUpdate, Outcome, ResourceExecutor
from koordlet.resourceexecutor.audit import AUDIT_FILE
from koordlet.system import resources as r
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock


def entry(n: int) -> AuditEntry:
    return AuditEntry(f"/sys/fs/cgroup/cpu/pod{n}/cpu.shares", "cpu_shares", "1024", str(n), "test", "written")


def lines(path: str) -> list[dict[str, object]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_entry_is_one_json_line(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path / "audit", clock=lambda: 1_700_000_000.25)
    audit.record(AuditEntry("/p/cpu.cfs_quota_us", "cpu_cfs_quota", None, "-1", 'owner "x"\n', "failed", "EBUSY"))
    (record,) = lines(audit.path)
    assert record == {
        "time": "2023-11-14T22:13:20.250Z",
        "path": "/p/cpu.cfs_quota_us",
        "resource": "cpu_cfs_quota",
        "old": None,
        "new": "-1",
        "owner": 'owner "x"\n',
        "outcome": "failed",
        "error": "EBUSY",
    }
    assert audit.path == str(tmp_path / "audit" / AUDIT_FILE)


def test_rotation_keeps_max_files_of_at_most_max_bytes(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, max_bytes=1000, max_files=3, clock=lambda: 0.0)
    for n in range(100):
        audit.record(entry(n))
    existing = [p for p in audit.rotated_paths() if os.path.exists(p)]
    assert existing == [audit.path, audit.path + ".1", audit.path + ".2"]
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(p) for p in existing)
    assert all(0 < os.path.getsize(p) <= 1000 for p in existing)
    # Oldest file first, the kept entries are the newest ones, contiguous and complete.
    kept = [int(str(rec["new"])) for p in reversed(existing) for rec in lines(p)]
    assert kept == list(range(100 - len(kept), 100))
    # Two full rotated files and the current one: far more than one file's worth survives.
    line_bytes = os.path.getsize(audit.path) // len(lines(audit.path))
    assert len(kept) >= 2 * (1000 // line_bytes)


def test_single_file_rotation_starts_over(tmp_path: Path) -> None:
    audit = AuditLog(tmp_path, max_bytes=400, max_files=1)
    for n in range(10):
        audit.record(entry(n))
    assert os.listdir(tmp_path) == [AUDIT_FILE]
    assert os.path.getsize(audit.path) <= 400
    assert lines(audit.path)[-1]["new"] == "9"


def test_bad_limits_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_bytes"):
        AuditLog(tmp_path, max_bytes=0)
    with pytest.raises(ConfigError, match="max_files"):
        AuditLog(tmp_path, max_files=0)


def test_unwritable_audit_never_blocks_the_cgroup_write(
    fake_cgroup_host: FakeHost, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="koordlet.resourceexecutor.audit")
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")  # the audit directory cannot be created below a file
    audit = AuditLog(blocker / "audit")
    fake_cgroup_host.mkdir_cgroup("kubepods")
    executor = ResourceExecutor(fake_cgroup_host.layout(), FakeClock(), audit)
    for quota in (10_000, 20_000, 30_000):
        (result,) = executor.apply([CgroupUpdate(r.CPU_CFS_QUOTA, "kubepods", quota, "t")])
        assert result.outcome is Outcome.WRITTEN
    assert (
        fake_cgroup_host.read_cgroup("kubepods", "cpu.cfs_quota_us" if fake_cgroup_host.mode == "v1" else "cpu.max")
        == "30000"
    )
    failures = [rec for rec in caplog.records if rec.getMessage() == "audit log write failed"]
    assert len(failures) == 1
    # Once the directory can be made, auditing resumes and says so.
    blocker.unlink()
    blocker.mkdir()
    executor.apply([CgroupUpdate(r.CPU_CFS_QUOTA, "kubepods", 40_000, "t")])
    assert [rec["new"] for rec in lines(audit.path)] == ["40000"]
    assert any(rec.getMessage() == "audit log writable again" for rec in caplog.records)


def test_executor_writes_real_audit_lines(fake_cgroup_host: FakeHost, tmp_path: Path) -> None:
    fake_cgroup_host.mkdir_cgroup("kubepods")
    audit = AuditLog(tmp_path / "audit")
    executor = ResourceExecutor(fake_cgroup_host.layout(), FakeClock(), audit)
    executor.apply([CgroupUpdate(r.MEMORY_LIMIT, "kubepods", -1, "memoryevict: reset"),
                    CgroupUpdate(r.MEMORY_LIMIT, "kubepods/gone", 4096, "t")])  # fmt: skip
    written, gone = lines(audit.path)
    assert (written["new"], written["owner"], written["outcome"]) == (
        "-1" if fake_cgroup_host.mode == "v1" else "max",
        "memoryevict: reset",
        "written",
    )
    assert gone["outcome"] == "gone"
    assert gone["old"] is None
