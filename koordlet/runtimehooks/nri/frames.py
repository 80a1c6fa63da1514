"""Byte framing of the NRI socket: mux frames outside, ttrpc messages inside. Payloads are opaque bytes.

Layout, outer to inner (all integers big-endian):

* mux frame (containerd/nri ``pkg/net/multiplex/mux.go``): ``[conn id u32][payload length u32][payload]``.
  Conn 0 is reserved; ``PluginServiceConn`` = 1 carries runtime->plugin calls (the plugin is the ttrpc
  server), ``RuntimeServiceConn`` = 2 carries plugin->runtime calls (``pkg/net/multiplex/ttrpc.go``).
* ttrpc message (containerd/ttrpc ``channel.go``): ``[length u32][stream id u32][type u8][flags u8][data]``,
  data at most ``messageLengthMax`` = 4 MiB.  The ttrpc byte stream of one conn is the concatenation of that
  conn's mux payloads: a message may span frames and a frame may hold several messages.

Decoders are incremental and never block: ``feed`` bytes as they arrive; an incomplete header or body just
waits for more.  Memory is bounded: a frame or message larger than its cap is never buffered.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from typing import NamedTuple

from koordlet.errors import KoordletError

# --- mux (containerd/nri pkg/net/multiplex) -------------------------------------------------------------

MUX_HEADER = struct.Struct(">II")  # mux.go: headerLen = 8, "4-byte ConnID, 4-byte payload length"
MUX_HEADER_LENGTH = MUX_HEADER.size
RESERVED_CONN_ID = 0  # mux.go: "ConnID 0 is reserved for future use."
PLUGIN_SERVICE_CONN = 1  # ttrpc.go: PluginServiceConn = iota + 1 (runtime calls the plugin)
RUNTIME_SERVICE_CONN = 2  # ttrpc.go: RuntimeServiceConn (the plugin calls the runtime)
_UINT32_MAX = 0xFFFF_FFFF

# --- ttrpc (containerd/ttrpc channel.go) ----------------------------------------------------------------

TTRPC_HEADER = struct.Struct(">IIBB")  # channel.go: messageHeaderLength = 10
TTRPC_HEADER_LENGTH = TTRPC_HEADER.size
MESSAGE_LENGTH_MAX = 4 << 20  # channel.go: messageLengthMax = 4 << 20

# mux.go: maxPayloadSize = ttrpcMessageHeaderLength + ttrpcMessageLengthMax; our writer refuses larger frames.
MUX_PAYLOAD_MAX = TTRPC_HEADER_LENGTH + MESSAGE_LENGTH_MAX

# What the reader accepts.  containerd 1.7.24 (NRI v0.6.1) was measured sending a 5.3 MB Synchronize as the
# frames [4096][rest], so a frame above MUX_PAYLOAD_MAX does arrive from a healthy runtime; the ttrpc layer
# then skips the oversize message and the plugin answers it.  Only a frame beyond any plausible message
# (64 MiB) means the trunk is corrupt.
MUX_RECEIVE_MAX = 64 << 20

# test-host.md (containerd 1.7.24, NRI v0.6.1, measured): the runtime reads each conn through a 4096-byte
# buffer and loses the rest of a larger frame, so the plugin must send frames of at most 4096 bytes.  Newer
# runtimes read whole frames, and a ttrpc stream split across frames is still one stream, so this is safe for both.
MUX_SEND_FRAME_MAX = 4096

FLAG_REMOTE_CLOSED = 0x1  # channel.go: flagRemoteClosed
FLAG_REMOTE_OPEN = 0x2  # channel.go: flagRemoteOpen
FLAG_NO_DATA = 0x4  # channel.go: flagNoData


class MessageType(enum.IntEnum):
    """ttrpc message types (channel.go ``messageType``)."""

    REQUEST = 1
    RESPONSE = 2
    DATA = 3


# --- errors ---------------------------------------------------------------------------------------------


class FrameError(KoordletError, ValueError):
    """Root of every error this module raises about bytes on the wire."""


class MuxFrameTooLarge(FrameError):
    """A mux frame longer than the limit (:data:`MUX_PAYLOAD_MAX` to send, the decoder's ``max_payload``
    to receive): the trunk is corrupt and must be closed."""

    def __init__(self, conn_id: int, length: int, limit: int = MUX_PAYLOAD_MAX) -> None:
        super().__init__(f"mux frame on conn {conn_id}: payload length {length} exceeds maximum {limit}")
        self.conn_id = conn_id
        self.length = length


class MessageTooLarge(FrameError):
    """A ttrpc message longer than :data:`MESSAGE_LENGTH_MAX`.

    Not fatal: as ttrpc's ``channel.recv`` does, the decoder discards the body and carries on; the receiver
    answers the stream with ResourceExhausted (gRPC code 8).
    """

    GRPC_CODE = 8  # codes.ResourceExhausted

    def __init__(self, stream_id: int, length: int) -> None:
        super().__init__(
            f"stream {stream_id}: message length {length} exceed maximum message size of {MESSAGE_LENGTH_MAX}"
        )
        self.stream_id = stream_id
        self.length = length


class UnknownMessageType(FrameError):
    """A ttrpc message whose type byte is not request/response/data; its body was consumed."""

    def __init__(self, stream_id: int, message_type: int) -> None:
        super().__init__(f"stream {stream_id}: unknown ttrpc message type {message_type:#04x}")
        self.stream_id = stream_id
        self.message_type = message_type


class StreamIdsExhausted(FrameError):
    """The odd client stream ids of one connection ran past 2**32: the connection must be re-established."""


# --- mux ------------------------------------------------------------------------------------------------


class MuxFrame(NamedTuple):
    conn_id: int
    payload: bytes


def encode_mux_frame(conn_id: int, payload: bytes) -> bytes:
    """One mux frame; ``payload`` must fit in :data:`MUX_PAYLOAD_MAX` (mux.go ``write``)."""
    if not 0 < conn_id <= _UINT32_MAX:
        raise FrameError(f"mux conn id {conn_id} out of range 1..{_UINT32_MAX} (0 is reserved)")
    if len(payload) > MUX_PAYLOAD_MAX:
        raise MuxFrameTooLarge(conn_id, len(payload))
    return MUX_HEADER.pack(conn_id, len(payload)) + payload


def encode_mux(conn_id: int, data: bytes, max_frame: int = MUX_SEND_FRAME_MAX) -> bytes:
    """``data`` of one conn's byte stream as frames of at most ``max_frame`` payload bytes (empty: no frame)."""
    if not 0 < max_frame <= MUX_PAYLOAD_MAX:
        raise FrameError(f"mux max_frame {max_frame} out of range 1..{MUX_PAYLOAD_MAX}")
    view = memoryview(data)
    return b"".join(encode_mux_frame(conn_id, bytes(view[i : i + max_frame])) for i in range(0, len(data), max_frame))


class MuxDecoder:
    """Incremental mux frame decoder.

    ``feed`` returns every frame completed so far.  A frame over ``max_payload`` (default
    :data:`MUX_RECEIVE_MAX`) breaks the trunk for
    good: frames before it are still returned, and that call (or, if it returned frames, the next one) raises
    :class:`MuxFrameTooLarge`, as does every call after.  Frames for conn 0 or unknown conns are returned as
    they are; upstream drops frames for conns nobody opened, which is the caller's routing decision.
    """

    def __init__(self, max_payload: int = MUX_RECEIVE_MAX) -> None:
        self._buf = bytearray()
        self._error: MuxFrameTooLarge | None = None
        self._max = max_payload

    def feed(self, data: bytes) -> list[MuxFrame]:
        if self._error is not None:
            raise self._error
        self._buf += data
        frames: list[MuxFrame] = []
        while len(self._buf) >= MUX_HEADER_LENGTH:
            conn_id, length = MUX_HEADER.unpack_from(self._buf)
            if length > self._max:
                self._error = MuxFrameTooLarge(conn_id, length, self._max)
                self._buf.clear()
                if frames:
                    return frames
                raise self._error
            end = MUX_HEADER_LENGTH + length
            if len(self._buf) < end:
                break
            frames.append(MuxFrame(conn_id, bytes(self._buf[MUX_HEADER_LENGTH:end])))
            del self._buf[:end]  # bytearray deletes from the front in O(1) amortised
        return frames

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)


# --- ttrpc ----------------------------------------------------------------------------------------------


class Message(NamedTuple):
    stream_id: int
    type: MessageType
    flags: int
    payload: bytes


def encode_message(stream_id: int, message_type: MessageType, payload: bytes, flags: int = 0) -> bytes:
    """One ttrpc message (channel.go ``send``: refuses data over :data:`MESSAGE_LENGTH_MAX`)."""
    if not 0 <= stream_id <= _UINT32_MAX:
        raise FrameError(f"ttrpc stream id {stream_id} out of range 0..{_UINT32_MAX}")
    if not 0 <= flags <= 0xFF:
        raise FrameError(f"ttrpc flags {flags} out of range 0..255")
    if len(payload) > MESSAGE_LENGTH_MAX:
        raise MessageTooLarge(stream_id, len(payload))
    return TTRPC_HEADER.pack(len(payload), stream_id, MessageType(message_type), flags) + payload


class MessageDecoder:
    """Incremental decoder of one conn's ttrpc byte stream, in the style of h11: ``feed`` then ``next_message``.

    ``next_message`` returns the next message, ``None`` when it needs more bytes, or raises, in stream order:

    * :class:`MessageTooLarge` (with the stream id) for a message over 4 MiB; its body is skipped as it arrives,
      never buffered, and decoding resumes after it (channel.go ``recv``: ``Discard`` then ResourceExhausted);
    * :class:`UnknownMessageType` naming the type byte, after its body was consumed.

    Both leave the decoder usable.  Work per byte is constant, so garbage cannot make it hang.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._skip = 0  # bytes of an oversize body still to discard

    def feed(self, data: bytes) -> None:
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buf += data

    def next_message(self) -> Message | None:
        if self._skip:
            dropped = min(self._skip, len(self._buf))
            self._skip -= dropped
            del self._buf[:dropped]
            if self._skip:
                return None
        if len(self._buf) < TTRPC_HEADER_LENGTH:
            return None
        length, stream_id, raw_type, flags = TTRPC_HEADER.unpack_from(self._buf)
        if length > MESSAGE_LENGTH_MAX:
            # Checked before the type, as channel.go does: the header is all we trust about an oversize message.
            available = min(length, len(self._buf) - TTRPC_HEADER_LENGTH)
            del self._buf[: TTRPC_HEADER_LENGTH + available]
            self._skip = length - available
            raise MessageTooLarge(stream_id, length)
        end = TTRPC_HEADER_LENGTH + length
        if len(self._buf) < end:
            return None
        payload = bytes(self._buf[TTRPC_HEADER_LENGTH:end])
        del self._buf[:end]
        try:
            message_type = MessageType(raw_type)
        except ValueError:
            raise UnknownMessageType(stream_id, raw_type) from None
        return Message(stream_id, message_type, flags, payload)

    def __iter__(self) -> Iterator[Message]:
        """Messages available now; an error ends the iteration by propagating (the decoder stays usable)."""
        while (message := self.next_message()) is not None:
            yield message

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete message (an oversize body being skipped is not held)."""
        return len(self._buf)


class StreamIdAllocator:
    """Client stream ids of one ttrpc connection: odd, from 1, increasing by 2 (ttrpc client.go
    ``nextStreamID: 1`` and ``+ 2``; PROTOCOL.md: client-initiated streams are odd and must increase)."""

    def __init__(self) -> None:
        self._next = 1

    def allocate(self) -> int:
        if self._next > _UINT32_MAX:
            raise StreamIdsExhausted(f"ttrpc client stream ids exhausted after {_UINT32_MAX}")
        stream_id = self._next
        self._next += 2
        return stream_id
