"""The companion's only door to kube-apiserver: thin adapters over the official ``kubernetes`` client.

Everything here goes through the real client (URL building, TLS, bearer tokens, watch decoding); no
REST is hand-rolled.  Objects travel as plain JSON dicts (``_preload_content=False`` and a watch that
returns raw objects), because the NodeSLO/NodeMetric custom resources have no generated models and the
generated models for built-in types reject objects that miss a field they think required.

- :func:`make_api_client` / :func:`make_in_cluster_client`: an ``ApiClient`` from a host, token file and
  CA (the token file is re-read when it changes, as kubelet rotates projected tokens);
- :class:`NodeWatcher`, :class:`ConfigMapWatcher`, :class:`NodeMetricWatcher`: list+watch with
  resourceVersion (a reflector): a dropped watch resumes from the last version after a bounded backoff, a 410
  Expired relists, and the relist reports what changed meanwhile;
- :func:`patch_node_batch_resources`: the node status ``kubernetes.io/batch-{cpu,memory}`` merge patch;
- :class:`NodeSLOWriter`, :class:`NodeMetricWriter`: create-or-update of the cluster-scoped CRs, writing
  only when the content differs; every object they create names its Node as owner, so the garbage collector
  removes it with the node;
- :class:`NodeBatchResourceWriter`: the same batch patch with the writers' per-object backoff;
- :class:`WriteBackoff`: a write refused for good (a 4xx other than 401/408/409/429) backs off for that object
  only, so one bad object never holds up the writes of the others;
- :class:`LeaderElector`: client-go's Lease election (acquire, renew, take over after expiry, release);
- :func:`evict_pod`: the policy/v1 Eviction API.

The package exports these adapters; the constants they are built on (API group and plurals, the batch
resource names, timeouts, backoff limits) are imported from the module that defines them.
"""

from koordlet.companion.kube.backoff import ApplyResult, WriteBackoff
from koordlet.companion.kube.client import KubeApiError, call_json, make_api_client, make_in_cluster_client
from koordlet.companion.kube.lease import LeaderElector
from koordlet.companion.kube.watch import (
    ConfigMapWatcher,
    NodeMetricWatcher,
    NodeWatcher,
    ResourceWatcher,
    WatchEvent,
    object_identity,
)
from koordlet.companion.kube.writers import (
    EvictionResult,
    NodeBatchResourceWriter,
    NodeMetricWriter,
    NodeMidResourceWriter,
    NodeSLOWriter,
    evict_pod,
    patch_node_batch_resources,
)

__all__ = [
    "ApplyResult",
    "ConfigMapWatcher",
    "EvictionResult",
    "KubeApiError",
    "LeaderElector",
    "NodeBatchResourceWriter",
    "NodeMetricWatcher",
    "NodeMetricWriter",
    "NodeMidResourceWriter",
    "NodeSLOWriter",
    "NodeWatcher",
    "ResourceWatcher",
    "WatchEvent",
    "WriteBackoff",
    "call_json",
    "evict_pod",
    "make_api_client",
    "make_in_cluster_client",
    "object_identity",
    "patch_node_batch_resources",
]
