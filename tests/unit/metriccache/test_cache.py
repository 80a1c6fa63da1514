"""Metric cache: rings, windows across memory and disk, aggregates, restart, retention, damage."""

from __future__ import annotations

import bisect
import math
import random
import sqlite3
import zlib
from array import array
from pathlib import Path

import pytest

from koordlet.metriccache import CacheSettings, Labels, MetricCache, aggregate, labels_of, percentile
from koordlet.metriccache.ring import Ring
from koordlet.native import RingColumn


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(tmp_path: Path, clock: Clock, **kw: object) -> MetricCache:
    settings = CacheSettings(path=tmp_path / "state" / "metrics.db", **kw)  # type: ignore[arg-type]
    return MetricCache(settings, clock)


def test_ring_wraps_and_drops_out_of_order() -> None:
    ring = Ring(3)
    for t in (1.0, 2.0, 3.0, 4.0):
        assert ring.append(t, t * 10)
    assert not ring.append(4.0, 0.0) and not ring.append(1.5, 0.0)
    assert ring.window(0, 10) == ([2.0, 3.0, 4.0], [20.0, 30.0, 40.0])
    assert ring.window(2.5, 3.5) == ([3.0], [30.0])
    assert ring.tail(2) == ([3.0, 4.0], [30.0, 40.0])
    assert ring.last() == (4.0, 40.0)
    assert ring.pending == 3
    with pytest.raises(ValueError):
        Ring(0)


def test_percentiles_are_observed_values() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    agg = aggregate([float(t) for t in range(100)], list(reversed(values)))
    assert agg is not None
    assert (agg.count, agg.avg, agg.min, agg.max, agg.p90, agg.latest) == (100, 50.5, 1.0, 100.0, 90.0, 1.0)
    assert aggregate([], []) is None


def feed(cache: MetricCache, clock: Clock, labels: Labels, start: float, samples: range, flush_every: int) -> None:
    """Sample i at ``start + i`` with value i, a flush every ``flush_every`` samples and after the last."""
    for i in samples:
        clock.now = start + i
        cache.append("pod_cpu", labels, clock.now, float(i))
        if i % flush_every == 0:
            cache.flush()
    cache.flush()


def test_window_spans_memory_and_disk(tmp_path: Path) -> None:
    clock = Clock()
    cache = make(tmp_path, clock, default_window_seconds=10.0)
    labels = labels_of(pod="a")
    start = clock.now
    feed(cache, clock, labels, start, range(60), 7)
    times, values = cache.window("pod_cpu", labels, start, start + 59)
    assert values == [float(i) for i in range(60)]
    assert times == sorted(set(times))
    agg = cache.aggregate("pod_cpu", labels, 30.0)
    assert agg is not None and agg.count == 31 and agg.avg == pytest.approx(44.0)


def test_the_file_is_read_only_when_it_may_hold_older_samples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    cache = make(tmp_path, clock, default_window_seconds=10.0)
    labels = labels_of(pod="a")
    start = clock.now
    feed(cache, clock, labels, start, range(8), 100)
    reads: list[str] = []
    real_read = cache.disk.read
    monkeypatch.setattr(cache.disk, "read", lambda key, a, b: reads.append(key) or real_read(key, a, b))
    # Just started: everything on disk is also in memory, so a longer window asks only memory.
    assert cache.window("pod_cpu", labels, start - 100, clock.now)[1] == [float(i) for i in range(8)]
    assert reads == []
    feed(cache, clock, labels, start, range(8, 30), 5)  # the ring (10 s) lets the first ones go; the file keeps them
    assert cache.window("pod_cpu", labels, start - 100, clock.now)[1] == [float(i) for i in range(30)]
    assert reads == ['pod_cpu{pod="a"}']
    cache.close()


def test_restart_keeps_history_for_windows(tmp_path: Path) -> None:
    clock = Clock()
    node = labels_of()
    cache = make(tmp_path, clock, windows={"node_cpu": 1800.0})
    start = clock.now
    for i in range(300):
        clock.now = start + i
        cache.append("node_cpu", node, clock.now, 2.0)
    cache.kv_put("nodeslo", {"spec": {"x": 1}})
    cache.close()
    clock.now += 30  # down for 30 s
    again = make(tmp_path, clock, windows={"node_cpu": 1800.0})
    for _ in range(100):
        clock.now += 1
        again.append("node_cpu", node, clock.now, 4.0)
    agg = again.aggregate("node_cpu", node, 600.0)
    assert agg is not None and agg.count == 400
    assert agg.avg == pytest.approx((300 * 2.0 + 100 * 4.0) / 400)
    assert again.kv_get("nodeslo") == {"spec": {"x": 1}}
    assert again.kv_get("missing") is None
    again.close()


def test_retention_and_size_cap(tmp_path: Path) -> None:
    clock = Clock()
    cache = make(tmp_path, clock, retention_seconds=100.0, max_disk_bytes=10 * 1024 * 1024)
    old = labels_of(pod="old")
    cache.append("pod_cpu", old, clock.now, 1.0)
    cache.flush()
    clock.now += 200
    cache.append("pod_cpu", labels_of(pod="new"), clock.now, 1.0)
    cache.flush()
    assert cache.prune() == 1
    assert cache.disk.read('pod_cpu{pod="old"}', 0, clock.now) == ([], [])
    # Size cap: write far more than 64 KiB of incompressible-ish history, then prune to the cap.
    capped = make(tmp_path / "capped", clock, max_disk_bytes=128 * 1024)
    for s in range(200):
        labels = labels_of(pod=f"p{s}")
        for i in range(100):
            capped.append("pod_cpu", labels, clock.now + i, (s * 7919 + i * 104729) % 1000003 / 7.0)
    capped.flush()
    assert capped.disk.bytes_in_use() > 128 * 1024
    assert capped.prune() > 0
    assert capped.disk.bytes_in_use() <= 128 * 1024


def test_drop_writes_pending_and_bounds_memory(tmp_path: Path) -> None:
    clock = Clock()
    cache = make(tmp_path, clock)
    labels = labels_of(pod="gone")
    cache.append("pod_cpu", labels, clock.now, 3.0)
    cache.drop("pod_cpu", labels)
    assert cache.series("pod_cpu") == []
    assert cache.latest("pod_cpu", labels) is None
    assert cache.window("pod_cpu", labels, clock.now - 1, clock.now) == ([clock.now], [3.0])


def test_latest_respects_max_age(tmp_path: Path) -> None:
    clock = Clock()
    cache = make(tmp_path, clock)
    cache.append("node_cpu", (), clock.now, 1.5)
    assert cache.latest("node_cpu", ()) == (clock.now, 1.5)
    clock.now += 11
    assert cache.latest("node_cpu", (), max_age_seconds=10) is None


def test_unreadable_database_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "state" / "metrics.db"
    path.parent.mkdir()
    path.write_bytes(b"this is not a database" * 100)
    cache = MetricCache(CacheSettings(path=path), Clock())
    cache.append("node_cpu", (), 1.0, 1.0)
    cache.flush()
    assert any(p.name.startswith("metrics.db.corrupt-") for p in path.parent.iterdir())
    sqlite3.connect(path).execute("SELECT count(*) FROM chunks").fetchone()


def test_damaged_chunk_is_skipped(tmp_path: Path) -> None:
    clock = Clock()
    cache = make(tmp_path, clock, default_window_seconds=5.0)
    labels = labels_of(pod="a")
    cache.append("pod_cpu", labels, clock.now, 1.0)
    cache.flush()
    cache.disk._db.execute("UPDATE chunks SET data = x'00ff'")
    clock.now += 1
    cache.append("pod_cpu", labels, clock.now, 2.0)
    cache.flush()
    assert cache.disk.read('pod_cpu{pod="a"}', 0, clock.now)[1] == [2.0]


def test_history_written_before_the_xor_chunks_still_reads(tmp_path: Path) -> None:
    # Stores of earlier releases hold zlib streams of the times' and values' doubles; an upgrade keeps them.
    clock = Clock()
    cache = make(tmp_path, clock, default_window_seconds=5.0)
    old_t, old_v = [clock.now - 20.0, clock.now - 19.0], [1.5, 2.5]
    packer = zlib.compressobj(1, zlib.DEFLATED, 9, 1)
    blob = packer.compress(array("d", old_t + old_v).tobytes()) + packer.flush()
    assert cache.disk.write_rows([('pod_cpu{pod="a"}', old_t[0], old_t[-1], 2, blob)]) == 1
    cache.append("pod_cpu", labels_of(pod="a"), clock.now, 3.5)
    cache.flush()
    assert cache.disk.read('pod_cpu{pod="a"}', 0, clock.now) == ([*old_t, clock.now], [1.5, 2.5, 3.5])
    cache.close()


def test_ring_window_and_tail_match_a_plain_list_across_wraparounds() -> None:
    """The ring searches its buffers in place; compare against bisect over the samples it keeps."""
    rng = random.Random(7)
    for _ in range(2000):
        capacity = rng.randint(1, 9)
        ring, kept, t = Ring(capacity), [], 0.0
        for _ in range(rng.randint(0, 20)):
            t += rng.choice([0.5, 1.0, 2.0])
            ring.append(t, t * 10)
            kept = [*kept, t][-capacity:]
        start = rng.uniform(-1, t + 2)
        end = rng.uniform(start - 1, t + 2)
        inside = kept[bisect.bisect_left(kept, start):bisect.bisect_right(kept, end)]
        assert ring.window(start, end) == (inside, [x * 10 for x in inside])
        n = rng.randint(0, 12)
        newest = kept[len(kept) - min(n, len(kept)):] if n else []
        assert ring.tail(n) == (newest, [x * 10 for x in newest])
        assert ring.values(start, end) == [x * 10 for x in inside]
        assert ring.mean(start, end) == (math.fsum(x * 10 for x in inside) / len(inside) if inside else None)


def test_a_column_appended_in_c_leaves_each_ring_as_its_own_appends_do() -> None:
    """kc_ring_append_all follows Ring.append: NaN and times not newer are skipped, the ring wraps, pending
    stops at the length; buffers compared whole, header included, and the counts returned agree."""
    rng = random.Random(11)
    for _ in range(300):
        count = rng.randint(0, 6)
        capacities = [rng.randint(1, 5) for _ in range(count)]
        by_python, by_c = [Ring(c) for c in capacities], [Ring(c) for c in capacities]
        column = RingColumn([ring.buffer for ring in by_c])
        t = 0.0
        for _ in range(rng.randint(0, 15)):
            t += rng.choice([-1.0, 0.0, 0.5, 1.0])  # a clock step back or a repeated time now and then
            values = [rng.choice([math.nan, rng.uniform(-5, 5)]) for _ in range(count)]
            expected = sum(ring.append(t, v) for ring, v in zip(by_python, values, strict=True) if v == v)
            assert column.append(t, values) == expected
            if rng.random() < 0.2:
                for ring in (*by_python, *by_c):
                    ring.pending = 0  # a flush
        assert [r.buffer.tolist() for r in by_c] == [r.buffer.tolist() for r in by_python]
        assert [r.pending for r in by_c] == [r.pending for r in by_python]


def test_a_column_reads_each_rings_newest_sample_as_last_does() -> None:
    rng = random.Random(5)
    for _ in range(200):
        rings = [None if rng.random() < 0.2 else Ring(rng.randint(1, 4)) for _ in range(rng.randint(0, 6))]
        held = [ring for ring in rings if ring is not None]
        for step in range(rng.randint(0, 9)):
            for ring in held:
                if rng.random() < 0.7:
                    ring.append(float(step), rng.uniform(0, 9))
        times, values = RingColumn([None if r is None else r.buffer for r in rings]).last_all()
        got = [None if math.isnan(t) else (t, v) for t, v in zip(times, values, strict=True)]
        assert got == [None if r is None else r.last() for r in rings]


def test_a_column_refuses_a_wrong_count_of_values_and_foreign_buffers() -> None:
    column = RingColumn([Ring(2).buffer])
    with pytest.raises(ValueError, match="1 rings"):
        column.append(1.0, [1.0, 2.0])
    with pytest.raises(ValueError, match="ring buffer"):
        RingColumn([array("d", [1.0, 2.0])])
    assert RingColumn([]).append(1.0, []) == 0


def test_batch_queries_answer_as_one_query_per_series(tmp_path: Path) -> None:
    """latest_values() and means() give what latest() and mean() give series by series, also after series are
    made or dropped between two asks with the same tuple of label sets, and from disk for a window memory
    does not cover."""
    clock = Clock()
    cache = make(tmp_path, clock, default_window_seconds=10.0)
    start = clock.now
    asked = (labels_of(pod="a"), labels_of(pod="b"), labels_of(pod="c"))
    for i in range(40):
        clock.now = start + i
        cache.append("pod_cpu", asked[0], clock.now, float(i))
        if i >= 35:
            cache.append("pod_cpu", asked[1], clock.now, 2.0 * i)
        if i % 5 == 0:
            cache.flush()

    def expected() -> tuple[list[object], list[object]]:
        latest = [cache.latest("pod_cpu", one, 3.0) for one in asked]
        return ([None if s is None else s[1] for s in latest], [cache.mean("pod_cpu", one, 20.0) for one in asked])

    for _ in range(2):  # the second ask reuses the first one's lookup
        assert (cache.latest_values("pod_cpu", asked, 3.0), cache.means("pod_cpu", asked, 20.0)) == expected()
    assert cache.means("pod_cpu", asked, 20.0)[0] == pytest.approx(29.0)  # 19..39: disk and memory
    cache.append("pod_cpu", asked[2], clock.now, 7.0)  # a series made after the lookup
    cache.drop("pod_cpu", asked[1])
    assert cache.latest_values("pod_cpu", asked, 3.0) == [39.0, None, 7.0]
    assert (cache.latest_values("pod_cpu", list(asked), 3.0), cache.means("pod_cpu", asked, 20.0)) == expected()
    clock.now += 10
    assert cache.latest_values("pod_cpu", asked, 3.0) == [None, None, None]


def test_labels_of_shares_each_label_pair_between_series() -> None:
    cpu = labels_of({"pod": "uid-1"}, resource="cpu")
    memory = labels_of({"pod": "uid-1"}, resource="memory")
    assert cpu == (("pod", "uid-1"), ("resource", "cpu"))
    assert memory == (("pod", "uid-1"), ("resource", "memory"))
    assert cpu[0] is memory[0]
