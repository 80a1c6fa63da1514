"""History chunks (``csrc/kcore_chunk.c``): exact round trips of any doubles, refusal of anything that is not
a whole chunk, and the batch encoder agreeing with the rings' own tails."""

from __future__ import annotations

import math
import random
import struct
import zlib
from array import array

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koordlet import native
from koordlet.metriccache.ring import Ring

# Any 64-bit pattern: NaN payloads, infinities, signed zeros and subnormals must come back bit for bit.
any_double = st.integers(min_value=0, max_value=2**64 - 1).map(lambda x: struct.unpack("<d", struct.pack("<Q", x))[0])
doubles = st.one_of(any_double, st.floats(allow_nan=True, allow_infinity=True))


def bits(column: object) -> bytes:
    return array("d", column).tobytes()  # type: ignore[arg-type]


@given(st.lists(st.tuples(doubles, doubles), max_size=80))
@settings(max_examples=400, deadline=None)
def test_any_doubles_round_trip_bit_for_bit(samples: list[tuple[float, float]]) -> None:
    times, values = [t for t, _ in samples], [v for _, v in samples]
    blob = native.encode_chunk(times, values)
    assert blob[0] == native.CHUNK_XOR
    assert len(blob) <= 5 + 18 * len(samples)
    got_t, got_v = native.decode_chunk(blob, len(samples))
    assert (bits(got_t), bits(got_v)) == (bits(times), bits(values))


@given(st.lists(st.tuples(doubles, doubles), min_size=1, max_size=20), st.data())
@settings(max_examples=200, deadline=None)
def test_a_cut_or_lengthened_chunk_is_refused(samples: list[tuple[float, float]], data: st.DataObject) -> None:
    blob = native.encode_chunk([t for t, _ in samples], [v for _, v in samples])
    cut = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    with pytest.raises(ValueError, match="not a chunk"):
        native.decode_chunk(blob[:cut], len(samples))
    with pytest.raises(ValueError, match="not a chunk"):
        native.decode_chunk(blob + b"\0", len(samples))
    flipped = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    with pytest.raises(ValueError, match="not a chunk"):  # the hash finds any one damaged byte
        native.decode_chunk(blob[:flipped] + bytes((blob[flipped] ^ 0x5A,)) + blob[flipped + 1:], len(samples))


def fnv1a(data: bytes) -> bytes:
    h = 2166136261
    for byte in data:
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h.to_bytes(4, "little")


@given(st.binary(max_size=200), st.integers(min_value=0, max_value=30))
@settings(max_examples=400, deadline=None)
def test_garbage_is_refused_or_decoded_never_a_crash(payload: bytes, n: int) -> None:
    # With a matching hash, so that the column decoder itself meets the garbage.
    try:
        times, values = native.decode_chunk(bytes((native.CHUNK_XOR,)) + payload + fnv1a(payload), n)
    except ValueError:
        return
    assert len(times) == len(values) == n


@pytest.mark.parametrize("kind", ["cpu", "memory"])
def test_usage_series_take_less_room_than_zlib_made_of_them(kind: str) -> None:
    # The store's common case: a tick every second (a millisecond of jitter), CPU usage in cores that moves
    # around a level, memory in whole pages.  zlib (the store's format before) for scale.
    rng = random.Random(7)
    times = [1_764_000_000.123456 + i + rng.uniform(0, 0.002) for i in range(30)]
    values = ([max(0.0, rng.gauss(0.3, 0.05)) for _ in range(30)] if kind == "cpu"
              else [4096.0 * (300_000 + rng.randint(-50, 50)) for _ in range(30)])
    blob = native.encode_chunk(times, values)
    packer = zlib.compressobj(1, zlib.DEFLATED, 9, 1)
    assert len(blob) < len(packer.compress(array("d", times + values).tobytes()) + packer.flush())
    assert native.decode_chunk(blob, 30) == (array("d", times), array("d", values))


@given(st.lists(st.tuples(st.integers(min_value=1, max_value=12),  # capacity
                          st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=30),  # values
                          st.integers(min_value=0, max_value=40)),  # pending set before encoding
                min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_pending_tails_of_many_rings_in_one_call(specs: list[tuple[int, list[float], int]]) -> None:
    rings = []
    for capacity, values, pending in specs:
        ring = Ring(capacity)
        for i, v in enumerate(values):
            ring.append(100.0 + i, v)
        ring.pending = min(pending, len(ring))
        rings.append(ring)
    wanted = [ring.tail(ring.pending) for ring in rings]
    encoded = native.encode_pending([ring.buffer for ring in rings])
    for i, (ring, (times, values)) in enumerate(zip(rings, wanted, strict=True)):
        assert encoded.counts[i] == len(times)
        assert ring.pending == 0
        if not times:
            assert encoded.chunk(i) == b""
            assert math.isnan(encoded.first[i]) and math.isnan(encoded.last[i])
            continue
        assert (encoded.first[i], encoded.last[i]) == (times[0], times[-1])
        assert native.decode_chunk(encoded.chunk(i), len(times)) == (array("d", times), array("d", values))


def test_no_rings_encode_nothing() -> None:
    encoded = native.encode_pending([])
    assert (encoded.data, encoded.offsets, encoded.counts) == (b"", [0], [])
