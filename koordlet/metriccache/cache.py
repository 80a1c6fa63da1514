"""The metric cache: recent samples in memory rings, history on disk, one query interface over both."""

from __future__ import annotations

import functools
import logging
import math
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from koordlet.metriccache.aggregate import Aggregate, aggregate
from koordlet.metriccache.disk import DiskStore
from koordlet.metriccache.ring import Ring
from koordlet.native import RingColumn, encode_pending

log = logging.getLogger(__name__)

Labels = tuple[tuple[str, str], ...]
_LOOKUPS_KEPT = 64


_PAIRS_KEPT = 65536
_pairs: dict[tuple[str, str], tuple[str, str]] = {}
"""One shared (key, value) tuple per label pair: a pod's or container's pair recurs in each of its series
(tens of thousands of series, a few thousand distinct pairs), and each copy is a 64-byte object."""


def labels_of(mapping: Mapping[str, str] | None = None, **kwargs: str) -> Labels:
    """The canonical (sorted) label tuple of a series."""
    merged = dict(mapping or {}, **kwargs)
    pairs = _pairs
    if len(pairs) > _PAIRS_KEPT:  # pods come and go: start over rather than keep every pair ever seen
        pairs.clear()
    return tuple([pairs.setdefault(item, item) for item in sorted(merged.items())])


@functools.lru_cache(maxsize=16384)
def pod_labels(uid: str) -> Labels:
    """``labels_of(pod=uid)``, built once per pod: strategies look up every pod's series every round."""
    return (("pod", uid),)


@functools.lru_cache(maxsize=32768)
def series_key(name: str, labels: Labels) -> str:
    """The store's name of a series (a flush names each of thousands of series)."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return f"{name}{{{inner}}}"


@dataclass(frozen=True)
class CacheSettings:
    """How much the cache keeps, where, and for how long."""

    path: Path
    """SQLite file for history and KV (created with its directory)."""
    interval_seconds: float = 1.0
    """Expected time between samples of a series; sizes the rings."""
    default_window_seconds: float = 600.0
    """Seconds of samples kept in memory per series unless ``windows`` says otherwise."""
    windows: Mapping[str, float] = field(default_factory=dict)
    """Per metric name, seconds kept in memory (node series cover the 30-minute aggregates)."""
    intervals: Mapping[str, float] = field(default_factory=dict)
    """Per metric name, time between samples when not ``interval_seconds`` (PSI every 10 s)."""
    retention_seconds: float = 12 * 3600.0
    """History kept on disk (Koordinator's --tsdb-retention-duration default, 12h)."""
    max_disk_bytes: int = 100 * 1024 * 1024
    """Disk cap; the oldest history goes first (Koordinator caps its TSDB at 100MB)."""
    volatile: frozenset[str] = frozenset()
    """Metric names kept in memory only (signals that matter now, like throttling and pressure): history
    on disk is for usage, which NodeMetric and restarts need."""

    def window_for(self, name: str) -> float:
        return self.windows.get(name, self.default_window_seconds)

    def capacity_for(self, name: str) -> int:
        """Ring slots for a series: its window over its interval, plus slack for jitter."""
        interval = self.intervals.get(name, self.interval_seconds)
        return max(2, int(self.window_for(name) / interval) + 2)


class _Lookup:
    """The rings of a sequence of label sets, as of one generation of the cache's series."""

    __slots__ = ("column", "generation", "labels", "rings")

    def __init__(self, labels: Sequence[Labels], generation: int, rings: list[Ring | None]) -> None:
        self.labels = labels
        self.generation = generation
        self.rings = rings
        self.column: RingColumn | None = None


class MetricCache:
    """Time series keyed by (metric name, labels) plus a small key/value store.

    Writes land in a per-series ring; :meth:`flush` moves what is new to disk in one transaction.
    A ring created after a restart is first refilled from disk, so window queries span the restart.
    Thread-safe: collectors append while reporters and strategies query.
    """

    def __init__(self, settings: CacheSettings, clock: Callable[[], float]) -> None:
        self.settings = settings
        self._clock = clock
        self._lock = threading.RLock()
        self._rings: dict[tuple[str, Labels], Ring] = {}
        self._generation = 0
        """Counts the rings made and dropped: a lookup of rings made since it last moved still holds."""
        self._lookups: dict[tuple[str, int], _Lookup] = {}
        """(name, id of a tuple of label sets) -> (that tuple, the generation, its rings): see :meth:`_rings_of`."""
        self.disk = DiskStore(settings.path, settings.retention_seconds, settings.max_disk_bytes)

    # ------------------------------------------------------------------------------------- writes

    def _ring(self, name: str, labels: Labels, create: bool) -> Ring | None:
        ring = self._rings.get((name, labels))
        if ring is None and create:
            window = self.settings.window_for(name)
            ring = Ring(self.settings.capacity_for(name))
            if name not in self.settings.volatile:
                now = self._clock()
                times, values = self.disk.read(series_key(name, labels), now - window, now)
                for t, v in zip(times, values, strict=True):
                    ring.append(t, v)
            ring.pending = 0
            self._rings[(name, labels)] = ring
            self._generation += 1
        return ring

    def append(self, name: str, labels: Labels, t: float, value: float) -> None:
        with self._lock:
            ring = self._ring(name, labels, create=True)
            assert ring is not None
            ring.append(t, value)

    def append_many(self, samples: Iterable[tuple[str, Labels, float, float]]) -> None:
        with self._lock:
            for name, labels, t, value in samples:
                ring = self._rings.get((name, labels))
                if ring is None:  # not `or`: an empty ring is falsy (len 0)
                    ring = self._ring(name, labels, create=True)
                    assert ring is not None
                ring.append(t, value)

    def handles(self, series: Sequence[tuple[str, Labels]]) -> list[Ring]:
        """The rings of ``series`` (made when missing), to read without a lookup each; a handle of a series
        dropped later is no longer the cache's, so refresh handles when series change."""
        with self._lock:
            rings = []
            for name, labels in series:
                ring = self._ring(name, labels, create=True)
                assert ring is not None
                rings.append(ring)
            return rings

    def column(self, series: Sequence[tuple[str, Labels]]) -> RingColumn:
        """The rings of ``series`` (made when missing) as one column for :meth:`append_column`: the collectors'
        per-tick appends to thousands of series, in one C call.  Like a handle, a column keeps the ring of a
        series dropped later, whose appends no query sees: rebuild columns when series change."""
        return RingColumn([ring.buffer for ring in self.handles(series)])

    def append_column(self, column: RingColumn, t: float, values: Sequence[float]) -> None:
        """Appends values[i] at time t to the column's ring i, skipping NaN (a failed read)."""
        with self._lock:
            column.append(t, values)

    def drop(self, name: str, labels: Labels) -> None:
        """Forgets a series in memory (its pod went); its history ages out on disk."""
        with self._lock:
            ring = self._rings.pop((name, labels), None)
            self._generation += 1
            if ring is not None and ring.pending and name not in self.settings.volatile:
                self.disk.write([(series_key(name, labels), *ring.tail(ring.pending))])

    def series(self, name: str) -> list[Labels]:
        """Label sets of the series of ``name`` held in memory."""
        with self._lock:
            return [labels for (n, labels) in self._rings if n == name]

    # ------------------------------------------------------------------------------------- queries

    def latest(self, name: str, labels: Labels, max_age_seconds: float | None = None) -> tuple[float, float] | None:
        """The newest sample, or None (also when older than ``max_age_seconds``)."""
        with self._lock:
            ring = self._rings.get((name, labels))
            last = ring.last() if ring is not None else None
        if last is None:
            return None
        if max_age_seconds is not None and self._clock() - last[0] > max_age_seconds:
            return None
        return last

    def latest_values(self, name: str, labels: Sequence[Labels], max_age_seconds: float) -> list[float | None]:
        """:meth:`latest`'s value for each label set (None: no sample, or older than ``max_age_seconds``), under
        one lock and one clock reading: strategies ask it of every pod or container every round."""
        with self._lock:
            times, values = self._column_of(name, labels).last_all()
        now = self._clock()
        # NaN (no sample) fails the comparison too.
        return [value if now - t <= max_age_seconds else None for t, value in zip(times, values, strict=True)]

    def _rings_of(self, name: str, labels: Sequence[Labels]) -> list[Ring | None]:
        """The ring of each series (None: not held), under the lock."""
        return self._lookup(name, labels).rings

    def _column_of(self, name: str, labels: Sequence[Labels]) -> RingColumn:
        """:meth:`_rings_of` as a column for the C core, under the lock."""
        lookup = self._lookup(name, labels)
        if lookup.column is None:
            lookup.column = RingColumn([None if ring is None else ring.buffer for ring in lookup.rings])
        return lookup.column

    def _lookup(self, name: str, labels: Sequence[Labels]) -> _Lookup:
        """A caller asking about the same tuple of label sets round after round (a strategy's pods, kept while
        the pod list stays) gets the lookup it got last time while no ring was made or dropped since: one dict
        lookup for the lot."""
        if type(labels) is not tuple:
            return _Lookup(labels, self._generation, [self._rings.get((name, one)) for one in labels])
        key = (name, id(labels))
        known = self._lookups.get(key)
        if known is not None and known.labels is labels and known.generation == self._generation:
            return known
        lookup = _Lookup(labels, self._generation, [self._rings.get((name, one)) for one in labels])
        if len(self._lookups) >= _LOOKUPS_KEPT:
            self._lookups.clear()
        self._lookups[key] = lookup
        return lookup

    def window(self, name: str, labels: Labels, start: float, end: float) -> tuple[list[float], list[float]]:
        """Samples with start <= t <= end from memory, and from disk for what memory no longer holds."""
        with self._lock:
            ring = self._rings.get((name, labels))
            first = ring.first_time() if ring is not None else None
            if ring is not None and first is not None and first <= start:
                return ring.window(start, end)
            mem_t, mem_v = ring.window(start, end) if ring is not None else ([], [])
        key = series_key(name, labels)
        if first is not None and not self.disk.holds_before(key, first):
            return mem_t, mem_v
        disk_t, disk_v = self.disk.read(key, start, end)
        if first is not None:
            # Memory is authoritative from its first sample on; disk fills in only what came before.
            keep = bisect_left(disk_t, first)
            disk_t, disk_v = disk_t[:keep], disk_v[:keep]
        return disk_t + mem_t, disk_v + mem_v

    def mean(self, name: str, labels: Labels, seconds: float) -> float | None:
        """The average of the last ``seconds``; None without samples.  :meth:`aggregate` without the
        percentiles, for callers asking hundreds of series a round."""
        end = self._clock()
        values = self.window(name, labels, end - seconds, end)[1]
        return math.fsum(values) / len(values) if values else None

    def means(self, name: str, labels: Sequence[Labels], seconds: float) -> list[float | None]:
        """:meth:`mean` of each label set, with one clock reading and one lock for the series memory covers."""
        end = self._clock()
        start = end - seconds
        out: list[float | None] = []
        from_disk: list[int] = []
        with self._lock:
            for ring in self._rings_of(name, labels):
                first = ring.first_time() if ring is not None else None
                if ring is None or first is None or first > start:
                    from_disk.append(len(out))  # memory does not reach back far enough: window() asks disk
                    out.append(None)
                    continue
                out.append(ring.mean(start, end))
        for i in from_disk:
            values = self.window(name, labels[i], start, end)[1]
            out[i] = math.fsum(values) / len(values) if values else None
        return out

    def aggregate(self, name: str, labels: Labels, seconds: float, end: float | None = None) -> Aggregate | None:
        """Statistics of the last ``seconds`` (up to ``end``, default now); None without samples."""
        end = self._clock() if end is None else end
        return aggregate(*self.window(name, labels, end - seconds, end))

    # ------------------------------------------------------------------------------------- disk

    def flush(self) -> int:
        """Writes samples not yet on disk; returns how many series were written.  Volatile series never go to
        disk (their pending counts are left alone: nothing reads them)."""
        with self._lock:
            volatile = self.settings.volatile
            held = [(key, ring) for key, ring in self._rings.items() if ring.pending and key[0] not in volatile]
            encoded = encode_pending([ring.buffer for _, ring in held])
        rows = [(series_key(*key), encoded.first[i], encoded.last[i], encoded.counts[i], encoded.chunk(i))
                for i, (key, _) in enumerate(held)]
        try:
            return self.disk.write_rows(rows)
        except Exception:
            # Put the samples back in line for the next flush rather than losing them.
            with self._lock:
                for i, (_, ring) in enumerate(held):
                    ring.pending = min(len(ring), ring.pending + encoded.counts[i])
            raise

    def prune(self) -> int:
        return self.disk.prune(self._clock())

    def kv_put(self, key: str, value: Any) -> None:
        self.disk.kv_put(key, value)

    def kv_get(self, key: str) -> Any | None:
        return self.disk.kv_get(key)

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self.disk.close()
