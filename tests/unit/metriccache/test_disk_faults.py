"""The metric store's file faults: damaged at open or while running, WAL impossible, no usable file at all.

Each fault is real: files written with garbage, truncated or overwritten by the test, and a child process in
which the kernel refuses shared file mappings as a 9p mount without a cache does (see
tests/fixtures/nosharedmmap.py).  The full-disk faults need a tmpfs and root: tests/integration/test_state_faults.py.
"""

from __future__ import annotations

import json
import logging
import os
import random
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from koordlet.log import TextFormatter
from koordlet.metriccache.disk import MEMORY, MEMORY_ONLY_MAX_BYTES, DiskStore

REPO_ROOT = Path(__file__).resolve().parents[3]
LOGGER = "koordlet.metriccache.disk"
T0 = 1_700_000_000.0


def fill(store: DiskStore, series: int, rounds: int, samples: int = 60) -> None:
    """Writes ``rounds`` flushes of ``series`` series of random (incompressible) values."""
    rng = random.Random(7)
    for r in range(rounds):
        start = T0 + r * samples
        store.write([(f"s{k}", [start + i for i in range(samples)], [rng.random() for _ in range(samples)])
                     for k in range(series)])


def store_file(path: Path, series: int = 40, rounds: int = 10) -> bytes:
    """The bytes of a closed store holding some history (every page in the main file)."""
    store = DiskStore(path, 1e9, 1 << 30)
    fill(store, series, rounds)
    store.close()
    assert not Path(f"{path}-wal").exists(), "closing the last connection checkpoints and removes the WAL"
    return path.read_bytes()


def disk_records(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """The store's records at ``level`` as the agent's text log lines: the message, then its fields."""
    formatter = TextFormatter()
    return [formatter.format(r) for r in caplog.records if r.name == LOGGER and r.levelno == level]


def works(store: DiskStore) -> bool:
    store.write([("after", [T0, T0 + 1], [1.0, 2.0])])
    store.kv_put("k", {"v": 1})
    return store.read("after", 0, T0 + 10) == ([T0, T0 + 1], [1.0, 2.0]) and store.kv_get("k") == {"v": 1}


def garbage(size: int) -> bytes:
    return random.Random(size).randbytes(size)


def foreign_database(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE chunks (x)")
    db.commit()
    db.close()


def newer_schema(path: Path) -> None:
    store_file(path, series=1, rounds=1)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='2' WHERE key='schema'")
    db.commit()
    db.close()


def overwrite_middle(path: Path) -> None:
    data = bytearray(store_file(path))
    middle = len(data) // 2 // 4096 * 4096
    data[middle:middle + 4 * 4096] = garbage(4 * 4096)  # four whole pages: quick_check finds the damage
    path.write_bytes(bytes(data))


def truncate_half(path: Path) -> None:
    data = store_file(path)
    path.write_bytes(data[:len(data) // 2])


@pytest.mark.parametrize(("damage", "reason"), [
    (lambda p: p.write_bytes(garbage(20_000)), "file is not a database (SQLITE_NOTADB)"),
    (truncate_half, "database disk image is malformed (SQLITE_CORRUPT"),
    (overwrite_middle, "quick_check:"),
    (foreign_database, "not this store's schema: table chunks lacks data, n, series_id, t0, t1"),
    (newer_schema, "schema version 2, this build reads 1"),
], ids=["garbage", "truncated", "overwritten-pages", "foreign-schema", "newer-schema"])
def test_a_damaged_file_is_moved_aside_with_one_line_naming_it_and_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any, reason: str) -> None:
    path = tmp_path / "state" / "metrics.db"
    path.parent.mkdir()
    damage(path)
    before = path.read_bytes()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store = DiskStore(path, 1e9, 1 << 30)
    try:
        (line,) = disk_records(caplog, logging.ERROR)
        (aside,) = [p for p in path.parent.iterdir() if p.name.startswith("metrics.db.corrupt-")]
        assert "metric store moved aside" in line, line
        assert f"path={path}" in line and reason in line and f"moved_to={aside}" in line, line
        assert aside.read_bytes() == before  # kept for a post-mortem, as it was
        assert not disk_records(caplog, logging.WARNING)
        assert store.journal_mode == "wal" and store.series_keys() == []
        assert works(store)
    finally:
        store.close()


def test_damage_found_while_running_moves_the_file_aside_and_the_store_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "metrics.db"
    store = DiskStore(path, 1e9, 1 << 30)
    try:
        fill(store, series=40, rounds=250)  # several MB: more than the store's 2 MB page cache
        other = sqlite3.connect(path)
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page into the main file
        other.close()
        size = path.stat().st_size
        assert size > 2 * 2048 * 1024, size
        # The oldest history (the first half of the file) is no longer in the page cache: overwrite it.
        with open(path, "r+b") as f:
            f.seek(size // 10 // 4096 * 4096)
            f.write(garbage(size * 4 // 10 // 4096 * 4096))
        with caplog.at_level(logging.INFO, logger=LOGGER):
            answers = [store.read(f"s{k}", 0, T0 + 1e6) for k in range(40)]
        (line,) = disk_records(caplog, logging.ERROR)
        assert "metric store moved aside" in line and f"path={path}" in line, line
        assert 'problem="damaged (reading history: database disk image is malformed' in line, line
        assert any(p.name.startswith("metrics.db.corrupt-") for p in tmp_path.iterdir())
        # Series read after the move find a new, empty store; nothing was raised to the reader.
        assert answers[-1] == ([], [])
        assert store.journal_mode == "wal" and works(store)
    finally:
        store.close()


@pytest.mark.parametrize("obstacle", ["parent-is-a-file", "path-is-a-directory"])
def test_no_usable_file_keeps_history_in_memory_saying_so_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, obstacle: str) -> None:
    if obstacle == "parent-is-a-file":
        (tmp_path / "state").write_text("")
        path, reason = tmp_path / "state" / "metrics.db", f"cannot create {tmp_path / 'state'}: File exists"
    else:
        path, reason = tmp_path / "metrics.db", "journal_mode=DELETE: unable to open database file"
        path.mkdir()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        store = DiskStore(path, 1e9, 1 << 30)
    try:
        (line,) = disk_records(caplog, logging.ERROR)
        assert "metric store cannot be used" in line and "memory only" in line, line
        assert f"path={path}" in line and reason in line, line
        assert store.journal_mode == MEMORY and store.max_bytes == MEMORY_ONLY_MAX_BYTES
        assert works(store)
        assert len(disk_records(caplog, logging.ERROR)) == 1
    finally:
        store.close()


# ------------------------------------------------------------------------------------ WAL cannot work

CHILD = """
import json, logging, os, sys
from pathlib import Path
from koordlet.metriccache.disk import DiskStore
from tests.fixtures.nosharedmmap import forbid_shared_file_mmap, shared_file_mmap_error

from koordlet.log import record_fields

class Fields(logging.Formatter):
    def format(self, record):
        return super().format(record) + "".join(f" {k}={v}" for k, v in record_fields(record).items())

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
logging.getLogger().handlers[0].setFormatter(Fields("%(levelname)s %(name)s: %(message)s"))
path, how, t = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
if how == "no-shared-mmap":
    forbid_shared_file_mmap()
error = shared_file_mmap_error()
store = DiskStore(path, 1e9, 1 << 20)
written = store.write([("node_cpu{}", [t, t + 1.0], [0.5, 0.75])])
store.kv_put("last", {"t": t})
if how == "killed":
    os._exit(0)  # no close: the WAL keeps what this run wrote, as after kill -9
print(json.dumps({"mmap_errno": None if error is None else error.errno, "journal_mode": store.journal_mode,
                  "written": written, "history": store.read("node_cpu{}", 0.0, 1e12), "kv": store.kv_get("last")}))
store.close()
"""


def run_child(path: Path, how: str, t: float) -> tuple[dict[str, Any], list[str]]:
    """(the child's report, its log lines) of one store opened, written and read in a child process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", CHILD, str(path), how, str(t)], env=env, cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return report, done.stderr.splitlines()


def test_where_wal_cannot_map_its_index_the_store_uses_a_rollback_journal_and_says_so_once(tmp_path: Path) -> None:
    path = tmp_path / "metrics.db"
    first, lines = run_child(path, "no-shared-mmap", T0)
    assert first["mmap_errno"] == 22, "the kernel refuses shared file mappings in the child (EINVAL, as 9p)"
    assert first["journal_mode"] == "delete" and first["written"] == 1
    assert first["history"] == [[T0, T0 + 1], [0.5, 0.75]] and first["kv"] == {"t": T0}
    (line,) = [line for line in lines if line.startswith("WARNING")]
    assert "metric store fell back to another journal mode with an exclusive lock" in line, line
    assert f"path={path}" in line and "failures=journal_mode=WAL: disk I/O error" in line, line
    assert "journal_mode=DELETE" in line, line
    assert not [line for line in lines if line.startswith("ERROR")]

    # A restart on the same file system finds what the first run wrote.
    second, lines = run_child(path, "no-shared-mmap", T0 + 10)
    assert second["journal_mode"] == "delete"
    assert second["history"] == [[T0, T0 + 1, T0 + 10, T0 + 11], [0.5, 0.75, 0.5, 0.75]]
    assert len([line for line in lines if line.startswith("WARNING")]) == 1


def test_where_shared_mappings_work_the_store_runs_wal_without_a_word(tmp_path: Path) -> None:
    report, lines = run_child(tmp_path / "metrics.db", "plain", T0)
    assert report["mmap_errno"] is None and report["journal_mode"] == "wal"
    assert report["history"] == [[T0, T0 + 1], [0.5, 0.75]]
    assert not [line for line in lines if line.startswith(("WARNING", "ERROR"))], lines


def test_a_wal_left_by_a_killed_run_elsewhere_is_recovered_without_shared_mappings(tmp_path: Path) -> None:
    path = tmp_path / "metrics.db"
    run_child(path, "killed", T0)
    assert Path(f"{path}-wal").stat().st_size > 0, "the killed run's writes are in the WAL only"
    report, lines = run_child(path, "no-shared-mmap", T0 + 10)
    assert report["journal_mode"] == "delete"
    assert report["history"] == [[T0, T0 + 1, T0 + 10, T0 + 11], [0.5, 0.75, 0.5, 0.75]]
    assert len([line for line in lines if line.startswith("WARNING")]) == 1
    assert path.read_bytes()[18:20] == b"\x01\x01", "the file header says rollback journal now (not WAL)"
