"""Batch reads through FileSet on fake cgroup v1 and v2 trees, compared with the Python reference."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordlet import native
from koordlet import native_ref as ref
from koordlet.errors import CgroupGone, ParseError

V1_FILES = {
    "cpuacct/kubepods/pod1/c1/cpuacct.usage": (native.Kind.INT, None, b"123456789\n"),
    "cpu/kubepods/pod1/c1/cpu.stat": (
        native.Kind.KV,
        ["nr_periods", "nr_throttled", "throttled_time"],
        b"nr_periods 10\nnr_throttled 3\nthrottled_time 999\n",
    ),
    "cpu/kubepods/pod1/c1/cpu.cfs_quota_us": (native.Kind.INT, None, b"-1\n"),
    "memory/kubepods/pod1/c1/memory.stat": (
        native.Kind.KV,
        ["total_inactive_anon", "total_active_anon"],
        b"cache 1\ntotal_inactive_anon 4096\ntotal_active_anon 8192\n",
    ),
    "memory/kubepods/pod1/c1/memory.usage_in_bytes": (native.Kind.INT, None, b"1048576\n"),
    "cpuset/kubepods/pod1/c1/cpuset.cpus": (native.Kind.CPULIST, None, b"0-1\n"),
}
V2_FILES = {
    "kubepods.slice/pod1.slice/c1.scope/cpu.stat": (
        native.Kind.KV,
        ["usage_usec", "nr_throttled"],
        b"usage_usec 2000\nuser_usec 1000\nnr_throttled 1\n",
    ),
    "kubepods.slice/pod1.slice/c1.scope/cpu.max": (native.Kind.CPU_MAX, None, b"max 100000\n"),
    "kubepods.slice/pod1.slice/c1.scope/memory.current": (native.Kind.INT, None, b"4096\n"),
    "kubepods.slice/pod1.slice/c1.scope/memory.max": (native.Kind.INT, None, b"max\n"),
    "kubepods.slice/pod1.slice/c1.scope/cpu.pressure": (
        native.Kind.PSI,
        None,
        b"some avg10=0.50 avg60=0.10 avg300=0.00 total=77\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\n",
    ),
    "kubepods.slice/pod1.slice/c1.scope/cpuset.cpus.effective": (native.Kind.CPULIST, None, b"0-3\n"),
}
TREES = {"v1": V1_FILES, "v2": V2_FILES}


@pytest.fixture(autouse=True)
def fd_budget() -> Iterator[None]:
    previous = native.set_fd_budget(10_000)
    yield
    native.set_fd_budget(previous)


def build(root: Path, files: dict[str, tuple[native.Kind, list[str] | None, bytes]]) -> None:
    for relative, (_, _, content) in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def rewrite(path: Path, content: bytes) -> None:
    """In place, as the kernel updates a cgroup file (a rename would give the kept fd a stale inode)."""
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(content)


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_batch_matches_reference(tmp_path: Path, layout: str) -> None:
    files = TREES[layout]
    build(tmp_path, files)
    fs = native.FileSet()
    slots = {rel: fs.add(tmp_path / rel, kind, keys) for rel, (kind, keys, _) in files.items()}
    result = fs.read()
    for rel, (kind, keys, _) in files.items():
        expected = ref.read_file(tmp_path / rel, int(kind), keys)
        assert result.error(slots[rel]) == expected.err == 0
        assert result.value(slots[rel]) == native.read_file(tmp_path / rel, kind, keys)
    assert fs.open_fds == len(files)


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_kept_open_files_return_fresh_values(tmp_path: Path, layout: str) -> None:
    build(tmp_path, TREES[layout])
    rel = next(r for r, (k, _, _) in TREES[layout].items() if k is native.Kind.INT)
    fs = native.FileSet()
    slot = fs.add(tmp_path / rel, native.Kind.INT)
    first = fs.read().value(slot)
    rewrite(tmp_path / rel, b"987654321\n")
    assert fs.read().value(slot) == 987654321 != first
    assert fs.open_fds == 1


def test_vanished_and_garbage_files_fail_alone(tmp_path: Path) -> None:
    build(tmp_path, V1_FILES)
    fs = native.FileSet()
    good = fs.add(tmp_path / "cpuacct/kubepods/pod1/c1/cpuacct.usage", native.Kind.INT)
    gone = fs.add(tmp_path / "cpuacct/kubepods/pod2/c9/cpuacct.usage", native.Kind.INT)
    garbage = tmp_path / "memory/kubepods/pod1/c1/memory.usage_in_bytes"
    bad = fs.add(garbage, native.Kind.INT)
    rewrite(garbage, b"\x00\xffnot a number")
    result = fs.read()
    assert result.value(good) == 123456789
    assert result.error(gone) == errno.ENOENT
    assert result.error(bad) == errno.EBADMSG
    assert result.get(gone) is None
    with pytest.raises(CgroupGone, match="pod2"):
        result.value(gone)
    with pytest.raises(ParseError, match=r"memory\.usage_in_bytes"):
        result.value(bad)
    # The file reappearing (a cgroup created again) is picked up on the next read.
    (tmp_path / "cpuacct/kubepods/pod2/c9").mkdir(parents=True)
    (tmp_path / "cpuacct/kubepods/pod2/c9/cpuacct.usage").write_bytes(b"5\n")
    assert fs.read().value(gone) == 5


def test_slots_are_reused_and_results_are_snapshots(tmp_path: Path) -> None:
    build(tmp_path, V1_FILES)
    paths = [tmp_path / rel for rel, (k, _, _) in V1_FILES.items() if k is native.Kind.INT]
    fs = native.FileSet()
    slots = [fs.add(p, native.Kind.INT) for p in paths]
    assert slots == list(range(len(paths)))
    before = fs.read()
    fs.remove(slots[0])
    assert fs.open_fds == len(paths) - 1
    with pytest.raises(KeyError):
        fs.remove(slots[0])
    assert fs.add(paths[0], native.Kind.INT) == slots[0]
    rewrite(paths[1], b"1\n")
    assert before.value(slots[1]) != 1  # an earlier result keeps its own values
    assert fs.read().value(slots[1]) == 1
    with pytest.raises(KeyError):
        before.value(99)


def test_budget_limits_kept_fds(tmp_path: Path) -> None:
    build(tmp_path, V1_FILES)
    native.set_fd_budget(native.kept_fds() + 2)
    fs = native.FileSet()
    slots = [fs.add(tmp_path / rel, kind, keys) for rel, (kind, keys, _) in V1_FILES.items()]
    result = fs.read()
    assert all(result.error(s) == 0 for s in slots)
    assert fs.open_fds == 2
    # Entries beyond the budget are read open/read/close: still fresh.
    rel = "cpuset/kubepods/pod1/c1/cpuset.cpus"
    rewrite(tmp_path / rel, b"3\n")
    assert fs.read().value(slots[list(V1_FILES).index(rel)]) == [3]
    fs.close()
    assert fs.open_fds == 0 and len(fs) == 0


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_no_fd_or_memory_leak_over_many_sets(tmp_path: Path) -> None:
    build(tmp_path, V1_FILES)
    base_fds = open_fd_count()
    base_kept = native.kept_fds()

    def cycle() -> None:
        fs = native.FileSet()
        for rel, (kind, keys, _) in V1_FILES.items():
            fs.add(tmp_path / rel, kind, keys)
        fs.add(tmp_path / "missing", native.Kind.INT)
        for _ in range(3):
            result = fs.read()
            for slot in result.slots():
                result.get(slot)
        del fs

    for _ in range(20):
        cycle()
    rss_before = _rss_kib()
    for _ in range(2000):
        cycle()
    assert open_fd_count() == base_fds
    assert native.kept_fds() == base_kept
    # 2000 sets x 7 files: a leak of even one path string per set would show; allow allocator noise.
    assert _rss_kib() - rss_before < 4096


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_single_readers_raise_named_errors(tmp_path: Path) -> None:
    with pytest.raises(CgroupGone, match="nope"):
        native.read_int(tmp_path / "nope")
    with pytest.raises(ValueError, match="invalid path"):
        native.read_int("")
    (tmp_path / "f").write_bytes(b"a 1\nb 2\n")
    assert native.read_kv(tmp_path / "f") == {"a": 1, "b": 2}
    assert native.read_kv(tmp_path / "f", ["b"]) == {"b": 2}
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError) as info:
        native.read_int(tmp_path / "dir")
    assert info.value.errno == errno.EISDIR
