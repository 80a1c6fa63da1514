"""Load-aware scheduling as a kube-scheduler HTTP extender.

The semantics are Koordinator's ``LoadAwareScheduling`` plugin (``pkg/scheduler/plugins/loadaware``:
``load_aware.go``, ``helper.go``, ``estimator/default_estimator.go``; defaults from
``pkg/scheduler/apis/config/v1/defaults.go``), served over the extender protocol of
``k8s.io/kube-scheduler/extender/v1`` so a stock kube-scheduler can use it:

- ``POST .../filter`` takes ``ExtenderArgs{Pod, Nodes | NodeNames}`` and answers ``ExtenderFilterResult``;
- ``POST .../prioritize`` answers a ``HostPriorityList`` scored 0..10 (``MaxExtenderPriority``);
- ``GET /healthz`` answers ``ok``.

The extender types carry no JSON tags, so Go writes the capitalised field names (``"Pod"``, ``"NodeNames"``,
``"FailedNodes"``, ``"Host"``, ``"Score"``) and reads keys case-insensitively; this module does the same.

**Estimated usage** of a node, as upstream ``GetEstimatedUsed``: the NodeMetric's ``nodeUsage`` (or the
configured percentile of ``aggregatedNodeUsages``), minus the measured usage of pods that are being
estimated, plus the estimate of every assigned pod that the metric cannot reflect yet (no ``podsMetric``
entry, assigned after ``updateTime``, or assigned less than one report interval before it), plus the
estimate of the pod being scheduled.  A pod's estimate is ``max(request, limit) * factor%`` rounded half
away from zero and capped at the limit; with neither set it is 250m CPU and 200 MiB memory, unscaled.

**Filter**: a node is rejected when ``round(used / allocatable * 100) > threshold`` for a resource whose
threshold is not 0 (upstream ``filterNodeUsage``: a node exactly at its threshold passes).  Node annotation
``scheduling.koordinator.sh/usage-thresholds`` overrides the thresholds per node.  Pods of priority class
``koord-prod`` are checked against ``prodUsageThresholds`` (when set) and the sum of prod pods' usage.
A node whose NodeMetric is older than ``nodeMetricExpirationSeconds`` (or has no ``updateTime``) is
rejected with ``node(s) nodeMetric expired`` unless ``enableScheduleWhenNodeMetricsExpired`` (then it
passes unchecked); with ``filterExpiredNodeMetrics: false`` its stale usage is checked as usual.  A node
without a NodeMetric passes: load awareness is an optimisation and such a node may run no koordlet.
DaemonSet pods pass every node.

**Prioritize**: upstream's weighted least-used score, ``sum_r w_r * (alloc_r - used_r) * 100 // alloc_r
// sum w`` (0..100), divided by 10 with the remainder dropped for the extender's 0..10 range.  A node
without a usable, fresh NodeMetric scores 0.

**Assignments**: upstream learns pods placed on a node from the scheduler's pod informer (its
``podAssignCache``: ``Reserve`` plus informer add/update/delete).  An extender sees no Reserve and is not
told which node won, so :class:`NodeStore` exposes the same cache as :meth:`NodeStore.assign_pod` /
:meth:`NodeStore.unassign_pod`, to be driven by the companion's pod watch (a pod with ``spec.nodeName``,
timestamped by its ``PodScheduled`` condition as upstream does).  The extender does not implement the
``bind`` verb: binding would make it responsible for creating the Binding.

**Requests never change the store.**  The ``Nodes`` form carries whole Node objects, but the store follows
the companion's own Node watch: a node it knows is answered from there whatever the request claims, and a
node it has no Node object of is answered from the request's copy for that answer only.  Otherwise one
request could rewrite a real node's allocatable and thresholds for every later (names-only) answer.

**Serving** (:func:`make_server`): bodies up to 16 MiB (413 beyond, unread), deadlines on every request and
idle connection, at most 64 connections and two requests decoded at once (:data:`DEFAULT_LIMITS`).

**Cost**: everything that depends only on the node (allocatable, thresholds, the usage base above) is
computed when a Node, a NodeMetric or an assignment changes, down to the smallest estimate each threshold
rejects and the free capacity each score divides (:mod:`~koordlet.companion.extender.gates`, kept in flat
arrays by :mod:`~koordlet.companion.extender.table`); a ``NodeNames`` request costs the pod's estimate once
plus a lookup and a few integer comparisons per node, with the store's lock held while it reads them.  Only
``cpu`` and ``memory`` are tracked: a threshold on another resource is skipped (as upstream does for a
resource the node lacks), a weight on one scores 0.
"""

from koordlet.companion.extender.args import ARGS_KIND, PLUGIN_NAME, AggregatedArgs, LoadAwareArgs
from koordlet.companion.extender.loadaware import (
    MAX_EXTENDER_PRIORITY,
    MAX_NODE_SCORE,
    REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD,
    REASON_NODE_METRIC_EXPIRED,
    REASON_UNKNOWN_NODE,
    REASON_USAGE_EXCEED_THRESHOLD,
    LoadAwareExtender,
)
from koordlet.companion.extender.pods import (
    DEFAULT_MEMORY_REQUEST,
    DEFAULT_MILLI_CPU_REQUEST,
    PodInfo,
    estimate_pod,
    parse_pod,
)
from koordlet.companion.extender.server import DEFAULT_LIMITS, MAX_ACTIVE_REQUESTS, MAX_BODY_BYTES, make_server
from koordlet.companion.extender.store import NodeStore
from koordlet.companion.extender.views import (
    ANNOTATION_CUSTOM_USAGE_THRESHOLDS,
    ANNOTATION_NODE_RAW_ALLOCATABLE,
    NodeView,
)

__all__ = [
    "ANNOTATION_CUSTOM_USAGE_THRESHOLDS",
    "ANNOTATION_NODE_RAW_ALLOCATABLE",
    "ARGS_KIND",
    "DEFAULT_LIMITS",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "MAX_ACTIVE_REQUESTS",
    "MAX_BODY_BYTES",
    "MAX_EXTENDER_PRIORITY",
    "MAX_NODE_SCORE",
    "PLUGIN_NAME",
    "REASON_AGGREGATED_USAGE_EXCEED_THRESHOLD",
    "REASON_NODE_METRIC_EXPIRED",
    "REASON_UNKNOWN_NODE",
    "REASON_USAGE_EXCEED_THRESHOLD",
    "AggregatedArgs",
    "LoadAwareArgs",
    "LoadAwareExtender",
    "NodeStore",
    "NodeView",
    "PodInfo",
    "estimate_pod",
    "make_server",
    "parse_pod",
]
