"""SQLite storage for series history and a small key/value store.

Samples are written in chunks, one row per series per flush (:mod:`koordlet.native.chunks`' encoding),
so a node with 1,000 containers writes a few dozen rows a second instead of thousands.  History is
bounded by age and by bytes in use; the oldest chunks go first.

Losing history must not stop the agent, so every fault of the file degrades instead of raising:

- a file SQLite reports as damaged (at open, by ``PRAGMA quick_check``, or later by any statement) is
  moved aside (kept for a post-mortem) and a new one started;
- where WAL cannot work (its index is a shared ``mmap`` of the ``-shm`` file, which a 9p mount without a
  cache refuses: Linux fs/9p/vfs_file.c maps such files read-only, and SQLite answers "disk I/O error"),
  the store runs a rollback journal under an exclusive lock, and when the file cannot be used at all,
  in memory only; either is logged once, naming the file and the mode;
- a write that fails later (a full disk, an I/O error) is dropped: one warning per streak of failures
  and one line when writes succeed again; reads then answer empty and the caller's in-memory rings
  keep serving.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
import zlib
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from koordlet import native
from koordlet.streaklog import Streak

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS chunks (
    series_id INTEGER NOT NULL, t0 REAL NOT NULL, t1 REAL NOT NULL, n INTEGER NOT NULL, data BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS chunks_by_series ON chunks (series_id, t1);
CREATE INDEX IF NOT EXISTS chunks_by_age ON chunks (t1);
CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated REAL NOT NULL);
"""
_COLUMNS: dict[str, frozenset[str]] = {
    "meta": frozenset({"key", "value"}), "series": frozenset({"id", "key"}),
    "chunks": frozenset({"series_id", "t0", "t1", "n", "data"}), "kv": frozenset({"key", "value", "updated"}),
}

JOURNAL_MODES: Final = ("wal", "delete")
"""Journal modes tried in order; after the last, the store keeps its history in memory only."""
MEMORY: Final = "memory"
"""``DiskStore.journal_mode`` of a store that could not use its file."""
MEMORY_ONLY_MAX_BYTES: Final = 16 * 1024 * 1024
"""Bytes cap of a memory-only store: the rings already hold every window, the store only some history."""
_FILE_SUFFIXES: Final = ("", "-wal", "-shm", "-journal")
_CORRUPT_CODES: Final = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})


class StoreDamaged(sqlite3.DatabaseError):
    """The file is a database this build cannot use (wrong schema, failed integrity check)."""


def _is_damaged(exc: sqlite3.Error) -> bool:
    # sqlite_errorcode is the extended code (SQLITE_CORRUPT_INDEX, ...); its low byte is the primary one.
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, StoreDamaged) or (code is not None and (code & 0xFF) in _CORRUPT_CODES)


def _check_content(db: sqlite3.Connection) -> None:
    """Raises StoreDamaged when the file fails SQLite's quick check or holds tables of another schema: found
    here, at open, rather than by a write later."""
    problems = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        raise StoreDamaged(f"quick_check: {'; '.join(problems)}")
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    for table, columns in _COLUMNS.items():
        if table in tables:
            missing = columns - {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
            if missing:
                raise StoreDamaged(f"not this store's schema: table {table} lacks {', '.join(sorted(missing))}")
    row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() if "meta" in tables else None
    if row is not None and row[0] != str(SCHEMA_VERSION):
        raise StoreDamaged(f"schema version {row[0]}, this build reads {SCHEMA_VERSION}")


def _kind(exc: sqlite3.Error) -> str:
    """The primary SQLite error name (SQLITE_IOERR for SQLITE_IOERR_WRITE...): one streak per kind of fault."""
    name = getattr(exc, "sqlite_errorname", None)
    return "_".join(name.split("_")[:2]) if name else type(exc).__name__


def _describe(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    name = getattr(exc, "sqlite_errorname", None)
    return f"{exc} ({name})" if name else str(exc)


def decode_chunk(blob: bytes, n: int) -> tuple[Sequence[float], Sequence[float]]:
    """A chunk's times and values: the C core's format, or zlib-compressed doubles (stores written before it)."""
    if blob[:1] == bytes((native.CHUNK_XOR,)):
        return native.decode_chunk(blob, n)
    raw = array("d")
    raw.frombytes(zlib.decompress(blob))
    if len(raw) != 2 * n:
        raise ValueError(f"chunk holds {len(raw)} numbers, expected {2 * n}")
    return raw[:n], raw[n:]


_KEYS_PER_SELECT: Final = 500
"""Below SQLite's limit of host parameters in one statement (999 in older builds)."""

Row = tuple[str, float, float, int, bytes]
"""A chunk as stored: series key, first and last time, sample count, the encoded samples."""


class DiskStore:
    """History chunks and KV entries in one SQLite file; every method is thread-safe, and none raises for a
    fault of the file or its disk (see the module docstring)."""

    def __init__(self, path: Path, retention_seconds: float, max_bytes: int) -> None:
        self.path = path
        self.retention_seconds = retention_seconds
        self.max_bytes = max_bytes
        self.journal_mode = MEMORY
        """What the store runs: ``wal``, ``delete`` (where WAL cannot work) or ``memory`` (no usable file)."""
        self.dropped_chunks = 0
        """History chunks dropped since the store opened because their write failed."""
        self._streak = Streak(log)
        self._lock = threading.Lock()
        self._series_ids: dict[str, int] = {}
        self._oldest: dict[int, float | None] = {}
        """series id -> the first time of its oldest chunk (None: no chunk), asked once per series."""
        self._db = self._open()

    # -------------------------------------------------------------------------------------- opening

    def _open(self) -> sqlite3.Connection:
        failures = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            failures.append(f"cannot create {self.path.parent}: {_describe(exc)}")
        else:
            for mode in JOURNAL_MODES:
                try:
                    db = self._connect_or_move_aside(mode)
                except (sqlite3.Error, OSError) as exc:
                    failures.append(f"journal_mode={mode.upper()}: {_describe(exc)}")
                    continue
                self.journal_mode = mode
                if failures:
                    log.warning("metric store fell back to another journal mode with an exclusive lock",
                                extra={"path": str(self.path), "failures": "; ".join(failures),
                                       "journal_mode": mode.upper()})
                return db
        return self._memory_only("; ".join(failures))

    def _memory_only(self, reason: str) -> sqlite3.Connection:
        self.journal_mode = MEMORY
        self.max_bytes = min(self.max_bytes, MEMORY_ONLY_MAX_BYTES)
        log.error("metric store cannot be used; keeping history in memory only until koordlet restarts",
                  extra={"path": str(self.path), "reason": reason, "max_mib": self.max_bytes >> 20})
        return self._connect(":memory:", MEMORY)

    def _connect_or_move_aside(self, mode: str) -> sqlite3.Connection:
        try:
            return self._connect(str(self.path), mode)
        except sqlite3.DatabaseError as exc:
            if not _is_damaged(exc):
                raise
            self._move_aside(f"unreadable: {_describe(exc)}")
        return self._connect(str(self.path), mode)

    def _move_aside(self, problem: str) -> None:
        """Renames the file (and its journal files) to ``<name>.corrupt-<unix time>``; raises OSError when it
        cannot (the caller then does without the file)."""
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        for suffix in _FILE_SUFFIXES:
            source = Path(f"{self.path}{suffix}")
            if source.exists():
                source.rename(Path(f"{aside}{suffix}"))
        log.error("metric store moved aside with its history, starting empty",
                  extra={"path": str(self.path), "problem": problem, "moved_to": str(aside)})

    def _connect(self, target: str, mode: str) -> sqlite3.Connection:
        self._series_ids.clear()
        self._oldest.clear()
        db = sqlite3.connect(target, check_same_thread=False, isolation_level=None)
        try:
            if mode == "delete":
                # Exclusive locking keeps the WAL index in heap memory (https://sqlite.org/wal.html#noshm):
                # a file a run on another file system left in WAL mode can still be read, recovered and
                # switched to the rollback journal without the -shm mapping that failed.  It also keeps a
                # second koordlet off this state dir.
                db.execute("PRAGMA locking_mode=EXCLUSIVE")
            # A small page cache: the agent writes in batches and rarely reads history back.
            db.execute("PRAGMA cache_size=-2048")
            _check_content(db)  # before anything is written: a file that is not ours is moved aside as it was
            if mode != MEMORY:
                taken = db.execute(f"PRAGMA journal_mode={mode}").fetchone()[0]
                if taken != mode:  # SQLite keeps the old mode, without an error, when it cannot switch
                    raise sqlite3.OperationalError(f"journal_mode={mode.upper()} not taken, still {taken}")
                # NORMAL: a power cut may lose the last flush; WAL never corrupts the file, the rollback
                # journal rarely may, and a damaged file is moved aside at the next start.
                db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            if db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() is None:
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            self._series_ids.update(db.execute("SELECT key, id FROM series").fetchall())
        except BaseException:
            db.close()
            self._series_ids.clear()
            raise
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -------------------------------------------------------------------------------------- faults

    def _fault(self, exc: BaseException, action: str) -> None:
        """Deals with ``exc`` raised while ``action`` (under the lock): a damaged file is moved aside and the
        store reopened, a disk fault starts or continues a failure streak; anything else is re-raised."""
        if not isinstance(exc, sqlite3.Error) or isinstance(exc, (sqlite3.ProgrammingError, sqlite3.InterfaceError)):
            raise exc
        if _is_damaged(exc) and self.journal_mode != MEMORY:
            self._db.close()
            try:
                self._move_aside(f"damaged ({action}: {_describe(exc)})")
            except OSError as move_error:
                self._db = self._memory_only(f"damaged ({action}: {_describe(exc)}) and cannot be moved aside: "
                                             f"{_describe(move_error)}")
            else:
                self._db = self._open()
            return
        self._streak.fail(_kind(exc), "metric store failing; dropping history writes and answering reads from "
                          "memory until it works again",
                          extra={"path": str(self.path), "action": action, "error": _describe(exc)})

    def _written(self) -> None:
        """Ends a failure streak: called after a history write (the frequent one) succeeded, so that a small
        KV write fitting on an otherwise full disk does not end and restart the streak every report."""
        self._streak.ok("metric store works again",
                        extra={"path": str(self.path), "dropped_chunks": self.dropped_chunks})

    @property
    def failing(self) -> str | None:
        """The kind of fault (the SQLite error, ``SQLITE_FULL``...) of the failure streak in progress, or None."""
        return self._streak.kind

    def _rollback(self) -> None:
        # SQLite itself rolls back on SQLITE_FULL and most I/O errors: a ROLLBACK then fails with "no
        # transaction is active" and would hide the error that matters.
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.debug("metric store rollback failed", extra={"path": str(self.path), "error": _describe(exc)})

    # -------------------------------------------------------------------------------------- series

    def _register(self, keys: Iterable[str], added: list[str]) -> None:
        """Gives every key of ``keys`` not known yet its id, in a few statements (a start flushes thousands)."""
        new = [key for key in dict.fromkeys(keys) if key not in self._series_ids]
        if not new:
            return
        # OR IGNORE: a row whose id a failed statement kept from this map is found instead of refused.
        self._db.executemany("INSERT OR IGNORE INTO series (key) VALUES (?)", [(key,) for key in new])
        for i in range(0, len(new), _KEYS_PER_SELECT):
            part = new[i:i + _KEYS_PER_SELECT]
            marks = ",".join("?" * len(part))
            for series_id, key in self._db.execute(f"SELECT id, key FROM series WHERE key IN ({marks})", part):
                self._series_ids[key] = int(series_id)
                added.append(key)

    def write(self, chunks: Iterable[tuple[str, Sequence[float], Sequence[float]]]) -> int:
        """Writes (series key, times, values) chunks in one transaction; returns how many rows (0 when the
        write failed and was dropped)."""
        return self.write_rows([(key, times[0], times[-1], len(times), native.encode_chunk(times, values))
                                for key, times, values in chunks if len(times)])

    def write_rows(self, rows: Sequence[Row]) -> int:
        """Writes encoded chunks in one transaction; returns how many (0 when the write failed and was dropped)."""
        if not rows:
            return 0
        added: list[str] = []
        with self._lock:
            try:
                self._db.execute("BEGIN")
                self._register((row[0] for row in rows), added)
                ids = self._series_ids
                stored = [(ids[key], t0, t1, n, blob) for key, t0, t1, n, blob in rows]
                self._db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?)", stored)
                self._db.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                for key in added:  # ids handed out in the rolled-back transaction do not exist
                    self._series_ids.pop(key, None)
                self._fault(exc, "writing history")
                self.dropped_chunks += len(rows)
                return 0
            oldest = self._oldest
            for series_id, t0, *_ in stored:
                if series_id in oldest:  # else asked of the file when needed
                    known = oldest[series_id]
                    if known is None or t0 < known:
                        oldest[series_id] = t0
            self._written()
        return len(rows)

    def holds_before(self, key: str, t: float) -> bool:
        """Whether the store may hold samples of ``key`` older than ``t`` (a window reaching back past what
        memory holds asks the file only then: an agent that just started has nothing older on disk)."""
        with self._lock:
            series_id = self._series_ids.get(key)
            if series_id is None:
                return False
            if series_id not in self._oldest:
                try:
                    row = self._db.execute("SELECT MIN(t0) FROM chunks WHERE series_id=?", (series_id,)).fetchone()
                except sqlite3.Error as exc:
                    self._fault(exc, "reading history")
                    return True  # read() decides, and answers empty while the file fails
                self._oldest[series_id] = row[0]
            oldest = self._oldest[series_id]
            return oldest is not None and oldest < t

    def read(self, key: str, start: float, end: float) -> tuple[list[float], list[float]]:
        """Samples of one series with start <= t <= end, oldest first (none when the read fails)."""
        with self._lock:
            series_id = self._series_ids.get(key)
            if series_id is None:
                return [], []
            try:
                rows = self._db.execute(
                    "SELECT data, n FROM chunks WHERE series_id=? AND t1>=? AND t0<=? ORDER BY t0",
                    (series_id, start, end),
                ).fetchall()
            except sqlite3.Error as exc:
                self._fault(exc, "reading history")
                return [], []
        times: list[float] = []
        values: list[float] = []
        for blob, n in rows:
            try:
                chunk_t, chunk_v = decode_chunk(blob, n)
            except (zlib.error, ValueError) as exc:
                log.warning("skipping a damaged history chunk", extra={"series": key, "error": str(exc)})
                continue
            for t, v in zip(chunk_t, chunk_v, strict=True):
                if start <= t <= end and (not times or t > times[-1]):
                    times.append(t)
                    values.append(v)
        return times, values

    def series_keys(self) -> list[str]:
        with self._lock:
            return list(self._series_ids)

    def prune(self, now: float) -> int:
        """Drops chunks past retention, then the oldest until the bytes in use fit; returns rows dropped."""
        with self._lock:
            try:
                self._db.execute("BEGIN")
                dropped = self._db.execute("DELETE FROM chunks WHERE t1 < ?",
                                           (now - self.retention_seconds,)).rowcount
                while self._bytes_in_use() > self.max_bytes:
                    batch = self._db.execute(
                        "DELETE FROM chunks WHERE rowid IN (SELECT rowid FROM chunks ORDER BY t1 LIMIT 256)"
                    ).rowcount
                    if not batch:
                        break
                    dropped += batch
                self._db.execute("DELETE FROM series WHERE id NOT IN (SELECT DISTINCT series_id FROM chunks)")
                series_ids = dict(self._db.execute("SELECT key, id FROM series").fetchall())
                self._db.execute("COMMIT")
            except BaseException as exc:
                self._rollback()
                self._fault(exc, "pruning history")
                return 0
            self._series_ids = series_ids
            self._oldest.clear()
        return dropped

    def _bytes_in_use(self) -> int:
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def bytes_in_use(self) -> int:
        with self._lock:
            try:
                return self._bytes_in_use()
            except sqlite3.Error as exc:
                self._fault(exc, "measuring the store")
                return 0

    # -------------------------------------------------------------------------------------- kv

    def kv_put(self, key: str, value: Any) -> None:
        """Stores a JSON-serialisable value (last NodeSLO, checkpoints); dropped when the write fails."""
        text = json.dumps(value, sort_keys=True)
        with self._lock:
            try:
                self._db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", (key, text, time.time()))
            except sqlite3.Error as exc:
                self._fault(exc, f"storing {key!r}")

    def kv_get(self, key: str) -> Any | None:
        with self._lock:
            try:
                row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
            except sqlite3.Error as exc:
                self._fault(exc, f"reading {key!r}")
                return None
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except json.JSONDecodeError as exc:
            log.warning("stored value is not JSON; ignoring it", extra={"key": key, "error": str(exc)})
            return None

    def kv_delete(self, key: str) -> None:
        with self._lock:
            try:
                self._db.execute("DELETE FROM kv WHERE key=?", (key,))
            except sqlite3.Error as exc:
                self._fault(exc, f"deleting {key!r}")
