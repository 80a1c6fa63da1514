"""The one Go-duration grammar (koordlet.apis.duration): Go's ``time.ParseDuration`` for Kubernetes objects,
plus plain seconds for koordlet's own configuration, and Go's ``Duration.String`` for what we write."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from koordlet.apis.duration import duration_value, format_duration, parse_duration, parse_seconds_or_duration
from koordlet.errors import ConfigError


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(300, "5m0s"), (600, "10m0s"), (1800, "30m0s"), (3600, "1h0m0s"), (90, "1m30s"), (59, "59s"),
     (1.5, "1.5s"), (0.5, "500ms"), (0.0015, "1.5ms"), (1e-6, "1µs"), (5e-9, "5ns"), (0, "0s"),
     (3661.5, "1h1m1.5s"), (-120, "-2m0s")],
)
def test_duration_is_written_like_go(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("5m", 300.0), ("5m0s", 300.0), ("1h30m", 5400.0), ("1.5s", 1.5), ("300ms", 0.3), ("-2m", -120.0),
     ("0", 0.0), ("2h45m30.5s", 9930.5), ("1us", 1e-6), ("1µs", 1e-6), (".5s", 0.5)],
)
def test_duration_is_parsed_like_go(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "5", "m", "5x", "1h-2m", "five minutes", "+"])
def test_bad_duration_is_rejected(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(st.integers(min_value=1, max_value=10**6))
def test_duration_round_trip(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    # Forms Go accepts that the old configuration grammar did not: units in any order, repeated units, a
    # trailing dot, an explicit sign, micro- and nanoseconds, both spellings of the micro sign.
    [("1s1m", 61.0), ("1h1h", 7200.0), ("1.s", 1.0), ("+5m", 300.0), ("-0", 0.0), ("1ns", 1e-9),
     ("1μs", 1e-6), ("1.5h", 5400.0), ("0.5ms", 0.0005)],
)
def test_go_grammar_corners(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", [".s", "1", "1.5", "1 s", " 1s", "1S", "1sec", "--1s", "1h 30m", "s1"])
def test_go_grammar_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10), ("1m30s", 90), ("12h", 43200), ("500ms", 0.5), ("2.5", 2.5), ("1h1m1s", 3661), ("10", 10),
     (" 10s ", 10), ("0", 0), ("1.5h", 5400), ("90us", 9e-5), ("1s500ms", 1.5)],
)
def test_configuration_takes_go_durations_and_plain_seconds(text: str, seconds: float) -> None:
    assert parse_seconds_or_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("bad", ["", "s", "10x", "1h-1m", "m", "1 m", "ten"])
def test_configuration_rejects_what_is_neither(bad: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_seconds_or_duration(bad)


def test_duration_value_names_the_field() -> None:
    assert duration_value("5m", "spec.window") == 300.0
    with pytest.raises(ConfigError, match=r"spec\.window: expected a duration string"):
        duration_value(300, "spec.window")
    with pytest.raises(ConfigError, match=r"spec\.window: invalid duration '5 minutes'"):
        duration_value("5 minutes", "spec.window")
