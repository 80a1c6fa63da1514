"""The ``koordinator.sh/networkQOS`` pod annotation (upstream ``getIngressAndEgress``): bits per second,
missing fields "0", errors naming the pod, the annotation and the field; per-pod minors from the UID."""

from __future__ import annotations

import pytest

from koordlet.errors import ConfigError
from koordlet.isolation.netqos.podlimit import (
    POD_MINOR_FIRST,
    PodNetLimit,
    free_minor,
    pod_minor,
    pod_net_limit,
)

KEY = "ns/p"
ANN = "koordinator.sh/networkQOS"


@pytest.mark.parametrize(("text", "expected"), [
    ('{"ingressLimit": "100M", "egressLimit": "50M"}', PodNetLimit(100_000_000, 50_000_000)),
    ('{"egressLimit": "1Gi"}', PodNetLimit(0, 1 << 30)),
    ('{"ingressLimit": "1.5k", "egressLimit": null}', PodNetLimit(1500, 0)),
    ('{"ingressLimit": "1m"}', PodNetLimit(1, 0)),  # rounded up, like Quantity.Value()
    ("{}", PodNetLimit(0, 0)),
])
def test_parse(text: str, expected: PodNetLimit) -> None:
    got = pod_net_limit(KEY, {ANN: text})
    assert got == expected and got.limited == (expected != PodNetLimit(0, 0))


def test_absent_or_empty_is_none() -> None:
    assert pod_net_limit(KEY, {}) is None and pod_net_limit(KEY, {ANN: ""}) is None


@pytest.mark.parametrize(("text", "names"), [
    ("nope", "not JSON"),
    ('"50M"', "must be an object"),
    ('{"egressLimit": 50}', "egressLimit must be a quantity"),
    ('{"ingressLimit": "fast"}', "ingressLimit must be a quantity"),
    ('{"egressLimit": "-1M"}', "egressLimit must not be negative"),
])
def test_malformed_names_pod_annotation_and_field(text: str, names: str) -> None:
    with pytest.raises(ConfigError) as err:
        pod_net_limit(KEY, {ANN: text})
    assert f"pod {KEY}: annotation {ANN}" in str(err.value) and names in str(err.value)


def test_minor_is_stable_and_collisions_take_the_next_free() -> None:
    first = pod_minor("uid-a")
    assert first == pod_minor("uid-a") and first >= POD_MINOR_FIRST
    assert free_minor("uid-a", set()) == first
    assert free_minor("uid-a", {first}) == (first + 1 if first < 0xFFFF else POD_MINOR_FIRST)
    with pytest.raises(ConfigError, match="no free tc class minor"):
        free_minor("uid-a", set(range(POD_MINOR_FIRST, 0x10000)))
