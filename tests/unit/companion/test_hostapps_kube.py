"""Host applications on the companion side: a koordlet report's ``hostApplicationMetric`` travels to the
NodeMetric object, and the applications above batch priority count as system usage in the batch formula
(upstream ``GetHostAppHPUsed``), through the real client, gRPC API and fake apiserver."""

from __future__ import annotations

import time
from typing import Any

from koordlet.apis.extension import PriorityClass, QoSClass
from koordlet.apis.nodemetric import (
    HostApplicationMetricInfo,
    NodeMetricInfo,
    NodeMetricStatus,
    PodMetricInfo,
    ResourceMap,
)
from koordlet.companion.app import Companion
from koordlet.statesinformer.companion import CompanionClient, CompanionNodeMetricSink
from tests.fixtures.waiting import wait_until
from tests.unit.companion.test_app_kube import G, batch, cluster, companion, koordlet_token  # noqa: F401


def test_prod_host_apps_reduce_batch_resources(cluster: Any, companion: Companion) -> None:  # noqa: F811
    """Capacity 100 cores / 120G, reclaim 65%: margin 35 / 42G; system 7 / 12G; the LS pod 11 / 11G; nginx
    (koord-prod) 5 cores / 5G counts, yarn (koord-batch) does not: cpu 100 - 35 - 7 - 11 - 5 = 42 cores,
    memory 120 - 42 - 12 - 11 - 5 = 50G."""
    wait_until("the pod to be known", lambda: companion.compute_batch("node-1") is not None)
    status = NodeMetricStatus(
        update_time=time.time(),
        node_metric=NodeMetricInfo(node_usage=ResourceMap(60_000, 65 * G), system_usage=ResourceMap(7_000, 12 * G)),
        pods_metric=(PodMetricInfo("web", "prod", ResourceMap(11_000, 11 * G)),),
        host_application_metric=(
            HostApplicationMetricInfo("nginx", ResourceMap(5_000, 5 * G), PriorityClass.PROD, QoSClass.LS),
            HostApplicationMetricInfo("yarn-task", ResourceMap(3_000, 3 * G), PriorityClass.BATCH, QoSClass.BE)))
    sink = CompanionNodeMetricSink(CompanionClient(f"127.0.0.1:{companion.server.port}", koordlet_token(cluster),
                                                   "node-1"))
    sink.report(status)
    assert not sink.failing
    wait_until("the batch write", lambda: batch(cluster) == ("42000", str(50 * G)))
    nodemetric = wait_until("the NodeMetric object with host applications",
                            lambda: (o := cluster.get("nodemetrics", "node-1")) is not None
                            and o.get("status", {}).get("hostApplicationMetric") and o)
    assert nodemetric["status"]["hostApplicationMetric"] == [
        {"name": "nginx", "usage": {"resources": {"cpu": "5", "memory": "5000000000"}}, "priority": "koord-prod",
         "qos": "LS"},
        {"name": "yarn-task", "usage": {"resources": {"cpu": "3", "memory": "3000000000"}}, "priority": "koord-batch",
         "qos": "BE"}]
