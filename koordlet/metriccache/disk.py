"""SQLite (WAL) storage for series history and a small key/value store.

Samples are written in chunks, one row per series per flush (zlib-compressed float64 times and values),
so a node with 1,000 containers writes a few dozen rows a second instead of thousands.  History is
bounded by age and by bytes in use; the oldest chunks go first.  A database the SQLite library cannot
read is moved aside (kept for a post-mortem) and a new one started: losing history must not stop the
agent.
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
from typing import Any

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


def encode_chunk(times: Sequence[float], values: Sequence[float]) -> bytes:
    return zlib.compress(array("d", times).tobytes() + array("d", values).tobytes(), 1)


def decode_chunk(blob: bytes, n: int) -> tuple[list[float], list[float]]:
    raw = array("d")
    raw.frombytes(zlib.decompress(blob))
    if len(raw) != 2 * n:
        raise ValueError(f"chunk holds {len(raw)} numbers, expected {2 * n}")
    return raw[:n].tolist(), raw[n:].tolist()


class DiskStore:
    """History chunks and KV entries in one SQLite file; every method is thread-safe."""

    def __init__(self, path: Path, retention_seconds: float, max_bytes: int) -> None:
        self.path = path
        self.retention_seconds = retention_seconds
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._series_ids: dict[str, int] = {}
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        try:
            return self._connect()
        except sqlite3.DatabaseError as exc:
            aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
            log.error("metric store %s is unreadable (%s); moved to %s, starting empty", self.path, exc, aside)
            for suffix in ("", "-wal", "-shm"):
                source = Path(f"{self.path}{suffix}")
                if source.exists():
                    source.rename(Path(f"{aside}{suffix}"))
            return self._connect()

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a power cut may lose the last flush but never corrupts the file.
            db.execute("PRAGMA synchronous=NORMAL")
            # A small page cache: the agent writes in batches and rarely reads history back.
            db.execute("PRAGMA cache_size=-2048")
            db.executescript(_SCHEMA)
            row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
            elif row[0] != str(SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"schema version {row[0]}, this build reads {SCHEMA_VERSION}")
            for series_id, key in db.execute("SELECT id, key FROM series"):
                self._series_ids[key] = series_id
        except sqlite3.DatabaseError:
            db.close()
            self._series_ids.clear()
            raise
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -------------------------------------------------------------------------------------- series

    def _series_id(self, key: str) -> int:
        series_id = self._series_ids.get(key)
        if series_id is None:
            cursor = self._db.execute("INSERT INTO series (key) VALUES (?)", (key,))
            series_id = int(cursor.lastrowid or 0)
            self._series_ids[key] = series_id
        return series_id

    def write(self, chunks: Iterable[tuple[str, Sequence[float], Sequence[float]]]) -> int:
        """Writes (series key, times, values) chunks in one transaction; returns how many rows."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                rows = [(self._series_id(key), times[0], times[-1], len(times), encode_chunk(times, values))
                        for key, times, values in chunks if times]
                self._db.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                # Ids handed out in the rolled-back transaction do not exist.
                self._series_ids = dict(self._db.execute("SELECT key, id FROM series").fetchall())
                raise
        return len(rows)

    def read(self, key: str, start: float, end: float) -> tuple[list[float], list[float]]:
        """Samples of one series with start <= t <= end, oldest first."""
        with self._lock:
            series_id = self._series_ids.get(key)
            if series_id is None:
                return [], []
            rows = self._db.execute(
                "SELECT data, n FROM chunks WHERE series_id=? AND t1>=? AND t0<=? ORDER BY t0",
                (series_id, start, end),
            ).fetchall()
        times: list[float] = []
        values: list[float] = []
        for blob, n in rows:
            try:
                chunk_t, chunk_v = decode_chunk(blob, n)
            except (zlib.error, ValueError) as exc:
                log.warning("skipping a damaged history chunk of %s: %s", key, exc)
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
            dropped = self._db.execute("DELETE FROM chunks WHERE t1 < ?", (now - self.retention_seconds,)).rowcount
            while self._bytes_in_use() > self.max_bytes:
                batch = self._db.execute(
                    "DELETE FROM chunks WHERE rowid IN (SELECT rowid FROM chunks ORDER BY t1 LIMIT 256)"
                ).rowcount
                if not batch:
                    break
                dropped += batch
            self._db.execute(
                "DELETE FROM series WHERE id NOT IN (SELECT DISTINCT series_id FROM chunks)"
            )
            self._series_ids = dict(self._db.execute("SELECT key, id FROM series").fetchall())
        return dropped

    def _bytes_in_use(self) -> int:
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        free = self._db.execute("PRAGMA freelist_count").fetchone()[0]
        size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * size)

    def bytes_in_use(self) -> int:
        with self._lock:
            return self._bytes_in_use()

    # -------------------------------------------------------------------------------------- kv

    def kv_put(self, key: str, value: Any) -> None:
        """Stores a JSON-serialisable value (last NodeSLO, checkpoints)."""
        text = json.dumps(value, sort_keys=True)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO kv VALUES (?, ?, ?)", (key, text, time.time()))

    def kv_get(self, key: str) -> Any | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except json.JSONDecodeError as exc:
            log.warning("stored value %r is not JSON (%s); ignoring it", key, exc)
            return None

    def kv_delete(self, key: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM kv WHERE key=?", (key,))
