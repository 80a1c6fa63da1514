from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class EvictPodRequest(_message.Message):
    __slots__ = ("node_name", "namespace", "name", "reason", "message")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    namespace: str
    name: str
    reason: str
    message: str
    def __init__(self, node_name: _Optional[str] = ..., namespace: _Optional[str] = ..., name: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class EvictPodResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: str
    def __init__(self, result: _Optional[str] = ...) -> None: ...

class ReportNodeMetricRequest(_message.Message):
    __slots__ = ("node_name", "status_json", "sent_at_unix_ms", "topology_json")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_JSON_FIELD_NUMBER: _ClassVar[int]
    SENT_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_JSON_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    status_json: bytes
    sent_at_unix_ms: int
    topology_json: bytes
    def __init__(self, node_name: _Optional[str] = ..., status_json: _Optional[bytes] = ..., sent_at_unix_ms: _Optional[int] = ..., topology_json: _Optional[bytes] = ...) -> None: ...

class ReportNodeMetricResponse(_message.Message):
    __slots__ = ("accepted", "collect_policy_json")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    COLLECT_POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    collect_policy_json: bytes
    def __init__(self, accepted: _Optional[bool] = ..., collect_policy_json: _Optional[bytes] = ...) -> None: ...

class WatchNodeSLORequest(_message.Message):
    __slots__ = ("node_name", "last_generation", "last_instance", "want_node", "last_node_version")
    NODE_NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_GENERATION_FIELD_NUMBER: _ClassVar[int]
    LAST_INSTANCE_FIELD_NUMBER: _ClassVar[int]
    WANT_NODE_FIELD_NUMBER: _ClassVar[int]
    LAST_NODE_VERSION_FIELD_NUMBER: _ClassVar[int]
    node_name: str
    last_generation: int
    last_instance: str
    want_node: bool
    last_node_version: str
    def __init__(self, node_name: _Optional[str] = ..., last_generation: _Optional[int] = ..., last_instance: _Optional[str] = ..., want_node: _Optional[bool] = ..., last_node_version: _Optional[str] = ...) -> None: ...

class NodeSLOUpdate(_message.Message):
    __slots__ = ("generation", "spec_json", "origin", "rendered_at_unix_ms", "instance", "collect_policy_json", "node_json", "node_version")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SPEC_JSON_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    RENDERED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    COLLECT_POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    NODE_JSON_FIELD_NUMBER: _ClassVar[int]
    NODE_VERSION_FIELD_NUMBER: _ClassVar[int]
    generation: int
    spec_json: bytes
    origin: str
    rendered_at_unix_ms: int
    instance: str
    collect_policy_json: bytes
    node_json: bytes
    node_version: str
    def __init__(self, generation: _Optional[int] = ..., spec_json: _Optional[bytes] = ..., origin: _Optional[str] = ..., rendered_at_unix_ms: _Optional[int] = ..., instance: _Optional[str] = ..., collect_policy_json: _Optional[bytes] = ..., node_json: _Optional[bytes] = ..., node_version: _Optional[str] = ...) -> None: ...
