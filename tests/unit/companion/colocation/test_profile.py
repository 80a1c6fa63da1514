"""Parsing ClusterColocationProfiles: a bad profile is refused once, naming the profile and the field."""

from __future__ import annotations

import re
from typing import Any

import pytest

from koordlet.companion.colocation import Profile
from koordlet.errors import ConfigError


def obj(spec: Any, **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": "config.koordinator.sh/v1alpha1", "kind": "ClusterColocationProfile",
            "metadata": {"name": "p", **metadata}, "spec": spec}


@pytest.mark.parametrize(("spec", "where"), [
    ({"qosClass": "FAST"}, "spec.qosClass"),
    ({"probability": "50"}, "spec.probability"),
    ({"probability": "half%"}, "spec.probability"),
    ({"probability": 12.5}, "spec.probability"),
    ({"probability": True}, "spec.probability"),
    ({"koordinatorPriority": "1000"}, "spec.koordinatorPriority"),
    ({"koordinatorPriority": 2**31}, "spec.koordinatorPriority"),
    ({"labels": {"a": 1}}, "spec.labels"),
    ({"labelKeysMapping": ["a"]}, "spec.labelKeysMapping"),
    ({"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "spec.selector.matchExpressions[0]"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Near", "values": ["b"]}]}},
     "spec.namespaceSelector.matchExpressions[0].operator"),
    ({"patch": [1]}, "spec.patch"),
    ({"schedulerName": 3}, "spec.schedulerName"),
    ("not an object", "spec"),
])
def test_bad_field_named(spec: Any, where: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"ClusterColocationProfile p {where}")):
        Profile.from_object(obj(spec))


@pytest.mark.parametrize("bad", [None, [], {"metadata": {}}, {"metadata": {"name": ""}},
                                 {"metadata": {"name": "p", "annotations": {"a": 1}}}])
def test_bad_metadata(bad: Any) -> None:
    with pytest.raises(ConfigError, match="ClusterColocationProfile"):
        Profile.from_object(bad)


@pytest.mark.parametrize(("value", "percent"), [(None, 100), (0, 0), (30, 30), ("30%", 30), ("100%", 100),
                                                ("-5%", -5), (150, 150), ("+7%", 7)])
def test_probability(value: Any, percent: int) -> None:
    spec = {} if value is None else {"probability": value}
    assert Profile.from_object(obj(spec)).percent == percent


def test_out_of_range_percent_as_upstream_reads_it() -> None:
    """``percent == 0 || (percent != 100 && rand(100) > percent)``: negative always skips, above 100 never."""
    never = Profile.from_object(obj({"probability": "-5%"}))
    always = Profile.from_object(obj({"probability": 150}))
    assert all(never.skipped_by(lambda n, d=draw: d) for draw in (0, 99))
    assert not any(always.skipped_by(lambda n, d=draw: d) for draw in (0, 99))


def test_minimal_and_null_fields() -> None:
    profile = Profile.from_object({"metadata": {"name": "bare"}})
    assert profile.name == "bare" and profile.percent == 100 and not profile.skip_update_resources
    assert not profile.needs_namespace() and profile.selects_pod({})
    nulls = Profile.from_object(obj({"qosClass": None, "labels": None, "selector": None, "qosclass": "BE"}))
    assert nulls.spec.qos_class == "BE"  # Go's decoder matches json keys case-insensitively
    assert Profile.from_object(obj({"qosClass": ""})).spec.qos_class is None


def test_skip_update_resources_annotation() -> None:
    profile = Profile.from_object(obj({}, annotations={"config.koordinator.sh/skip-update-resources": ""}))
    assert profile.skip_update_resources
