"""NodeMetric (``slo.koordinator.sh/v1alpha1``): the collect policy koordlet obeys and the status it reports.

JSON names, defaults and floors follow Koordinator: ``apis/slo/v1alpha1/nodemetric_types.go`` for the shape,
``pkg/koordlet/statesinformer/impl/states_nodemetric.go`` for the defaults (aggregate 300 s, floor 60 s;
report every 60 s, floor 30 s; node aggregates over 5m/10m/30m; memory without page cache).

The status serialises the way Go's ``encoding/json`` writes Koordinator's structs, so the scheduler, the
SLO controller and existing dashboards read it unchanged:

- quantities are Kubernetes canonical strings: CPU from milli-cores (``resource.NewMilliQuantity(m, DecimalSI)``:
  ``"138m"``, ``"2"``, ``"1k"``), memory from bytes (``resource.NewQuantity(b, BinarySI)``: ``"1815637738"``, or
  ``"17828Ki"`` when the count is a multiple of 1024);
- durations are Go ``time.Duration`` strings (``"5m0s"``), times RFC 3339 in UTC to the second;
- ``omitempty`` is honoured where Go honours it: empty lists, empty strings and nil pointers are left out, while
  the ``nodeUsage``/``systemUsage`` structs are always written (``omitempty`` does not apply to structs), as
  ``{}`` when they hold nothing.

Parsing is the reverse and as lenient as Go's decoder where that matters for hand-written specs: object keys
match case-insensitively (``encoding/json`` does), unknown keys are ignored.  Values of the wrong type are
rejected with an error naming the field path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.gojson import member
from koordlet.apis.nodemetric.policy import (
    DEFAULT_AGGREGATE_DURATION_SECONDS,
    DEFAULT_NODE_AGGREGATE_DURATIONS,
    DEFAULT_REPORT_INTERVAL_SECONDS,
    MAX_POLICY_SECONDS,
    MIN_AGGREGATE_DURATION_SECONDS,
    MIN_REPORT_INTERVAL_SECONDS,
    MemoryCollectPolicy,
    NodeMetricCollectPolicy,
)
from koordlet.apis.nodemetric.status import (
    AggregatedUsage,
    AggregationType,
    HostApplicationMetricInfo,
    NodeMetricInfo,
    NodeMetricStatus,
    PeakMetric,
    PodMetricInfo,
    ReclaimableMetric,
    ResourceMap,
    format_time,
    parse_time,
)
from koordlet.errors import ConfigError, ParseError

__all__ = [
    "API_VERSION",
    "DEFAULT_AGGREGATE_DURATION_SECONDS",
    "DEFAULT_NODE_AGGREGATE_DURATIONS",
    "DEFAULT_REPORT_INTERVAL_SECONDS",
    "KIND",
    "MAX_POLICY_SECONDS",
    "MIN_AGGREGATE_DURATION_SECONDS",
    "MIN_REPORT_INTERVAL_SECONDS",
    "AggregatedUsage",
    "AggregationType",
    "HostApplicationMetricInfo",
    "MemoryCollectPolicy",
    "NodeMetric",
    "NodeMetricCollectPolicy",
    "NodeMetricInfo",
    "NodeMetricStatus",
    "PeakMetric",
    "PodMetricInfo",
    "ReclaimableMetric",
    "ResourceMap",
    "format_time",
    "parse_time",
]

API_VERSION: Final = "slo.koordinator.sh/v1alpha1"
KIND: Final = "NodeMetric"


@dataclass(frozen=True, slots=True)
class NodeMetric:
    """A whole NodeMetric object (cluster-scoped, named after its node)."""

    name: str
    collect_policy: NodeMetricCollectPolicy | None = None
    """The spec's policy with defaults applied; None when the spec sets none."""
    status: NodeMetricStatus = field(default_factory=NodeMetricStatus)

    @property
    def effective_policy(self) -> NodeMetricCollectPolicy:
        return self.collect_policy if self.collect_policy is not None else NodeMetricCollectPolicy()

    def to_json(self) -> dict[str, Any]:
        spec = {"metricCollectPolicy": self.collect_policy.to_json()} if self.collect_policy is not None else {}
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": self.name},
            "spec": spec,
            "status": self.status.to_json(),
        }

    @classmethod
    def from_json(cls, obj: Any) -> NodeMetric:
        """Parses a NodeMetric object (``kubectl get nodemetric -o json``, or YAML loaded to a dict).

        Raises ConfigError for a bad spec and ParseError for a bad status or envelope."""
        obj = gojson.mapping(obj, "NodeMetric", optional=False)
        api_version, kind = member(obj, "apiVersion"), member(obj, "kind")
        if api_version not in (None, API_VERSION) or kind not in (None, KIND):
            raise ParseError(f"NodeMetric: expected {API_VERSION} {KIND}, got {api_version} {kind}")
        metadata = gojson.mapping(member(obj, "metadata") or {}, "metadata", optional=False)
        spec = member(obj, "spec")
        has_policy = spec is not None and member(gojson.mapping(spec, "spec", ConfigError, optional=False),
                                                          "metricCollectPolicy") is not None
        return cls(
            name=gojson.string(member(metadata, "name"), "metadata.name"),
            collect_policy=NodeMetricCollectPolicy.from_spec(spec) if has_policy else None,
            status=NodeMetricStatus.from_json(member(obj, "status")),
        )
