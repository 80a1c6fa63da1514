"""Fuzzing of what koordlet and the runtime proxy decode from the container runtime side.

- NRI framing (koordlet/runtimehooks/nri/frames.py): the mux trunk and the ttrpc messages on it, fed in
  arbitrary chunks; only ``FrameError`` may come out, and decoding always ends;
- the NRI plugin's request messages (``ParseFromString`` of any bytes: a message or ``DecodeError``) and their
  conversion into hook requests (koordlet/runtimehooks/nri/convert.py), for sandboxes and containers whose
  every field (labels, annotations, cgroup parent, resources) is fuzzed;
- the hook server's conversion of the runtime proxy's requests (koordlet/runtimehooks/hookserver/convert.py);
- the runtime proxy's own decoding of kubelet's CRI requests (``Interceptor._parse``) and its re-encoding of
  CRI resources into hook messages (``_convert``).

Protobuf messages are drawn from their descriptors (:func:`messages`), so every field of the real types gets
extreme integers, unicode strings and nested messages.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError
from hypothesis import example, given
from hypothesis import strategies as st

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.nri.v1alpha1 import api_pb2 as nri
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hook
from koordlet.errors import KoordletError
from koordlet.runtimehooks.framework import Stage
from koordlet.runtimehooks.hookserver import convert as hook_convert
from koordlet.runtimehooks.nri import convert as nri_convert
from koordlet.runtimehooks.nri import frames
from runtimeproxy import intercept
from tests.security.fuzzkit import decode, fuzz_settings

# ----------------------------------------------------------------------------------- protobuf messages

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: (-2**31, 2**31 - 1), FieldDescriptor.TYPE_SINT32: (-2**31, 2**31 - 1),
    FieldDescriptor.TYPE_SFIXED32: (-2**31, 2**31 - 1), FieldDescriptor.TYPE_INT64: (-2**63, 2**63 - 1),
    FieldDescriptor.TYPE_SINT64: (-2**63, 2**63 - 1), FieldDescriptor.TYPE_SFIXED64: (-2**63, 2**63 - 1),
    FieldDescriptor.TYPE_UINT32: (0, 2**32 - 1), FieldDescriptor.TYPE_FIXED32: (0, 2**32 - 1),
    FieldDescriptor.TYPE_UINT64: (0, 2**64 - 1), FieldDescriptor.TYPE_FIXED64: (0, 2**64 - 1),
}
_CGROUP_PARENTS = st.sampled_from([
    "kubepods-besteffort-pod1.slice", "kubepods-burstable-pod1.slice", "kubepods-pod1.slice",
    "/kubepods/besteffort/pod1", "/kubepods/burstable/pod1", "/kubepods/pod1", "/kubepods.slice/../..", "",
    "kubepods-besteffort-pod1.slice:cri-containerd:abc", "/", "..", "kubepods-.slice", "a\x00b",
])
_cache: dict[tuple[str, int], st.SearchStrategy[Any]] = {}


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.type in _INT_RANGES:
        low, high = _INT_RANGES[field.type]
        return st.one_of(st.integers(low, high), st.sampled_from([low, high, 0, 1, -1 if low < 0 else 2]))
    if field.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=32 if field.type == FieldDescriptor.TYPE_FLOAT else 64)
    if field.type == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if field.type == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=20)
    if field.type == FieldDescriptor.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-2**31, 2**31 - 1))
    if "cgroup" in field.name:
        return st.one_of(_CGROUP_PARENTS, st.text(max_size=40))
    return st.text(max_size=24)


def messages(descriptor: Descriptor, depth: int = 4) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for a message of ``descriptor``: any subset of its fields, each a value of its type
    (integers at and between their limits, any unicode text, nested messages to ``depth`` levels)."""
    key = (descriptor.full_name, depth)
    if key in _cache:
        return _cache[key]
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name
            key_field, value_field = entry["key"], entry["value"]
            if value_field.message_type is not None:
                if depth <= 0:
                    continue
                value: st.SearchStrategy[Any] = messages(value_field.message_type, depth - 1)
            else:
                value = _scalar(value_field)
            fields[field.name] = st.dictionaries(_scalar(key_field), value, max_size=3)
            continue
        if field.message_type is not None:
            if depth <= 0:
                continue
            item: st.SearchStrategy[Any] = messages(field.message_type, depth - 1)
        else:
            item = _scalar(field)
        fields[field.name] = st.lists(item, max_size=3) if field.is_repeated else item
    strategy = st.fixed_dictionaries({}, optional=fields)
    _cache[key] = strategy
    return strategy


def built(cls: Any, depth: int = 4) -> st.SearchStrategy[Any]:
    """Messages of type ``cls`` drawn field by field."""
    def make(kwargs: dict[str, Any]) -> Any:
        message = cls()
        _fill(message, kwargs)
        return message
    return messages(cls.DESCRIPTOR, depth).map(make)


def _fill(message: Any, kwargs: dict[str, Any]) -> None:
    for name, value in kwargs.items():
        field = message.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key, item in value.items():
                if isinstance(item, dict):
                    _fill(target[key], item)
                else:
                    target[key] = item
        elif field.is_repeated:
            for item in value:
                if isinstance(item, dict):
                    _fill(target.add(), item)
                else:
                    target.append(item)
        elif isinstance(value, dict):
            target.SetInParent()
            _fill(target, value)
        else:
            setattr(message, name, value)


# ----------------------------------------------------------------------------------------------- framing


chunks = st.lists(st.one_of(
    st.binary(max_size=64),
    st.builds(lambda conn, body: frames.MUX_HEADER.pack(conn, len(body)) + body,
              st.integers(0, 2**32 - 1), st.binary(max_size=64)),
    st.builds(lambda conn, length: frames.MUX_HEADER.pack(conn, length), st.integers(0, 2**32 - 1),
              st.sampled_from([0, 1, frames.MUX_RECEIVE_MAX, frames.MUX_RECEIVE_MAX + 1, 2**32 - 1])),
), max_size=8)


@fuzz_settings(300)
@given(chunks=chunks)
def test_mux_decoder(chunks: list[bytes]) -> None:
    def feed() -> None:
        decoder = frames.MuxDecoder()
        for chunk in chunks:
            try:
                decoder.feed(chunk)
            except frames.FrameError:
                return
            assert decoder.buffered <= frames.MUX_HEADER_LENGTH + frames.MUX_RECEIVE_MAX

    decode("nri MuxDecoder.feed", feed, (frames.FrameError,))


ttrpc_chunks = st.lists(st.one_of(
    st.binary(max_size=64),
    st.builds(lambda sid, kind, flags, body: frames.TTRPC_HEADER.pack(len(body), sid, kind, flags) + body,
              st.integers(0, 2**32 - 1), st.integers(0, 255), st.integers(0, 255), st.binary(max_size=64)),
    st.builds(lambda sid, length: frames.TTRPC_HEADER.pack(length, sid, 1, 0), st.integers(0, 2**32 - 1),
              st.sampled_from([frames.MESSAGE_LENGTH_MAX, frames.MESSAGE_LENGTH_MAX + 1, 2**32 - 1])),
), max_size=8)


@fuzz_settings(300)
@given(chunks=ttrpc_chunks)
def test_ttrpc_message_decoder(chunks: list[bytes]) -> None:
    def feed() -> int:
        decoder = frames.MessageDecoder()
        seen = 0
        for chunk in chunks:
            decoder.feed(chunk)
            for _ in range(10_000):  # each call consumes input or returns None: a bound, not a hope
                try:
                    message = decoder.next_message()
                except frames.FrameError:
                    continue
                if message is None:
                    break
                seen += 1
            else:
                raise AssertionError("MessageDecoder.next_message never ran out of messages")
        return seen

    decode("nri ttrpc MessageDecoder", feed, ())


# ------------------------------------------------------------------------------------- NRI requests


_NRI_REQUESTS = {name: getattr(nri, name) for name in (
    "ConfigureRequest", "SynchronizeRequest", "CreateContainerRequest", "UpdateContainerRequest",
    "StopContainerRequest", "StateChangeEvent", "UpdatePodSandboxRequest") if hasattr(nri, name)}


@pytest.mark.parametrize("message", sorted(_NRI_REQUESTS))
@fuzz_settings(150)
@given(data=st.binary(max_size=300))
def test_nri_request_protobuf(message: str, data: bytes) -> None:
    decode(f"nri {message} (protobuf)", lambda: _NRI_REQUESTS[message].FromString(data), (DecodeError,))


@fuzz_settings(200)
@given(sandbox=built(nri.PodSandbox), container=built(nri.Container),
       stage=st.sampled_from([Stage.PRE_CREATE_CONTAINER, Stage.PRE_UPDATE_CONTAINER_RESOURCES,
                              Stage.POST_STOP_CONTAINER]),
       runtime=st.sampled_from(["containerd", "cri-o", "CRIO", "", "\u0130"]))
def test_nri_container_request(sandbox: Any, container: Any, stage: Stage, runtime: str) -> None:
    def convert() -> Any:
        scheme = nri_convert.container_id_scheme(runtime)
        nri_convert.pod_request(Stage.PRE_RUN_POD_SANDBOX, sandbox)
        return nri_convert.container_request(stage, sandbox, container, scheme)

    decode("nri convert.container_request", convert, (KoordletError,))


# ------------------------------------------------------------------------- hook server (runtime proxy)


@fuzz_settings(200)
@given(request=built(hook.PodSandboxHookRequest))
@example(request=hook.PodSandboxHookRequest(cgroup_parent="a\x00b"))
def test_hookserver_pod_sandbox_request(request: Any) -> None:
    decode("hookserver convert.pod_sandbox_request",
           lambda: hook_convert.pod_sandbox_request(Stage.PRE_RUN_POD_SANDBOX, request), (KoordletError,))


@fuzz_settings(200)
@given(request=built(hook.ContainerResourceHookRequest))
def test_hookserver_container_request(request: Any) -> None:
    decode("hookserver convert.container_request",
           lambda: hook_convert.container_request(Stage.PRE_CREATE_CONTAINER, request), (KoordletError,))


# ---------------------------------------------------------------------------------------- runtime proxy

_CRI_REQUESTS = {name: getattr(cri, name) for name in (
    "RunPodSandboxRequest", "StopPodSandboxRequest", "RemovePodSandboxRequest", "CreateContainerRequest",
    "StartContainerRequest", "StopContainerRequest", "RemoveContainerRequest", "UpdateContainerResourcesRequest")}


@pytest.mark.parametrize("message", sorted(_CRI_REQUESTS))
@fuzz_settings(100)
@given(data=st.binary(max_size=300))
def test_proxy_parse(message: str, data: bytes) -> None:
    """``Interceptor._parse``: kubelet's request bytes, or None (the proxy forwards what it cannot read)."""
    decode(f"runtimeproxy _parse({message})", lambda: intercept.Interceptor._parse(_CRI_REQUESTS[message], data), ())


@fuzz_settings(200)
@given(resources=built(cri.LinuxContainerResources))
def test_proxy_convert_resources(resources: Any) -> None:
    """CRI resources re-encoded as the hook protocol's: the wire layouts must agree for every field value."""
    decode("runtimeproxy _convert(LinuxContainerResources)",
           lambda: intercept._convert(resources, hook.LinuxContainerResources()), ())


@fuzz_settings(200)
@given(config=built(cri.PodSandboxConfig, depth=3))
def test_proxy_pod_from_config(config: Any) -> None:
    decode("runtimeproxy _pod_from_config", lambda: intercept.Interceptor._pod_from_config(config), ())
