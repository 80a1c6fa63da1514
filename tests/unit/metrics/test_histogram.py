"""LightHistogram exposes what prometheus_client's Histogram does for the same observations (less ``_created``)."""

from __future__ import annotations

import threading

import pytest
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.exposition import generate_latest

from koordlet.metrics.histogram import LightHistogram

BUCKETS = (0.01, 0.04, 0.16, 0.64)
VALUES = (0.0, 0.01, 0.011, 0.04, 0.5, 0.64, 0.65, 100.0, 0.02)


def _lines(registry: CollectorRegistry) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines()
                  if line and "_created" not in line)


def test_same_exposition_as_prometheus_client() -> None:
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    reference = Histogram("x_ms", "doc", ["hook", "status"], buckets=BUCKETS, registry=theirs)
    light = LightHistogram("x_ms", "doc", ["hook", "status"], BUCKETS, ours)
    for i, value in enumerate(VALUES):
        labels = ("a" if i % 2 else "b", "succeeded")
        reference.labels(*labels).observe(value)
        light.labels(*labels).observe(value)
    assert _lines(ours) == _lines(theirs)
    # A value equal to a bound counts in that bucket (le): "a" got 0.01, 0.04, 0.64 and 100.
    assert ours.get_sample_value("x_ms_bucket", {"hook": "a", "status": "succeeded", "le": "0.01"}) == 1
    assert ours.get_sample_value("x_ms_bucket", {"hook": "a", "status": "succeeded", "le": "0.64"}) == 3


def test_concurrent_observations_are_all_counted() -> None:
    registry = CollectorRegistry()
    child = LightHistogram("y_ms", "doc", ["k"], BUCKETS, registry).labels("v")

    def observe() -> None:
        for _ in range(20_000):
            child.observe(0.02)

    threads = [threading.Thread(target=observe) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert registry.get_sample_value("y_ms_count", {"k": "v"}) == 80_000


@pytest.mark.parametrize("buckets", [(), (0.1, 0.1), (0.2, 0.1)])
def test_bad_buckets_are_refused(buckets: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="buckets"):
        LightHistogram("z_ms", "doc", [], buckets, CollectorRegistry())


def test_label_count_is_checked() -> None:
    with pytest.raises(ValueError, match="label values"):
        LightHistogram("w_ms", "doc", ["a", "b"], BUCKETS, CollectorRegistry()).labels("only-one")
