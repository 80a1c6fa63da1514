"""The CRI calls the proxy hooks (Koordinator ``pkg/runtimeproxy/server/cri``), as raw-bytes handlers for
:class:`runtimeproxy.backend.PassthroughHandler`.

| CRI call | before forwarding | after it succeeded |
|---|---|---|
| RunPodSandbox | PreRunPodSandbox: labels, annotations, cgroup parent, resources | pod info checkpointed |
| StopPodSandbox | | PostStopPodSandbox (with the checkpointed pod) |
| RemovePodSandbox | | pod and its containers dropped from the checkpoint |
| CreateContainer | PreCreateContainer: annotations, resources, envs, pod cgroup parent | container checkpointed |
| StartContainer | PreStartContainer | PostStartContainer |
| StopContainer | | PostStopContainer |
| RemoveContainer | | container dropped from the checkpoint |
| UpdateContainerResources | PreUpdateContainerResources: resources | checkpoint updated |

A call goes to the first registered hook server that lists its stage.  When none does, when the pod
carries the skip label (``runtimeproxy.koordinator.sh/skip-hookserver=true`` by default, as a label or an
annotation: koordlet's own pod must start without koordlet) and lives in a namespace allowed to skip, or for
calls the proxy cannot decode, the original bytes are forwarded untouched.

A pod names its own labels and annotations, so the skip label is tenant input: only pods of the namespaces
in ``skip_namespaces`` (``--skip-hookserver-namespaces``, default ``kube-system`` and
``koordinator-system``, where koordlet runs; ``*`` every namespace, Koordinator's behaviour) are skipped.
Anywhere else the label is ignored - the pod's calls are hooked like any other pod's - and logged once per
pod.  The namespace is the one kubelet puts in the CRI sandbox metadata (``RunPodSandbox``'s
``config.metadata``, ``CreateContainer``'s ``sandbox_config.metadata``), checkpointed with the pod for the
later calls.  A Pre hook that fails - unreachable, an error status, a timeout, or an answer with invalid
resources (a negative quota, a malformed cpuset...) - is handled by that server's failure policy: ``Fail``
fails the CRI call before anything reaches the runtime (so nothing is half created), ``Ignore`` logs and
forwards the original request.  Post hooks only log their failures: the runtime already acted.
"""

from __future__ import annotations

import collections
import functools
import logging
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import grpc
from google.protobuf.message import DecodeError

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hook
from runtimeproxy.hookclient import HookClient, HookError
from runtimeproxy.skipping import ANY_NAMESPACE, DEFAULT_SKIP, DEFAULT_SKIP_NAMESPACES
from runtimeproxy.store import Deferred

log = logging.getLogger(__name__)

RUNTIME = "/runtime.v1.RuntimeService/"
REFUSED_SKIPS_REMEMBERED = 4096
"""Pods whose refused skip label was logged (each once); the oldest are forgotten first."""

_CPULIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


class Servers(Protocol):
    def server_for(self, stage: str) -> Any: ...


class PodMeta(Protocol):
    """CRI's and the hook API's ``PodSandboxMetadata`` alike."""

    @property
    def name(self) -> str: ...
    @property
    def uid(self) -> str: ...
    @property
    def namespace(self) -> str: ...


class Checkpoint(Protocol):
    def put_pod(self, pod_id: str, request: Any) -> None: ...
    def pod(self, pod_id: str) -> Any | None: ...
    def pod_view(self, pod_id: str) -> Any | None: ...
    def remove_pod(self, pod_id: str) -> None: ...
    def put_container(self, container_id: str, pod_id: str, request: Any) -> None: ...
    def put_container_deferred(self, container_id: str, pod_id: str, request: Deferred) -> None: ...
    def container(self, container_id: str) -> tuple[str, Any] | None: ...
    def remove_container(self, container_id: str) -> None: ...


Forward = Callable[[str, bytes, grpc.ServicerContext], bytes]
"""(full method, request bytes, the caller's context) -> response bytes, metadata and deadline preserved."""


def check_resources(resources: Any) -> str | None:
    """Why a hook's resources cannot go to the runtime, or None.  0 means "not set" for every number."""
    r = resources
    problems = []
    if r.cpu_period and not 1000 <= r.cpu_period <= 1_000_000:
        problems.append(f"cpu_period {r.cpu_period} outside 1000..1000000")
    if r.cpu_quota and r.cpu_quota != -1 and r.cpu_quota < 1000:
        problems.append(f"cpu_quota {r.cpu_quota}: must be -1 or >= 1000")
    if r.cpu_shares and not 2 <= r.cpu_shares <= 262144:
        problems.append(f"cpu_shares {r.cpu_shares} outside 2..262144")
    if r.memory_limit_in_bytes < 0:
        problems.append(f"memory_limit_in_bytes {r.memory_limit_in_bytes} is negative")
    if not -1000 <= r.oom_score_adj <= 1000:
        problems.append(f"oom_score_adj {r.oom_score_adj} outside -1000..1000")
    for name in ("cpuset_cpus", "cpuset_mems"):
        text = getattr(r, name)
        if text and not _valid_cpulist(text):
            problems.append(f"{name} {text!r} is not a CPU list")
    return "; ".join(problems) or None


def _valid_cpulist(text: str) -> bool:
    if not _CPULIST.fullmatch(text):
        return False
    for part in text.split(","):
        low, _, high = part.partition("-")
        if len(low) > 9 or len(high) > 9:  # no CPU id has ten digits; int() refuses over 4300 digits
            return False
        if high and int(high) < int(low):
            return False
    return True


def _convert(message: Any, into: Any) -> Any:
    """CRI and RuntimeHookService ``LinuxContainerResources`` share field numbers: bytes carry over exactly,
    fields one side does not know included."""
    into.ParseFromString(message.SerializeToString())
    return into


class Interceptor:
    def __init__(self, forward: Forward, servers: Servers, store: Checkpoint, hooks: HookClient,
                 skip: tuple[str, str] = DEFAULT_SKIP,
                 skip_namespaces: Iterable[str] = DEFAULT_SKIP_NAMESPACES) -> None:
        """``skip``: the (key, value) of the label or annotation that skips the hook servers;
        ``skip_namespaces``: the namespaces whose pods may use it (``*``: every namespace)."""
        self._forward = forward
        self._servers = servers
        self._store = store
        self._hooks = hooks
        self._skip = skip
        self.skip_namespaces = frozenset(skip_namespaces)
        self._skip_anywhere = ANY_NAMESPACE in self.skip_namespaces
        self._refused_lock = threading.Lock()
        self._refused: collections.OrderedDict[str, None] = collections.OrderedDict()

    def handlers(self) -> dict[str, Callable[[bytes, grpc.ServicerContext], bytes]]:
        return {RUNTIME + name: getattr(self, "_" + snake) for name, snake in (
            ("RunPodSandbox", "run_pod_sandbox"), ("StopPodSandbox", "stop_pod_sandbox"),
            ("RemovePodSandbox", "remove_pod_sandbox"), ("CreateContainer", "create_container"),
            ("StartContainer", "start_container"), ("StopContainer", "stop_container"),
            ("RemoveContainer", "remove_container"), ("UpdateContainerResources", "update_container_resources"),
        )}

    # --- shared -----------------------------------------------------------------------------------------

    def _skipped(self, labels: Mapping[str, str], annotations: Mapping[str, str], pod: PodMeta) -> bool:
        """Whether the pod's calls bypass the hook servers: it asks to, and its namespace may."""
        key, value = self._skip
        if labels.get(key) != value and annotations.get(key) != value:
            return False
        if self._skip_anywhere or pod.namespace in self.skip_namespaces:
            return True
        self._refuse_once(pod)
        return False

    def _refuse_once(self, pod: PodMeta) -> None:
        who = pod.uid or f"{pod.namespace}/{pod.name}"
        with self._refused_lock:
            if who in self._refused:
                self._refused.move_to_end(who)
                return
            self._refused[who] = None
            while len(self._refused) > REFUSED_SKIPS_REMEMBERED:
                self._refused.popitem(last=False)
        key, value = self._skip
        allowed = ",".join(sorted(self.skip_namespaces)) or "none"
        log.warning("pod carries the skip label, but its namespace may not skip the hook servers: its calls "
                    "are hooked", extra={"pod": f"{pod.namespace}/{pod.name}", "uid": pod.uid or "unknown",
                                         "label": f"{key}={value}", "namespace": pod.namespace,
                                         "skip_hookserver_namespaces": allowed})

    def _pre(self, stage: str, request: Any, context: grpc.ServicerContext, check: Callable[[Any], str | None]
             ) -> Any | None:
        """The hook server's answer for a Pre stage, or None to forward the original request."""
        server = self._servers.server_for(stage)
        if server is None:
            return None
        try:
            response = self._hooks.call(server.name, server.endpoint, stage + "Hook", request)
            problem = check(response)
            if problem is not None:
                raise HookError(server.name, stage + "Hook", f"invalid answer: {problem}",
                                grpc.StatusCode.INVALID_ARGUMENT)
        except HookError as exc:
            if server.failure_policy == "Fail":
                log.warning("hook failed, failing the CRI call", extra={"error": str(exc)})
                context.abort(exc.code, f"koord-runtime-proxy: {exc} (failure-policy Fail)")
            log.warning("hook failed, forwarding the original request", extra={"error": str(exc)})
            return None
        return response

    def _post(self, stage: str, request: Any) -> None:
        server = self._servers.server_for(stage)
        if server is None:
            return
        try:
            self._hooks.call(server.name, server.endpoint, stage + "Hook", request)
        except HookError as exc:
            log.warning("post hook failed", extra={"error": str(exc)})

    @staticmethod
    def _parse(message_type: Any, raw: bytes) -> Any | None:
        message = message_type()
        try:
            message.ParseFromString(raw)
        except DecodeError:
            return None  # the runtime answers it; the proxy only hooks what it can read
        return message

    def _container_request(self, container_id: str) -> tuple[str, Any] | None:
        """The checkpointed container with its pod's current labels/annotations; None when unknown or the
        pod is skipped."""
        found = self._store.container(container_id)
        if found is None:
            return None
        pod_id, request = found
        if self._skipped(request.pod_labels, request.pod_annotations, request.pod_meta):
            return None
        return pod_id, request

    # --- pod sandbox ------------------------------------------------------------------------------------

    def _run_pod_sandbox(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        method = RUNTIME + "RunPodSandbox"
        request = self._parse(cri.RunPodSandboxRequest, raw)
        if request is None or self._skipped(request.config.labels, request.config.annotations,
                                            request.config.metadata):
            return self._forward(method, raw, context)
        config = request.config
        meta = config.metadata
        hook_request = hook.PodSandboxHookRequest(
            pod_meta=hook.PodSandboxMetadata(name=meta.name, uid=meta.uid, namespace=meta.namespace,
                                             attempt=meta.attempt),
            runtime_handler=request.runtime_handler, labels=dict(config.labels),
            annotations=dict(config.annotations), cgroup_parent=config.linux.cgroup_parent)
        if config.linux.HasField("overhead"):
            _convert(config.linux.overhead, hook_request.overhead)
        if config.linux.HasField("resources"):
            _convert(config.linux.resources, hook_request.resources)
        response = self._pre("PreRunPodSandbox", hook_request, context,
                             lambda r: check_resources(r.resources) if r.HasField("resources") else None)
        if response is not None:
            if response.labels:
                config.labels.clear()
                config.labels.update(response.labels)
            if response.annotations:
                config.annotations.clear()
                config.annotations.update(response.annotations)
            if response.cgroup_parent:
                config.linux.cgroup_parent = response.cgroup_parent
            if response.HasField("resources"):
                _convert(response.resources, config.linux.resources)
            raw = request.SerializeToString()
        answer = self._forward(method, raw, context)
        reply = self._parse(cri.RunPodSandboxResponse, answer)
        if reply is not None:
            hook_request.labels.clear()
            hook_request.labels.update(config.labels)
            hook_request.annotations.clear()
            hook_request.annotations.update(config.annotations)
            hook_request.cgroup_parent = config.linux.cgroup_parent
            self._store.put_pod(reply.pod_sandbox_id, hook_request)
        return answer

    def _stop_pod_sandbox(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        answer = self._forward(RUNTIME + "StopPodSandbox", raw, context)
        request = self._parse(cri.StopPodSandboxRequest, raw)
        pod = self._store.pod(request.pod_sandbox_id) if request is not None else None
        if pod is not None and not self._skipped(pod.labels, pod.annotations, pod.pod_meta):
            self._post("PostStopPodSandbox", pod)
        return answer

    def _remove_pod_sandbox(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        answer = self._forward(RUNTIME + "RemovePodSandbox", raw, context)
        request = self._parse(cri.RemovePodSandboxRequest, raw)
        if request is not None:
            self._store.remove_pod(request.pod_sandbox_id)
        return answer

    # --- containers -------------------------------------------------------------------------------------

    def _create_container(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        method = RUNTIME + "CreateContainer"
        request = self._parse(cri.CreateContainerRequest, raw)
        if request is None:
            return self._forward(method, raw, context)
        stored_pod = self._store.pod_view(request.pod_sandbox_id)
        if stored_pod is not None:
            skipped = self._skipped(stored_pod.labels, stored_pod.annotations, stored_pod.pod_meta)
        else:
            sandbox = request.sandbox_config
            skipped = self._skipped(sandbox.labels, sandbox.annotations, sandbox.metadata)
        if skipped:
            return self._forward(method, raw, context)
        if self._servers.server_for("PreCreateContainer") is None:
            # The common case, kept lean: the bytes go as they came, and what the later stages need is
            # checkpointed as a recipe (built when a hook needs it or the checkpoint is written).
            answer = self._forward(method, raw, context)
            reply = self._parse(cri.CreateContainerResponse, answer)
            if reply is not None:
                build = functools.partial(self._container_hook_request, request, stored_pod, reply.container_id)
                self._store.put_container_deferred(reply.container_id, request.pod_sandbox_id, Deferred(build))
            return answer
        hook_request = self._container_hook_request(request, stored_pod, "")
        config = request.config
        response = self._pre("PreCreateContainer", hook_request, context, _check_container)
        if response is not None:
            self._merge_container(request, response)
            raw = request.SerializeToString()
        answer = self._forward(method, raw, context)
        reply = self._parse(cri.CreateContainerResponse, answer)
        if reply is not None:
            hook_request.container_mata.id = reply.container_id
            if response is not None:  # checkpoint what the runtime got; without an answer it is what was built
                hook_request.container_annotations.clear()
                hook_request.container_annotations.update(config.annotations)
                _convert(config.linux.resources, hook_request.container_resources)
                hook_request.container_envs.clear()
                hook_request.container_envs.update({kv.key: kv.value for kv in config.envs})
            self._store.put_container(reply.container_id, request.pod_sandbox_id, hook_request)
        return answer

    @classmethod
    def _container_hook_request(cls, request: Any, stored_pod: Any | None, container_id: str) -> Any:
        """The hook request of a CreateContainer ``request``; the pod as checkpointed, else as the request's
        sandbox config describes it.  Reads its arguments only (it may run later: :class:`Deferred`)."""
        pod = stored_pod if stored_pod is not None else cls._pod_from_config(request.sandbox_config)
        config = request.config
        hook_request = hook.ContainerResourceHookRequest(
            pod_meta=pod.pod_meta,
            container_mata=hook.ContainerMetadata(name=config.metadata.name, attempt=config.metadata.attempt,
                                                  id=container_id),
            container_annotations=dict(config.annotations), pod_annotations=dict(pod.annotations),
            pod_labels=dict(pod.labels), pod_cgroup_parent=pod.cgroup_parent,
            container_envs={kv.key: kv.value for kv in config.envs})
        if pod.HasField("resources"):
            hook_request.pod_resources.CopyFrom(pod.resources)
        _convert(config.linux.resources, hook_request.container_resources)
        return hook_request

    @staticmethod
    def _pod_from_config(config: Any) -> Any:
        meta = config.metadata
        pod = hook.PodSandboxHookRequest(
            pod_meta=hook.PodSandboxMetadata(name=meta.name, uid=meta.uid, namespace=meta.namespace,
                                             attempt=meta.attempt),
            labels=dict(config.labels), annotations=dict(config.annotations),
            cgroup_parent=config.linux.cgroup_parent)
        if config.linux.HasField("resources"):
            _convert(config.linux.resources, pod.resources)
        return pod

    @staticmethod
    def _merge_container(request: Any, response: Any) -> None:
        config = request.config
        if response.container_annotations:
            config.annotations.clear()
            config.annotations.update(response.container_annotations)
        if response.HasField("container_resources"):
            _convert(response.container_resources, config.linux.resources)
        if response.container_envs:
            wanted = dict(response.container_envs)
            for kv in config.envs:  # keep kubelet's order; change values in place, append new names
                if kv.key in wanted:
                    kv.value = wanted.pop(kv.key)
            for key in sorted(wanted):
                config.envs.add(key=key, value=wanted[key])
        if response.pod_cgroup_parent and request.HasField("sandbox_config"):
            request.sandbox_config.linux.cgroup_parent = response.pod_cgroup_parent

    def _start_container(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        method = RUNTIME + "StartContainer"
        request = self._parse(cri.StartContainerRequest, raw)
        found = self._container_request(request.container_id) if request is not None else None
        if found is None:
            return self._forward(method, raw, context)
        _, hook_request = found
        # StartContainer carries nothing to adjust: the Pre hook may act on the container or fail the start.
        self._pre("PreStartContainer", hook_request, context, _check_container)
        answer = self._forward(method, raw, context)
        self._post("PostStartContainer", hook_request)
        return answer

    def _stop_container(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        answer = self._forward(RUNTIME + "StopContainer", raw, context)
        request = self._parse(cri.StopContainerRequest, raw)
        found = self._container_request(request.container_id) if request is not None else None
        if found is not None:
            self._post("PostStopContainer", found[1])
        return answer

    def _remove_container(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        answer = self._forward(RUNTIME + "RemoveContainer", raw, context)
        request = self._parse(cri.RemoveContainerRequest, raw)
        if request is not None:
            self._store.remove_container(request.container_id)
        return answer

    def _update_container_resources(self, raw: bytes, context: grpc.ServicerContext) -> bytes:
        method = RUNTIME + "UpdateContainerResources"
        request = self._parse(cri.UpdateContainerResourcesRequest, raw)
        found = self._container_request(request.container_id) if request is not None else None
        if request is None or found is None:
            return self._forward(method, raw, context)
        pod_id, hook_request = found
        if request.HasField("linux"):
            _convert(request.linux, hook_request.container_resources)
        response = self._pre("PreUpdateContainerResources", hook_request, context, _check_container)
        if response is not None and response.HasField("container_resources"):
            _convert(response.container_resources, request.linux)
            raw = request.SerializeToString()
        answer = self._forward(method, raw, context)
        _convert(request.linux, hook_request.container_resources)
        self._store.put_container(request.container_id, pod_id, hook_request)
        return answer


def _check_container(response: Any) -> str | None:
    return check_resources(response.container_resources) if response.HasField("container_resources") else None
