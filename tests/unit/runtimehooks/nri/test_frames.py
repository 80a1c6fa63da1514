"""The NRI byte layer: mux frames and ttrpc messages, hand-written layouts plus property tests."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from koordlet.errors import KoordletError
from koordlet.runtimehooks.nri import frames as f
from koordlet.runtimehooks.nri.frames import Message, MessageType, MuxFrame


def decode_all(decoder: f.MessageDecoder) -> list[Message]:
    return list(decoder)


# --- mux ------------------------------------------------------------------------------------------------


def test_mux_constants_match_upstream() -> None:
    assert f.MUX_HEADER_LENGTH == 8
    assert (f.PLUGIN_SERVICE_CONN, f.RUNTIME_SERVICE_CONN) == (1, 2)
    assert f.MUX_PAYLOAD_MAX == 10 + 4 * 1024 * 1024


def test_mux_frame_exact_bytes() -> None:
    assert f.encode_mux_frame(2, b"\xab\xcd\xef") == bytes.fromhex("00000002 00000003 abcdef")
    assert f.encode_mux_frame(0x01020304, b"") == bytes.fromhex("01020304 00000000")


def test_mux_decode_hand_written() -> None:
    wire = bytes.fromhex("00000001 00000002 6869 00000002 00000000 00000001 00000001 21")
    assert f.MuxDecoder().feed(wire) == [(1, b"hi"), (2, b""), (1, b"!")]


def test_mux_rejects_reserved_conn_and_oversize_payload() -> None:
    with pytest.raises(f.FrameError, match="reserved"):
        f.encode_mux_frame(0, b"x")
    with pytest.raises(f.MuxFrameTooLarge):
        f.encode_mux_frame(1, bytes(f.MUX_PAYLOAD_MAX + 1))
    assert len(f.encode_mux_frame(1, bytes(f.MUX_PAYLOAD_MAX))) == 8 + f.MUX_PAYLOAD_MAX


def test_mux_split_into_4096_byte_frames() -> None:
    data = bytes(range(256)) * 40  # 10240 bytes
    wire = f.encode_mux(2, data)
    frames = f.MuxDecoder().feed(wire)
    assert [len(fr.payload) for fr in frames] == [4096, 4096, 2048]
    assert {fr.conn_id for fr in frames} == {2}
    assert b"".join(fr.payload for fr in frames) == data
    assert f.encode_mux(2, b"") == b""


def test_mux_byte_at_a_time() -> None:
    wire = f.encode_mux_frame(1, b"abc") + f.encode_mux_frame(2, b"defg")
    decoder = f.MuxDecoder()
    out: list[MuxFrame] = []
    for i in range(len(wire)):
        out += decoder.feed(wire[i : i + 1])
    assert out == [(1, b"abc"), (2, b"defg")]
    assert decoder.buffered == 0


def test_mux_oversize_frame_breaks_trunk_after_earlier_frames() -> None:
    good = f.encode_mux_frame(1, b"ok")
    bad = (1).to_bytes(4, "big") + (f.MUX_RECEIVE_MAX + 1).to_bytes(4, "big")
    decoder = f.MuxDecoder()
    assert decoder.feed(good + bad) == [(1, b"ok")]
    with pytest.raises(f.MuxFrameTooLarge) as exc:
        decoder.feed(b"")
    assert exc.value.conn_id == 1
    with pytest.raises(f.MuxFrameTooLarge):
        decoder.feed(good)
    with pytest.raises(f.MuxFrameTooLarge):
        f.MuxDecoder().feed(bad)


def test_mux_reader_takes_frames_above_the_send_cap() -> None:
    # containerd 1.7.24 sends a 5.3 MB Synchronize as [4096][rest]: legal on the wire, skipped by ttrpc.
    big = bytes(f.MUX_PAYLOAD_MAX + 100)
    wire = f.MUX_HEADER.pack(1, len(big)) + big
    assert f.MuxDecoder().feed(wire) == [(1, big)]
    with pytest.raises(f.MuxFrameTooLarge, match="exceeds maximum 100"):
        f.MuxDecoder(max_payload=100).feed(wire)


# --- ttrpc ----------------------------------------------------------------------------------------------


def test_ttrpc_constants_match_upstream() -> None:
    assert f.TTRPC_HEADER_LENGTH == 10
    assert f.MESSAGE_LENGTH_MAX == 4 << 20
    assert [int(t) for t in MessageType] == [1, 2, 3]
    assert (f.FLAG_REMOTE_CLOSED, f.FLAG_REMOTE_OPEN, f.FLAG_NO_DATA) == (1, 2, 4)


def test_ttrpc_message_exact_bytes() -> None:
    assert f.encode_message(1, MessageType.REQUEST, b"\x0a\x01") == bytes.fromhex("00000002 00000001 01 00 0a01")
    assert f.encode_message(0x0A0B0C0D, MessageType.DATA, b"", flags=f.FLAG_REMOTE_CLOSED | f.FLAG_NO_DATA) == (
        bytes.fromhex("00000000 0a0b0c0d 03 05")
    )


def test_ttrpc_decode_hand_written() -> None:
    decoder = f.MessageDecoder()
    decoder.feed(bytes.fromhex("00000003 00000003 02 00 010203 00000000 00000005 01 02"))
    assert decode_all(decoder) == [
        Message(3, MessageType.RESPONSE, 0, b"\x01\x02\x03"),
        Message(5, MessageType.REQUEST, 2, b""),
    ]


@pytest.mark.parametrize("message_type", list(MessageType))
def test_ttrpc_round_trip(message_type: MessageType) -> None:
    decoder = f.MessageDecoder()
    decoder.feed(f.encode_message(7, message_type, b"payload", flags=1))
    assert decoder.next_message() == Message(7, message_type, 1, b"payload")
    assert decoder.next_message() is None


def test_ttrpc_truncated_waits() -> None:
    wire = f.encode_message(1, MessageType.REQUEST, b"abcdef")
    decoder = f.MessageDecoder()
    decoder.feed(wire[:5])
    assert decoder.next_message() is None
    decoder.feed(wire[5:12])
    assert decoder.next_message() is None
    decoder.feed(wire[12:])
    assert decoder.next_message() == Message(1, MessageType.REQUEST, 0, b"abcdef")


def test_ttrpc_byte_at_a_time_and_many_in_one_chunk() -> None:
    messages = [Message(2 * i + 1, MessageType.REQUEST, 0, bytes([i]) * i) for i in range(50)]
    wire = b"".join(f.encode_message(m.stream_id, m.type, m.payload) for m in messages)
    one_chunk = f.MessageDecoder()
    one_chunk.feed(wire)
    assert decode_all(one_chunk) == messages
    trickle = f.MessageDecoder()
    out: list[Message] = []
    for i in range(len(wire)):
        trickle.feed(wire[i : i + 1])
        out += decode_all(trickle)
    assert out == messages


def test_ttrpc_oversize_is_skipped_and_next_message_decoded() -> None:
    length = f.MESSAGE_LENGTH_MAX + 1
    oversize = length.to_bytes(4, "big") + (9).to_bytes(4, "big") + b"\x01\x00"
    good = f.encode_message(11, MessageType.REQUEST, b"next")
    decoder = f.MessageDecoder()
    decoder.feed(oversize + bytes(1000))
    with pytest.raises(f.MessageTooLarge) as exc:
        decoder.next_message()
    assert exc.value.stream_id == 9
    assert exc.value.length == length
    assert exc.value.GRPC_CODE == 8
    assert "exceed maximum message size of 4194304" in str(exc.value)
    assert decoder.buffered == 0
    # the rest of the body arrives in pieces and is dropped without being buffered
    rest = bytes(length - 1000)
    for i in range(0, len(rest), 1 << 20):
        decoder.feed(rest[i : i + (1 << 20)])
        assert decoder.buffered == 0
        assert decoder.next_message() is None
    decoder.feed(good)
    assert decoder.next_message() == Message(11, MessageType.REQUEST, 0, b"next")


def test_ttrpc_oversize_whole_in_one_chunk() -> None:
    length = f.MESSAGE_LENGTH_MAX + 3
    wire = length.to_bytes(4, "big") + (1).to_bytes(4, "big") + b"\x02\x00" + bytes(length)
    wire += f.encode_message(3, MessageType.RESPONSE, b"r")
    decoder = f.MessageDecoder()
    decoder.feed(wire)
    with pytest.raises(f.MessageTooLarge):
        decoder.next_message()
    assert decode_all(decoder) == [Message(3, MessageType.RESPONSE, 0, b"r")]


def test_ttrpc_encode_refuses_oversize() -> None:
    with pytest.raises(f.MessageTooLarge) as exc:
        f.encode_message(5, MessageType.RESPONSE, bytes(f.MESSAGE_LENGTH_MAX + 1))
    assert exc.value.stream_id == 5
    assert len(f.encode_message(5, MessageType.RESPONSE, bytes(f.MESSAGE_LENGTH_MAX))) == 10 + f.MESSAGE_LENGTH_MAX


def test_ttrpc_unknown_type_named_and_decoder_continues() -> None:
    decoder = f.MessageDecoder()
    decoder.feed(bytes.fromhex("00000002 00000007 09 00 ffff") + f.encode_message(9, MessageType.DATA, b"d"))
    with pytest.raises(f.UnknownMessageType, match="0x09") as exc:
        decoder.next_message()
    assert (exc.value.stream_id, exc.value.message_type) == (7, 9)
    assert decoder.next_message() == Message(9, MessageType.DATA, 0, b"d")


def test_errors_belong_to_the_hierarchy() -> None:
    for cls in (f.MuxFrameTooLarge, f.MessageTooLarge, f.UnknownMessageType, f.StreamIdsExhausted):
        assert issubclass(cls, f.FrameError)
        assert issubclass(cls, KoordletError)
        assert issubclass(cls, ValueError)


def test_stream_id_allocator() -> None:
    ids = f.StreamIdAllocator()
    assert [ids.allocate() for _ in range(4)] == [1, 3, 5, 7]
    ids._next = 0xFFFF_FFFF
    assert ids.allocate() == 0xFFFF_FFFF
    with pytest.raises(f.StreamIdsExhausted):
        ids.allocate()


def test_ttrpc_inside_mux_frames_end_to_end() -> None:
    big = bytes(range(256)) * 24  # 6 KiB reply: must leave as two mux frames for NRI v0.6.1
    wire = f.encode_mux(f.PLUGIN_SERVICE_CONN, f.encode_message(1, MessageType.RESPONSE, big))
    frames = f.MuxDecoder().feed(wire)
    assert len(frames) == 2
    decoder = f.MessageDecoder()
    for fr in frames:
        decoder.feed(fr.payload)
    assert decode_all(decoder) == [Message(1, MessageType.RESPONSE, 0, big)]


# --- properties -----------------------------------------------------------------------------------------

messages_st = st.lists(
    st.builds(
        Message,
        stream_id=st.integers(0, 0xFFFF_FFFF),
        type=st.sampled_from(list(MessageType)),
        flags=st.integers(0, 255),
        payload=st.binary(max_size=300),
    ),
    max_size=20,
)


def chunk(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@given(messages_st, st.lists(st.integers(0, 10_000), max_size=30))
def test_prop_ttrpc_any_chunking_decodes_same(messages: list[Message], cuts: list[int]) -> None:
    wire = b"".join(f.encode_message(m.stream_id, m.type, m.payload, m.flags) for m in messages)
    decoder = f.MessageDecoder()
    out: list[Message] = []
    for piece in chunk(wire, cuts):
        decoder.feed(piece)
        out += decode_all(decoder)
    assert out == messages
    assert decoder.buffered == 0


@given(
    st.lists(st.tuples(st.integers(1, 0xFFFF_FFFF), st.binary(max_size=300)), max_size=20),
    st.lists(st.integers(0, 10_000), max_size=30),
)
def test_prop_mux_any_chunking_decodes_same(frames: list[tuple[int, bytes]], cuts: list[int]) -> None:
    wire = b"".join(f.encode_mux_frame(c, p) for c, p in frames)
    decoder = f.MuxDecoder()
    out: list[MuxFrame] = []
    for piece in chunk(wire, cuts):
        out += decoder.feed(piece)
    assert out == frames


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=64), max_size=40))
def test_prop_ttrpc_garbage_only_documented_errors(chunks: list[bytes]) -> None:
    decoder = f.MessageDecoder()
    for piece in chunks:
        decoder.feed(piece)
        # each message or error consumes at least a 10-byte header, so this bounds the work
        for _ in range(len(piece) // f.TTRPC_HEADER_LENGTH + 2):
            try:
                if decoder.next_message() is None:
                    break
            except (f.MessageTooLarge, f.UnknownMessageType):
                pass
        else:
            # the bound above must always suffice: garbage can never spin the decoder
            assert decoder.next_message() is None
        assert decoder.buffered <= sum(map(len, chunks))


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=64), max_size=40))
def test_prop_mux_garbage_only_documented_errors(chunks: list[bytes]) -> None:
    decoder = f.MuxDecoder()
    total = 0
    for piece in chunks:
        try:
            frames = decoder.feed(piece)
        except f.MuxFrameTooLarge:
            continue
        total += len(piece)
        assert sum(len(fr.payload) for fr in frames) <= total
