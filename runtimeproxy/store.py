"""Checkpoint of what the proxy knows about pods and containers (Koordinator pkg/runtimeproxy/store).

Post-stage hooks (PostStopPodSandbox, PostStopContainer) and the container stages after CreateContainer
only get an id from the kubelet; the hook servers need the full pod. The proxy therefore remembers the
hook request it built for each sandbox and container, and writes it to a JSON file after every change so
a restarted proxy still has it. What was created while the proxy was down, or a lost checkpoint, is
recovered by :meth:`Store.rebuild` from the backend runtime's own (verbose) status.

The file is written with a temp file and a rename: a crash leaves the old or the new version, never a
torn one. There is no fsync: surviving a proxy restart is the goal, and after a host crash the pods are
gone anyway.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.runtime.v1alpha1 import api_pb2 as hookapi

log = logging.getLogger(__name__)

M = TypeVar("M", bound=Message)

CHECKPOINT_VERSION = 1
REBUILD_CALL_TIMEOUT_SECONDS = 10.0
"""Deadline of each CRI call :meth:`Store.rebuild` makes to the backend."""
PERSIST_DELAY_SECONDS = 0.1
"""A burst of changes within this time is written once."""
WRITE_RETRY_SECONDS = 5.0
"""After a failed checkpoint write (a full disk), the next try comes this much later."""
BAD_SUFFIX = ".bad"
VERBOSE_INFO_KEY = "info"
"""containerd puts its verbose status under this key of ``info``: a JSON object whose ``config`` is the
CRI config the sandbox/container was created with (proto field names), beside ``runtimeHandler``,
``sandboxID``, ``pid``, ``runtimeSpec`` and more."""


class RuntimeService(Protocol):
    """The part of a ``runtime.v1.RuntimeService`` stub that :meth:`Store.rebuild` uses."""

    def ListPodSandbox(self, request: cri.ListPodSandboxRequest, *, timeout: float) -> Any: ...  # noqa: N802

    def PodSandboxStatus(self, request: cri.PodSandboxStatusRequest, *, timeout: float) -> Any: ...  # noqa: N802

    def ListContainers(self, request: cri.ListContainersRequest, *, timeout: float) -> Any: ...  # noqa: N802

    def ContainerStatus(self, request: cri.ContainerStatusRequest, *, timeout: float) -> Any: ...  # noqa: N802


@dataclass(frozen=True)
class RebuildReport:
    """Ids (sandbox and container ids alike: both are unique runtime ids) sorted, per outcome."""

    kept: tuple[str, ...]
    """In the store and still in the backend."""
    added: tuple[str, ...]
    """In the backend but not in the store: rebuilt from what the backend reports."""
    dropped: tuple[str, ...]
    """In the store but gone from the backend."""


class CheckpointError(ValueError):
    """The checkpoint file's content is unusable."""


def _copy(message: M) -> M:
    clone: M = type(message)()
    clone.CopyFrom(message)
    return clone


def _to_dict(message: Message) -> dict[str, Any]:
    result: dict[str, Any] = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return result


def _convert(source: Message, target: M) -> M:
    """Copy same-named fields between the CRI and RuntimeHookService twins (metadata, resources)."""
    json_format.ParseDict(_to_dict(source), target, ignore_unknown_fields=True)
    return target


class Deferred:
    """A container's hook request, built on first use: CreateContainer without a hook server stores the
    recipe, so the call pays neither for building the request nor for copying it.  The checkpoint writer
    builds it at the next write if the container still exists; one created and removed in between (a
    failing or short-lived pod restarted in a loop) is never built.  ``build`` must not depend on state
    that changes later: it may run on any thread, even twice at once (both give the same request)."""

    __slots__ = ("_build", "_request")

    def __init__(self, build: Callable[[], hookapi.ContainerResourceHookRequest]) -> None:
        self._build = build
        self._request: hookapi.ContainerResourceHookRequest | None = None

    def get(self) -> hookapi.ContainerResourceHookRequest:
        """The request (the same object every time once built: never mutate it)."""
        request = self._request
        if request is None:
            request = self._request = self._build()
        return request


ContainerRequest = hookapi.ContainerResourceHookRequest | Deferred


def _built(request: ContainerRequest) -> hookapi.ContainerResourceHookRequest:
    return request.get() if isinstance(request, Deferred) else request


class _Forms:
    """The checkpoint (JSON) form of stored messages by id, kept while the same message is stored: a write
    converts only what changed since the last one (``json_format`` costs ~0.1 ms per message)."""

    def __init__(self) -> None:
        self._forms: dict[str, tuple[object, dict[str, Any]]] = {}

    def of(self, entries: Mapping[str, Message]) -> dict[str, dict[str, Any]]:
        """Id -> JSON form of each entry, sorted by id; forms of ids no longer given are forgotten."""
        forms: dict[str, tuple[object, dict[str, Any]]] = {}
        for key in sorted(entries):
            message = entries[key]
            known = self._forms.get(key)
            forms[key] = known if known is not None and known[0] is message else (message, _to_dict(message))
        self._forms = forms
        return {key: form for key, (_, form) in forms.items()}


class Store:
    """Pod sandbox and container hook requests by runtime id; thread-safe; persisted to ``path`` if set."""

    def __init__(self, path: str | None, persist_delay_seconds: float = PERSIST_DELAY_SECONDS,
                 write_retry_seconds: float = WRITE_RETRY_SECONDS) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._pods: dict[str, hookapi.PodSandboxHookRequest] = {}
        self._containers: dict[str, tuple[str, ContainerRequest]] = {}
        self._pod_forms = _Forms()
        self._container_forms = _Forms()
        self._delay = persist_delay_seconds
        self._retry = write_retry_seconds
        self._dirty = threading.Event()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._write_lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self.failed_writes = 0
        """Checkpoint writes that failed since the last one that succeeded."""

    # -- persistence --

    def load(self) -> None:
        """Replace the in-memory state with the checkpoint file's.

        A missing file is an empty store. An unusable one (garbage, truncated, another version) is logged
        with the file and the reason, renamed to ``<path>.bad`` for inspection (a rename needs no space on a
        full disk), and the store starts empty; so does one that cannot be read at all.  :meth:`rebuild`
        recovers the rest from the backend.
        """
        if self.path is None:
            return
        with self._lock:
            self._pods, self._containers = {}, {}
            try:
                with open(self.path, "rb") as f:
                    raw = f.read()
            except FileNotFoundError:
                return
            except OSError as error:
                log.error("runtime proxy store: cannot read the checkpoint; starting empty, the backend's pods "
                          "and containers are rebuilt from it",
                          extra={"path": self.path, "error": str(error.strerror or error)})
                return
            try:
                self._pods, containers = _decode(raw)
                self._containers = dict(containers)
            except CheckpointError as error:
                bad = self.path + BAD_SUFFIX
                try:
                    os.replace(self.path, bad)
                    kept = f"moved to {bad}"
                except OSError as move_error:
                    kept = f"could not move it to {bad}: {move_error.strerror or move_error}"
                log.error("runtime proxy store: the checkpoint is unusable; dropped it and starting empty, the "
                          "backend's pods and containers are rebuilt from it",
                          extra={"path": self.path, "error": str(error), "bytes": len(raw), "kept": kept})

    def _persist(self) -> None:
        """Marks the checkpoint stale (called under the lock).  The file is written by a background writer
        at most every ``persist_delay_seconds``: a write of every entry inside each CRI call would cost
        time growing with the node's containers (measured: 8 ms per call with 300 containers).  What the
        last ~100 ms changed is lost if the process is killed; :meth:`rebuild` recovers it from the backend."""
        if self.path is None:
            return
        # Most calls find both set already (the writer waits out a burst): a set costs a lock and a notify.
        if not self._dirty.is_set():
            self._dirty.set()
        if not self._wake.is_set():
            self._wake.set()
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_loop, name="checkpoint-writer", daemon=True)
            self._writer.start()

    def _write_loop(self) -> None:
        while not self._closing.is_set():
            self._wake.wait()
            self._wake.clear()
            self._closing.wait(self._delay)  # coalesce a burst of changes into one write
            if not self.flush():
                # A full or failing disk: try again even if nothing changes, so the file catches up once the
                # disk recovers rather than at the next pod change.
                self._closing.wait(self._retry)
                self._wake.set()

    def flush(self) -> bool:
        """Writes the checkpoint now if anything changed since the last write; False when the write failed
        (logged once per streak of failures, and once when a write succeeds again)."""
        if self.path is None:
            return True
        with self._write_lock:
            if not self._dirty.is_set():
                return True
            with self._lock:
                self._dirty.clear()
                pods, containers = dict(self._pods), dict(self._containers)  # stored messages are never mutated
            try:
                self._write(pods, containers)
            except OSError as error:
                self._dirty.set()
                self.failed_writes += 1
                if self.failed_writes == 1:
                    log.error("runtime proxy store: cannot write the checkpoint; keeping the changes in memory "
                              "and retrying", extra={"path": self.path, "error": str(error.strerror or error),
                                                     "retry_seconds": self._retry})
                return False
            if self.failed_writes:
                log.info("runtime proxy store: checkpoint written again",
                         extra={"path": self.path, "failed_writes": self.failed_writes})
                self.failed_writes = 0
            return True

    def close(self) -> None:
        """Stops the writer after a last write."""
        self._closing.set()
        self._wake.set()
        if self._writer is not None:
            self._writer.join(5.0)
        self.flush()

    def _write(self, pods: dict[str, hookapi.PodSandboxHookRequest],
               containers: dict[str, tuple[str, ContainerRequest]]) -> None:
        """Called by one thread at a time (under the write lock)."""
        assert self.path is not None
        requests = self._container_forms.of({cid: _built(req) for cid, (_, req) in containers.items()})
        body = {
            "version": CHECKPOINT_VERSION,
            "pods": self._pod_forms.of(pods),
            "containers": {cid: {"pod_id": containers[cid][0], "request": form} for cid, form in requests.items()},
        }
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(self.path) + ".", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(body, f, indent=1, sort_keys=True)
                f.write("\n")
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    # -- pods --

    def put_pod(self, pod_id: str, req: hookapi.PodSandboxHookRequest) -> None:
        with self._lock:
            self._pods[pod_id] = _copy(req)
            self._persist()

    def pod(self, pod_id: str) -> hookapi.PodSandboxHookRequest | None:
        """A copy of the request stored for sandbox ``pod_id``."""
        with self._lock:
            req = self._pods.get(pod_id)
            return None if req is None else _copy(req)

    def pod_view(self, pod_id: str) -> hookapi.PodSandboxHookRequest | None:
        """The request stored for sandbox ``pod_id`` itself, not a copy (read it, never change it): stored
        messages are replaced, never changed, so it stays what it is while the caller holds it."""
        return self._pods.get(pod_id)  # one dict read: atomic, no lock needed

    def remove_pod(self, pod_id: str) -> None:
        """Forget the sandbox and every container stored under it."""
        with self._lock:
            gone = [cid for cid, (owner, _) in self._containers.items() if owner == pod_id]
            if self._pods.pop(pod_id, None) is None and not gone:
                return
            for cid in gone:
                del self._containers[cid]
            self._persist()

    def pods(self) -> dict[str, hookapi.PodSandboxHookRequest]:
        """Sandbox id -> a copy of its request."""
        with self._lock:
            return {pod_id: _copy(req) for pod_id, req in self._pods.items()}

    # -- containers --

    def put_container(self, container_id: str, pod_id: str, req: hookapi.ContainerResourceHookRequest) -> None:
        with self._lock:
            self._containers[container_id] = (pod_id, _copy(req))
            self._persist()

    def put_container_deferred(self, container_id: str, pod_id: str, request: Deferred) -> None:
        """Like :meth:`put_container`, the request built when first needed (see :class:`Deferred`)."""
        with self._lock:
            self._containers[container_id] = (pod_id, request)
            self._persist()

    def container(self, container_id: str) -> tuple[str, hookapi.ContainerResourceHookRequest] | None:
        """(sandbox id, a copy of the request) stored for ``container_id``."""
        with self._lock:
            entry = self._containers.get(container_id)
            return None if entry is None else (entry[0], _copy(_built(entry[1])))

    def remove_container(self, container_id: str) -> None:
        with self._lock:
            if self._containers.pop(container_id, None) is not None:
                self._persist()

    def containers(self) -> dict[str, tuple[str, hookapi.ContainerResourceHookRequest]]:
        """Container id -> (sandbox id, a copy of its request)."""
        with self._lock:
            return {cid: (pod_id, _copy(_built(req))) for cid, (pod_id, req) in self._containers.items()}

    # -- recovery --

    def rebuild(self, runtime: RuntimeService, timeout_seconds: float = REBUILD_CALL_TIMEOUT_SECONDS) -> RebuildReport:
        """Reconcile the store with the backend: drop what the backend no longer has, add what it has and
        the store lacks. Entries present in both are kept as stored (they hold what the hooks answered).

        The two list calls must succeed (their errors propagate); a failing status call or unreadable
        verbose info only makes the added entry poorer (built from the list alone).
        """
        # Taken before listing: the proxy serves while this runs, and an entry stored after the lists were
        # read is missing from them only because it is newer - it must not be dropped.
        with self._lock:
            known_pods = dict(self._pods)
            known_containers = set(self._containers)
        sandboxes = list(runtime.ListPodSandbox(cri.ListPodSandboxRequest(), timeout=timeout_seconds).items)
        listed = list(runtime.ListContainers(cri.ListContainersRequest(), timeout=timeout_seconds).containers)

        sandbox_ids = {sandbox.id for sandbox in sandboxes}
        new_pods = {
            sandbox.id: _pod_from_backend(runtime, sandbox, timeout_seconds)
            for sandbox in sandboxes
            if sandbox.id not in known_pods
        }
        pod_requests = {**{k: v for k, v in known_pods.items() if k in sandbox_ids}, **new_pods}
        new_containers: dict[str, tuple[str, hookapi.ContainerResourceHookRequest]] = {}
        for listed_container in listed:
            if listed_container.id in known_containers:
                continue
            entry = _container_from_backend(runtime, listed_container, pod_requests, timeout_seconds)
            if entry[0] in sandbox_ids:
                new_containers[listed_container.id] = entry
        container_ids = {c.id for c in listed}

        with self._lock:
            dropped = [pod_id for pod_id in self._pods if pod_id in known_pods and pod_id not in sandbox_ids]
            for pod_id in dropped:
                del self._pods[pod_id]
            for cid, (owner, _) in list(self._containers.items()):
                if cid in known_containers and (cid not in container_ids or owner not in sandbox_ids):
                    del self._containers[cid]
                    dropped.append(cid)
            added = []
            for pod_id, req in new_pods.items():
                if pod_id not in self._pods:
                    self._pods[pod_id] = req
                    added.append(pod_id)
            for cid, entry in new_containers.items():
                if cid not in self._containers:
                    self._containers[cid] = entry
                    added.append(cid)
            current = set(self._pods) | set(self._containers)
            kept = current - set(added)
            if dropped or added:
                self._persist()
        report = RebuildReport(tuple(sorted(kept)), tuple(sorted(added)), tuple(sorted(dropped)))
        log.info("runtime proxy store: rebuilt from the backend",
                 extra={"kept": len(report.kept), "added": len(report.added), "dropped": len(report.dropped)})
        return report


# -- checkpoint decoding ----------------------------------------------------------------------------


def _decode(
    raw: bytes,
) -> tuple[dict[str, hookapi.PodSandboxHookRequest], dict[str, tuple[str, hookapi.ContainerResourceHookRequest]]]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"must hold a JSON object, got {type(data).__name__}")
    if data.get("version") != CHECKPOINT_VERSION:
        raise CheckpointError(f"version: expected {CHECKPOINT_VERSION}, got {data.get('version')!r}")
    raw_pods, raw_containers = data.get("pods"), data.get("containers")
    if not isinstance(raw_pods, dict):
        raise CheckpointError(f"pods: must be an object, got {type(raw_pods).__name__}")
    if not isinstance(raw_containers, dict):
        raise CheckpointError(f"containers: must be an object, got {type(raw_containers).__name__}")
    pods = {
        pod_id: _parse(f"pods.{pod_id}", body, hookapi.PodSandboxHookRequest())
        for pod_id, body in raw_pods.items()
    }
    containers = {}
    for cid, entry in raw_containers.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("pod_id"), str):
            raise CheckpointError(f"containers.{cid}: must be an object with a string pod_id")
        req = _parse(f"containers.{cid}.request", entry.get("request"), hookapi.ContainerResourceHookRequest())
        containers[cid] = (entry["pod_id"], req)
    return pods, containers


def _parse(where: str, body: object, target: M) -> M:
    if not isinstance(body, dict):
        raise CheckpointError(f"{where}: must be an object, got {type(body).__name__}")
    try:
        json_format.ParseDict(body, target, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        raise CheckpointError(f"{where}: {error}") from None
    return target


# -- rebuilding from the backend ----------------------------------------------------------------------


def _verbose_info(response: Any, what: str) -> dict[str, Any]:
    """containerd's verbose status (``info["info"]``, a JSON object); empty if absent or unreadable."""
    text = response.info.get(VERBOSE_INFO_KEY) if response is not None else None
    if not text:
        return {}
    try:
        info = json.loads(text)
    except ValueError as error:
        log.warning("runtime proxy store: verbose info is not JSON; using the list only",
                    extra={"what": what, "error": str(error)})
        return {}
    return info if isinstance(info, dict) else {}


def _config(info: dict[str, Any], target: M, what: str) -> M | None:
    config = info.get("config")
    if not isinstance(config, dict):
        return None
    try:
        json_format.ParseDict(config, target, ignore_unknown_fields=True)
    except json_format.ParseError as error:
        log.warning("runtime proxy store: verbose config unreadable; using the list only",
                    extra={"what": what, "error": str(error)})
        return None
    return target


def _status(call: Any, request: Message, timeout_seconds: float, what: str) -> Any:
    try:
        return call(request, timeout=timeout_seconds)
    except grpc.RpcError as error:
        log.warning("runtime proxy store: status call failed; using the list only",
                    extra={"what": what, "error": str(error)})
        return None


def _pod_from_backend(
    runtime: RuntimeService, sandbox: cri.PodSandbox, timeout_seconds: float
) -> hookapi.PodSandboxHookRequest:
    what = f"sandbox {sandbox.id}"
    request = cri.PodSandboxStatusRequest(pod_sandbox_id=sandbox.id, verbose=True)
    info = _verbose_info(_status(runtime.PodSandboxStatus, request, timeout_seconds, what), what)
    config = _config(info, cri.PodSandboxConfig(), what)

    req = hookapi.PodSandboxHookRequest(
        pod_meta=_convert(sandbox.metadata, hookapi.PodSandboxMetadata()),
        runtime_handler=sandbox.runtime_handler or str(info.get("runtimeHandler") or ""),
    )
    if config is not None:
        req.labels.update(config.labels)
        req.annotations.update(config.annotations)
        req.cgroup_parent = config.linux.cgroup_parent
        if config.linux.HasField("overhead"):
            _convert(config.linux.overhead, req.overhead)
        if config.linux.HasField("resources"):
            _convert(config.linux.resources, req.resources)
    # The list is the runtime's current view; the config is what the sandbox was created with.
    req.labels.update(sandbox.labels)
    req.annotations.update(sandbox.annotations)
    return req


def _container_from_backend(
    runtime: RuntimeService,
    container: cri.Container,
    pods: dict[str, hookapi.PodSandboxHookRequest],
    timeout_seconds: float,
) -> tuple[str, hookapi.ContainerResourceHookRequest]:
    what = f"container {container.id}"
    request = cri.ContainerStatusRequest(container_id=container.id, verbose=True)
    response = _status(runtime.ContainerStatus, request, timeout_seconds, what)
    info = _verbose_info(response, what)
    config = _config(info, cri.ContainerConfig(), what)
    pod_id = container.pod_sandbox_id or str(info.get("sandboxID") or "")

    req = hookapi.ContainerResourceHookRequest(
        container_mata=hookapi.ContainerMetadata(
            name=container.metadata.name, attempt=container.metadata.attempt, id=container.id
        ),
    )
    if config is not None:
        req.container_annotations.update(config.annotations)
        req.container_envs.update({kv.key: kv.value for kv in config.envs})
    req.container_annotations.update(container.annotations)
    if config is not None and config.linux.HasField("resources"):
        _convert(config.linux.resources, req.container_resources)
    elif response is not None and response.status.resources.HasField("linux"):
        # Without the creation config, the runtime's current view of the limits is the best there is.
        _convert(response.status.resources.linux, req.container_resources)

    pod = pods.get(pod_id)
    if pod is not None:
        req.pod_meta.CopyFrom(pod.pod_meta)
        req.pod_labels.update(pod.labels)
        req.pod_annotations.update(pod.annotations)
        req.pod_cgroup_parent = pod.cgroup_parent
        if pod.HasField("resources"):
            req.pod_resources.CopyFrom(pod.resources)
    return pod_id, req
