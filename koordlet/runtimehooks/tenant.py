"""The tenant policy at the runtime hooks' door: every request the hook runner takes (NRI, the
RuntimeHookService server, the reconciler) carries the pod as the runtime describes it, labels and
annotations included, so the runner hands the hooks a reviewed pod (:mod:`koordlet.apis.tenantpolicy`).

The review here sees what the runtime's message cannot carry through the states informer: the pod as kubelet
lists it (memory requests and QoS, for kubelet's oom_score_adj), the other pods' exclusive CPUs, and the
node's CPUs and memory.  A pod the informer does not know yet counts as untrusted and, for oom_score_adj,
as requesting no memory, so its floor is never guessed low.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from koordlet.apis.pod import Pod
from koordlet.apis.tenantpolicy import TenantPolicy, exclusive_claims
from koordlet.errors import KoordletError
from koordlet.runtimehooks.framework import HookRequest
from koordlet.statesinformer.framework import PodMeta
from koordlet.system.node import NodeInfo


class TenantGate:
    """``gate(request) -> request`` with the pod reviewed; refusals are recorded in the policy (logged once per
    pod), never cleared here: the informer's review of its pod list owns the pod's current record."""

    def __init__(self, policy: TenantPolicy, pods: Callable[[], Sequence[PodMeta]],
                 node: Callable[[], NodeInfo]) -> None:
        self.policy = policy
        self._pods = pods
        self._node = node
        self._seen: Sequence[PodMeta] | None = None
        self._claims: Mapping[int, Pod] = {}
        self._by_uid: Mapping[str, PodMeta] = {}

    def _index(self) -> tuple[Mapping[int, Pod], Mapping[str, PodMeta]]:
        pods = self._pods()
        if pods is not self._seen:
            # The informer replaces its tuple on each change: one index per list, not per request.
            self._claims = exclusive_claims(m.pod for m in pods)
            self._by_uid = {m.uid: m for m in pods}
            self._seen = pods
        return self._claims, self._by_uid

    def __call__(self, request: HookRequest) -> HookRequest:
        claims, by_uid = self._index()
        known = by_uid.get(request.pod.uid)
        try:
            pod = request.pod_with_kube_qos()
        except KoordletError:
            pod = request.pod  # no class known: the review assumes the strictest (BestEffort)
        node = self._node()
        reviewed, refusals = self.policy.review(
            pod, memory_capacity_bytes=node.memory_total_bytes, node_cpus=node.online_cpus or None,
            exclusive=claims, trusted=known is not None and known.source == "config",
            requests_from=known.pod if known is not None else None)
        self.policy.note(reviewed, refusals, latest=False)
        if not refusals:
            return request
        return dataclasses.replace(request, pod=dataclasses.replace(
            request.pod, labels=reviewed.labels, annotations=reviewed.annotations))
