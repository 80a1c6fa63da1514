"""FileGroup (slots per owner key, one batch read) and the UsageCollector defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from koordlet import native
from koordlet.config.types import CollectorConfig
from koordlet.errors import CgroupGone
from koordlet.metricsadvisor.framework import FileGroup, UsageCollector
from tests.fixtures.fakehost import FakeHost
from tests.unit.metricsadvisor.harness import make_options


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_track_keeps_one_slot_per_key_and_reads_every_file_in_one_batch(tmp_path: Path) -> None:
    group = FileGroup(2.5)
    a = write(tmp_path / "a", "11\n")
    b = write(tmp_path / "b", "nr_periods 4\nnr_throttled 1\n")
    slot_a = group.track(("x", "a"), a, native.Kind.INT)
    assert group.track(("x", "a"), b, native.Kind.INT) == slot_a  # same key: first path stands
    slot_b = group.track(("x", "b"), b, native.Kind.KV, ["nr_throttled"])
    assert slot_b != slot_a
    assert group.slot(("x", "b")) == slot_b
    assert group.keys() == [("x", "a"), ("x", "b")]
    assert group.interval_seconds == 2.5
    batch = group.read()
    assert batch.value(slot_a) == 11
    assert batch.value(slot_b) == {"nr_throttled": 1}


def test_untrack_frees_the_slot_and_unknown_keys_are_errors(tmp_path: Path) -> None:
    group = FileGroup(1.0)
    slot = group.track("k", write(tmp_path / "a", "1\n"), native.Kind.INT)
    group.untrack("k")
    group.untrack("k")  # twice is harmless: a pod may leave twice in a row
    with pytest.raises(KeyError):
        group.slot("k")
    assert group.keys() == []
    assert len(group.files) == 0
    # The freed slot is reused, and the new file is what it reads.
    assert group.track("k2", write(tmp_path / "b", "2\n"), native.Kind.INT) == slot
    assert group.read().value(slot) == 2
    group.close()
    assert group.keys() == [] and len(group.files) == 0


def test_a_missing_file_fails_its_own_slot_only(tmp_path: Path) -> None:
    group = FileGroup(1.0)
    ok = group.track("ok", write(tmp_path / "a", "5\n"), native.Kind.INT)
    gone = group.track("gone", str(tmp_path / "nope" / "cpuacct.usage"), native.Kind.INT)
    batch = group.read()
    assert batch.value(ok) == 5
    assert batch.get(gone) is None
    with pytest.raises(CgroupGone, match=r"nope/cpuacct\.usage"):
        batch.value(gone)


def test_usage_collector_defaults(fake_host: FakeHost, tmp_path: Path) -> None:
    options = make_options(fake_host, tmp_path, config=CollectorConfig(res_used_interval_seconds=3.0))
    defaults = UsageCollector()
    assert defaults.enabled(options) is True
    assert defaults.interval(options) == 3.0
    assert defaults.on_pods(()) is None
