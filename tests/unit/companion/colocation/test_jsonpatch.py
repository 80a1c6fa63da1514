"""The RFC 6902 diff: applied to the original by an independent applier it must give the modified document."""

from __future__ import annotations

import random
from typing import Any

import pytest

from koordlet.companion.colocation.jsonpatch import diff, escape
from tests.unit.companion.colocation.support import apply_patch


def test_escaping() -> None:
    assert escape("koordinator.sh/qosClass") == "koordinator.sh~1qosClass"
    assert escape("a~b/c") == "a~0b~1c"
    assert diff({"m": {"a/b~c": 1}}, {"m": {"a/b~c": 2}}) == [{"op": "replace", "path": "/m/a~1b~0c", "value": 2}]


def test_shapes() -> None:
    assert diff({"a": 1}, {"a": 1}) == []
    assert diff({"a": 30}, {"a": 30.0}) == []  # one JSON number type
    assert diff({"a": True}, {"a": "1"}) == [{"op": "replace", "path": "/a", "value": "1"}]
    assert diff({"a": [1, 2, 3]}, {"a": [9]}) == [
        {"op": "remove", "path": "/a/2"}, {"op": "remove", "path": "/a/1"}, {"op": "replace", "path": "/a/0",
                                                                            "value": 9}]
    assert diff({"a": [1]}, {"a": [1, 2, 3]}) == [
        {"op": "add", "path": "/a/1", "value": 2}, {"op": "add", "path": "/a/2", "value": 3}]
    assert diff({"a": {"x": 1}}, {"a": None}) == [{"op": "replace", "path": "/a", "value": None}]
    assert diff({"a": 1, "b": 2}, {"b": 2, "c": 3}) == [{"op": "add", "path": "/c", "value": 3},
                                                      {"op": "remove", "path": "/a"}]


def _random_json(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(6 if depth else 4)
    if kind == 0:
        return rng.choice([2, 2.5, -3])  # not 0/1: Python's == takes them for false/true (see jsonpatch)
    if kind == 1:
        return rng.choice(["a", "b/c", "d~e", ""])
    if kind == 2:
        return rng.choice([True, False, "true"])
    if kind == 3:
        return None
    if kind == 4:
        return [_random_json(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {rng.choice(["k", "l/m", "n~o", "p", "q"]): _random_json(rng, depth - 1) for _ in range(rng.randrange(4))}


def _mutate(rng: random.Random, value: Any, depth: int) -> Any:
    if isinstance(value, dict) and value and rng.random() < 0.7:
        out = dict(value)
        key = rng.choice(sorted(out))
        out[key] = _mutate(rng, out[key], depth - 1)
        if rng.random() < 0.3:
            out.pop(rng.choice(sorted(out)))
        if rng.random() < 0.3:
            out["new/key"] = _random_json(rng, 2)
        return out
    if isinstance(value, list) and value and rng.random() < 0.7:
        out = list(value)
        index = rng.randrange(len(out))
        out[index] = _mutate(rng, out[index], depth - 1)
        if rng.random() < 0.3:
            out.append(_random_json(rng, 1))
        if rng.random() < 0.3 and out:
            out.pop(rng.randrange(len(out)))
        return out
    return _random_json(rng, max(depth, 0))


@pytest.mark.parametrize("seed", range(300))
def test_diff_round_trips(seed: int) -> None:
    rng = random.Random(seed)
    original = {"root": _random_json(rng, 4)}
    modified = {"root": _mutate(rng, original["root"], 4)}
    assert apply_patch(original, diff(original, modified)) == modified
