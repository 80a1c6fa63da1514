"""Shared pieces of the decoder fuzz suite (``tests/security/test_fuzz_*.py``).

The property every fuzz test checks is the same: a decoder that faces the network or a tenant returns a value
or raises the error type its callers catch (a ``KoordletError``, sometimes a named ``ValueError``) - never any
other exception, never a hang.  :func:`decode` runs one call under that property and counts it, so the session
can print how many examples each decoder ran (``conftest.py``'s summary table).

Strategies: :func:`junk_json` is any JSON value (huge numbers, unicode, nesting); :func:`shaped` builds objects
with the real field names whose values are either plausible or junk, with keys in random case (Go's
encoding/json matches field names case-insensitively, and so do our decoders); :func:`strategy_for` derives
such objects from a NodeSLO/ConfigMap dataclass's own field specs; :data:`raw_bytes` is arbitrary bytes mixed
with broken JSON and JSON nested past the interpreter's recursion limit.
"""

from __future__ import annotations

import inspect
import json
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from koordlet.apis.nodeslo.fields import JsonObject
from koordlet.errors import KoordletError

T = TypeVar("T")

HANG_SECONDS = 5.0
"""One decode taking this long counts as a hang (it is microseconds to milliseconds normally; the margin is
for a loaded 2-core machine)."""


def fuzz_settings(max_examples: int) -> settings:
    """Fixed example counts; random seeds (hypothesis prints a reproduction blob on failure); no deadline
    (a loaded machine makes per-example deadlines flaky; :func:`decode` has its own hang guard); no example
    database (nothing written into the work tree)."""
    return settings(max_examples=max_examples, deadline=None, database=None, derandomize=False, print_blob=True,
                    # No explain phase: it traces every line, which makes a deep parse look like a hang.
                    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture])


# ------------------------------------------------------------------------------------------------ counting


@dataclass
class DecoderStats:
    examples: int = 0
    failures: set[str] = field(default_factory=set)
    """Distinct failures: exception type and the innermost frame that raised it (hypothesis shrinks one
    failure through many calls; they count once)."""


STATS: dict[str, DecoderStats] = {}


class DecoderHang(AssertionError):
    """A decode ran past :data:`HANG_SECONDS`."""


@contextmanager
def _hang_guard(decoder: str) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise DecoderHang(f"{decoder}: no answer within {HANG_SECONDS:g} s")

    # pytest runs tests on the main thread, where SIGALRM is delivered; elsewhere only the elapsed-time
    # check below applies.
    try:
        previous = signal.signal(signal.SIGALRM, alarm)
    except ValueError:
        previous = None
    else:
        signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    began = time.monotonic()
    try:
        yield
    finally:
        if previous is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
    elapsed = time.monotonic() - began
    if elapsed > HANG_SECONDS:
        raise DecoderHang(f"{decoder}: took {elapsed:.1f} s")


def decode(decoder: str, call: Callable[[], T], allowed: tuple[type[BaseException], ...] = (KoordletError,)
           ) -> T | None:
    """Runs ``call``; its value, or None when it raised one of ``allowed``.  Anything else (or a hang) is
    counted as a failure of ``decoder`` and re-raised for hypothesis to shrink."""
    stats = STATS.setdefault(decoder, DecoderStats())
    stats.examples += 1
    try:
        with _hang_guard(decoder):
            return call()
    except allowed:
        return None
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        frames = traceback.extract_tb(exc.__traceback__)
        where = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else "?"
        stats.failures.add(f"{type(exc).__name__} at {where}")
        raise


def summary_lines() -> list[str]:
    if not STATS:
        return []
    width = max(len(name) for name in STATS)
    lines = [f"{'decoder'.ljust(width)} | examples run | failures", f"{'-' * width}-|--------------|---------"]
    for name in sorted(STATS):
        stats = STATS[name]
        lines.append(f"{name.ljust(width)} | {stats.examples:12d} | {len(stats.failures):8d}"
                     + (f"  ({'; '.join(sorted(stats.failures))})" if stats.failures else ""))
    total = sum(s.examples for s in STATS.values())
    lines.append(f"{'total'.ljust(width)} | {total:12d} | {sum(len(s.failures) for s in STATS.values()):8d}")
    return lines


# ---------------------------------------------------------------------------------------------- strategies

_HUGE_INTS = st.sampled_from([2**31, -2**31 - 1, 2**63, -2**63 - 1, 2**64, 10**30, 10**400, -10**400])
_ODD_FLOATS = st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308, -1e308, 5e-324, -0.0])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), _HUGE_INTS, st.floats(allow_nan=True, allow_infinity=True),
    _ODD_FLOATS, st.text(max_size=40),
)


def junk_json(max_leaves: int = 20) -> st.SearchStrategy[Any]:
    """Any JSON-shaped value: scalars of every type, unicode, lists and objects nested a few levels."""
    return st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children, max_size=5),
                                   st.dictionaries(st.text(max_size=12), children, max_size=5)),
        max_leaves=max_leaves,
    )


def deeply_nested(depth: int) -> Any:
    """A list nested ``depth`` times (decoders that recurse must not blow the stack on it)."""
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


_junk_value = st.one_of(scalars, scalars, scalars, st.lists(scalars, max_size=3),
                        st.dictionaries(st.text(max_size=5), scalars, max_size=3))
"""A value of the wrong type, cheap to draw (field strategies are drawn thousands of times)."""


def _case_variants(key: str) -> st.SearchStrategy[str]:
    return st.sampled_from([key, key, key, key.lower(), key.upper(), key[:1].swapcase() + key[1:]])


def shaped(fields: Mapping[str, st.SearchStrategy[Any]], junk_rate: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the given field names whose values come from the field's strategy: each field is absent one
    time in four, and about one time in ``4 * junk_rate`` its key is in another case or its value is of a
    wrong type; plus the odd unknown key."""

    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        obj: dict[str, Any] = {}
        for key, strategy in fields.items():
            roll = draw(st.integers(0, 4 * junk_rate - 1))
            if roll < junk_rate:
                continue  # absent, one time in four
            name = draw(_case_variants(key)) if roll == junk_rate else key
            obj[name] = draw(_junk_value if roll == junk_rate + 1 else strategy)
        if draw(st.integers(0, 15)) == 0:
            obj[draw(st.text(max_size=10))] = draw(scalars)
        return obj

    return build()


quantity_text = st.one_of(
    st.from_regex(r"\A[+-]?[0-9]{1,6}(\.[0-9]{0,3})?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]{1,7})?\Z"),
    st.sampled_from(["1e999999", "1e-999999", "9" * 5000, "1Ei", "-1", "0.5m", ".5", "5.", "1e3", "", " ", "1 Gi",
                     "100m", "4Gi", "NaN", "Infinity", "0x10", "\uff11\uff10", "1e+", "1e9999999999"]),
    st.text(max_size=12),
)
"""Quantity strings: well-formed ones with extreme exponents and suffixes, k8s edge cases, and noise."""

quantity_value = st.one_of(quantity_text, st.integers(), _HUGE_INTS, st.floats(), st.booleans(), st.none())

cpulist_text = st.one_of(
    st.from_regex(r"\A[0-9]{1,4}(-[0-9]{1,4})?(,[0-9]{1,4}(-[0-9]{1,4})?){0,3}\Z"),
    st.sampled_from(["0-4294967295", "0-99999999999999", "3-1", "", ",", "0,,1", "-1", "1-", " 0 - 1 "]),
    st.text(max_size=12),
)

k8s_time = st.one_of(
    st.sampled_from(["2024-01-02T03:04:05Z", "2024-01-02T03:04:05.123456789+08:00", "2024-01-02T03:04:05",
                     "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", "2024-13-45T99:99:99Z", "", "now"]),
    st.text(max_size=30),
)

duration_text = st.one_of(
    st.from_regex(r"\A[0-9]{1,12}(\.[0-9]{1,3})?(ns|us|ms|s|m|h)\Z"),
    st.sampled_from(["5m", "1h30m", "0s", "-5m", "99999999999999999999h", "1e9s", "", "m", "5", "Infinityh"]),
    st.text(max_size=10),
)


def json_bytes(values: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """``values`` serialised as JSON text (NaN and Infinity as Python writes them)."""
    return values.map(lambda v: json.dumps(v).encode())


raw_bytes = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=100).map(str.encode),
    st.sampled_from([b"", b"{", b"[", b"null", b"true", b"0", b"\"x\"", b"{\"a\":}", b"\xff\xfe{}", b"\xef\xbb\xbf{}",
                     b"[" * 3000, b"{\"a\":" * 3000, b"NaN", b"1e999999", b"9" * 10_000,
                     b"{\"status\": " + b"[" * 5_000 + b"]" * 5_000 + b"}"]),
)
"""Bytes off the wire: random, text, broken JSON, JSON nested past the recursion limit, a huge number."""


# ------------------------------------------------------------------------------ Koordinator API objects

_BOUNDARY_INTS = st.sampled_from([-1, 0, 1, 100, 101, 2**31, 2**63, -2**63 - 1, 10**30])


def _ints(lo: int | None, hi: int | None) -> st.SearchStrategy[int]:
    low = (lo if lo is not None else -1000) - 3
    high = (hi if hi is not None else 10_000) + 3
    return st.one_of(st.integers(low, high), _BOUNDARY_INTS)


_STRATEGIES: dict[type[JsonObject], st.SearchStrategy[dict[str, Any]]] = {}


def _field_strategy(parse: Any) -> st.SearchStrategy[Any]:
    """Values for one field, from the kind of field helper that built its parser and the bounds it closed
    over (``int_field(json, lo, hi)`` and so on in koordlet/apis/nodeslo/fields.py)."""
    kind = parse.__qualname__.split(".")[0]
    captured = inspect.getclosurevars(parse).nonlocals
    if kind == "int_field":
        return _ints(captured.get("lo"), captured.get("hi"))
    if kind == "float_field":
        return st.one_of(st.floats(-10, 200), st.integers(-5, 200), st.sampled_from([float("inf"), float("nan")]))
    if kind == "bool_field":
        return st.booleans()
    if kind == "str_field":
        return st.text(max_size=20)
    if kind == "enum_field":
        choices = captured.get("choices") or captured.get("allowed") or ()
        return st.one_of(st.sampled_from(sorted(choices) or [""]), st.text(max_size=8))
    if kind == "quantity_field":
        return quantity_text
    if kind == "percent_or_quantity_field":
        return st.one_of(st.integers(-5, 105), quantity_text)
    if kind == "bool_map_field":
        return st.dictionaries(st.text(max_size=8), st.booleans(), max_size=3)
    if kind == "float_map_field":
        ratios = st.one_of(st.floats(-2, 10), st.integers(-2, 10), st.none(), st.booleans(), st.text(max_size=4),
                           st.sampled_from([1e308, 10**400]))
        return st.dictionaries(st.text(max_size=8), ratios, max_size=3)
    if kind == "str_map_field":
        return st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)
    if kind in ("str_list_field",):
        return st.lists(st.text(max_size=8), max_size=3)
    if kind == "duration_list_field":
        return st.lists(duration_text, max_size=3)
    if kind == "nested":
        return st.deferred(lambda: strategy_for(captured["cls"]))
    if kind == "list_field":
        return st.lists(st.deferred(lambda: strategy_for(captured["cls"])), max_size=3)
    if kind == "map_field":
        return st.dictionaries(st.text(max_size=8), st.deferred(lambda: strategy_for(captured["cls"])), max_size=3)
    return junk_json(6)  # object_field and anything new


def strategy_for(cls: type[JsonObject]) -> st.SearchStrategy[dict[str, Any]]:
    """JSON objects for ``cls``: its real field names with values of the right kind, out of range or junk."""
    if cls not in _STRATEGIES:
        _STRATEGIES[cls] = shaped({spec.json: _field_strategy(spec.parse) for _, spec in cls._specs()})
    return _STRATEGIES[cls]
