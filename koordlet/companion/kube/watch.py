"""List+watch with resourceVersion (a reflector): a dropped watch resumes from the last version after a
bounded backoff, a 410 Expired relists, and the relist reports what changed meanwhile."""

from __future__ import annotations

import copy
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from koordlet.companion.kube.client import (
    NODEMETRIC_PLURAL,
    REQUEST_TIMEOUT_SECONDS,
    SLO_CONFIGMAP_NAME,
    SLO_CONFIGMAP_NAMESPACE,
    SLO_GROUP,
    SLO_VERSION,
    KubeApiError,
    call_json,
    resource_version_of,
)

# Unannotated in the client (strict mypy refuses untyped calls): used through Any.
_Watch: Any = watch.Watch


log = logging.getLogger(__name__)

PAGE_SIZE: Final = 500
"""Objects per list request, client-go's reflector default: a 150,000-pod list is 300 answers of bounded size
instead of one of gigabytes held at once."""


@dataclass(frozen=True)
class WatchEvent:
    """A change seen by a watcher: ``type`` is ADDED, MODIFIED or DELETED; ``old`` the previous object."""

    type: str
    object: dict[str, Any]
    old: dict[str, Any] | None = None


class _Backoff:
    """Exponential backoff with full jitter, bounded (client-go's reflector uses 800ms..30s)."""

    def __init__(self, initial_seconds: float, max_seconds: float) -> None:
        self.initial = initial_seconds
        self.max = max_seconds
        self.failures = 0

    def next_delay(self) -> float:
        ceiling = min(self.max, self.initial * (2 ** min(self.failures, 30)))
        self.failures += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.failures = 0


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class _Expired(Exception):
    """The watch's resourceVersion is too old: relist."""


class ResourceWatcher:
    """A reflector over one list call: list, then watch from the list's resourceVersion, in a thread.

    Keeps a cache of the objects and calls ``on_event`` (in the watcher thread) for every change. After a
    dropped or failed watch it waits a jittered backoff and resumes from the last resourceVersion it
    saw; when the server answers 410 Expired it relists at once and reports the differences between the
    old cache and the new list as events, so no change is lost.  A watch ends on the server after
    ``watch_timeout_seconds`` and is simply reopened.
    """

    def __init__(
        self,
        list_fn: Callable[..., Any],
        on_event: Callable[[WatchEvent], None] | None = None,
        *,
        name: str,
        list_kwargs: Mapping[str, Any] | None = None,
        watch_timeout_seconds: int = 300,
        request_timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
        backoff_initial_seconds: float = 0.8,
        backoff_max_seconds: float = 30.0,
        page_size: int = PAGE_SIZE,
        trim: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        """``page_size``: objects per list request (``limit``/``continue``); 0 lists all at once.  ``trim``: what
        of each object is handed on (the rest is dropped as soon as it is decoded).  ``keep``: what of a handed-on
        object stays cached (default: all of it), for a watcher whose callback keeps its own state: the cache then
        only has to tell a changed object from an unchanged one (``metadata.resourceVersion``, which ``keep`` must
        keep) and give DELETED events an object; :meth:`get`, :meth:`items` and an event's ``old`` are the kept
        form."""
        self.name = name
        self._page_size = page_size
        self._trim = trim
        self._keep = keep
        self._list_fn = list_fn
        self._list_kwargs = dict(list_kwargs or {})
        self._on_event = on_event
        self._watch_timeout = int(watch_timeout_seconds)
        self._request_timeout = request_timeout_seconds
        self._backoff = _Backoff(backoff_initial_seconds, backoff_max_seconds)
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str], dict[str, Any]] = {}
        self._resource_version: str | None = None
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._watch: Any = None  # the open kubernetes.watch.Watch
        self._thread: threading.Thread | None = None
        self.lists = 0
        """How many times the watcher listed (1 + relists after 410 or failed lists)."""
        self.watches = 0
        """How many watch streams it opened."""
        self.errors = 0
        """Failed lists or watches (each followed by a backoff)."""

    # ---------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError(f"watcher {self.name} already started")
        self._thread = threading.Thread(target=self._run, name=f"watch-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float = 5.0) -> None:
        """Ends the watch and joins the thread."""
        self._stop.set()
        thread = self._thread
        if thread is None:
            return
        deadline = time.monotonic() + timeout_seconds
        # Watch.stream() clears a stop() made before its response arrived, so keep asking until the
        # thread is gone: each call shuts the open stream's socket down.
        while thread.is_alive() and time.monotonic() < deadline:
            current = self._watch
            if current is not None:
                current.stop()
            thread.join(0.05)

    def wait_synced(self, timeout_seconds: float | None = None) -> bool:
        """Blocks until the first list completed and its objects went to ``on_event``; False on timeout."""
        return self._synced.wait(timeout_seconds)

    # ---------------------------------------------------------------------------------- reading

    @property
    def resource_version(self) -> str | None:
        with self._lock:
            return self._resource_version

    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None:
        """The cached object (a copy), or None."""
        with self._lock:
            obj = self._cache.get((namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def items(self) -> list[dict[str, Any]]:
        """Copies of every cached object."""
        with self._lock:
            return [copy.deepcopy(obj) for _, obj in sorted(self._cache.items())]

    # ---------------------------------------------------------------------------------- loop

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self._relist()
                self._watch_once()
                self._backoff.reset()
            except _Expired:
                log.info("watch expired, relisting", extra={"watcher": self.name})
                with self._lock:
                    self._resource_version = None
            except Exception as exc:  # a watcher thread must outlive any failure: classify, log, back off
                if self._stop.is_set():
                    break
                self.errors += 1
                delay = self._backoff.next_delay()
                level = logging.WARNING if _temporary(exc) else logging.ERROR
                log.log(level, "list/watch failed, retrying", exc_info=not _temporary(exc),
                        extra={"watcher": self.name, "error": repr(exc), "retry_in_seconds": round(delay, 3)})
                self._stop.wait(delay)

    def _pages(self) -> Iterator[dict[str, Any] | None]:
        """The list, page by page (client-go's pager).  A continue token that expired restarts it without pages,
        as client-go's reflector falls back to a full list; None is yielded first: drop what came so far."""
        token = ""
        limit = self._page_size
        while True:
            kwargs = dict(self._list_kwargs)
            if limit:
                kwargs["limit"] = limit
                if token:
                    kwargs["_continue"] = token
            try:
                body = call_json(self._list_fn, timeout=self._request_timeout, **kwargs)
            except KubeApiError as exc:
                if exc.status != 410 or not token:
                    raise
                log.info("list continue token expired, listing without pages", extra={"watcher": self.name})
                token, limit = "", 0
                yield None
                continue
            yield body
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not limit or not token:
                return

    def _relist(self) -> None:
        """Lists everything and hands each page's changes on as the page arrives (a big cluster's list is never
        held whole); what the list no longer has is DELETED at the end, when the list is known complete."""
        self.lists += 1
        listed: set[tuple[str, str]] = set()
        version = "0"
        for body in self._pages():
            if body is None:  # the pages so far were of an older snapshot: what they had may be gone since
                listed.clear()
                continue
            kind = str(body.get("kind") or "").removesuffix("List")
            events: list[WatchEvent] = []
            with self._lock:
                for item in body.get("items") or []:
                    # Built-in lists leave kind/apiVersion to the list; callbacks get complete objects.
                    item.setdefault("kind", kind)
                    item.setdefault("apiVersion", body.get("apiVersion"))
                    obj = self._trim(item) if self._trim is not None else item
                    key = _key(obj)
                    listed.add(key)
                    old = self._cache.get(key)
                    self._cache[key] = self._keep(obj) if self._keep is not None else obj
                    if old is None:
                        events.append(WatchEvent("ADDED", obj))
                    elif resource_version_of(old) != resource_version_of(obj):
                        events.append(WatchEvent("MODIFIED", obj, old))
            version = str((body.get("metadata") or {}).get("resourceVersion") or "0")
            del body
            for event in events:
                self._dispatch(event)
        with self._lock:
            gone = [(key, old) for key, old in self._cache.items() if key not in listed]
            for key, _ in gone:
                del self._cache[key]
            self._resource_version = version
        self._backoff.reset()
        for _, old in gone:
            self._dispatch(WatchEvent("DELETED", old))
        # Synced once the first list has reached the callback (client-go's HasSynced): a reader of what the
        # callback builds (the admission webhook's view) must not start from a half-delivered list.
        self._synced.set()

    def _watch_once(self) -> None:
        """One watch stream from the cached resourceVersion until the server ends it."""
        current = _Watch(return_type="object")  # raw dicts, no model validation
        self._watch = current
        self.watches += 1
        try:
            stream = current.stream(
                self._list_fn,
                resource_version=self.resource_version,
                timeout_seconds=self._watch_timeout,  # server side; also disables the client's own retries
                allow_watch_bookmarks=True,
                _request_timeout=(self._request_timeout, self._watch_timeout + self._request_timeout),
                **self._list_kwargs,
            )
            for raw in stream:
                if self._stop.is_set():
                    break
                self._apply(raw["type"], raw["raw_object"])
        except ApiException as exc:
            if exc.status == 410:
                raise _Expired from exc
            raise KubeApiError.from_api_exception(exc) from exc
        finally:
            self._watch = None

    def _apply(self, event_type: str, obj: dict[str, Any]) -> None:
        rv = resource_version_of(obj)
        if event_type == "BOOKMARK":
            with self._lock:
                self._resource_version = rv or self._resource_version
            return
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("unknown watch event ignored", extra={"watcher": self.name, "type": event_type})
            return
        if self._trim is not None:
            obj = self._trim(obj)
        key = _key(obj)
        with self._lock:
            old = self._cache.get(key)
            if event_type == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = self._keep(obj) if self._keep is not None else obj
            self._resource_version = rv or self._resource_version
        if event_type == "DELETED":
            self._dispatch(WatchEvent("DELETED", obj, old))
        elif old is None:
            self._dispatch(WatchEvent("ADDED", obj))
        elif resource_version_of(old) != rv:
            self._dispatch(WatchEvent("MODIFIED", obj, old))

    def _dispatch(self, event: WatchEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a bad callback must not stop the watch
            log.exception("watch callback failed", extra={"watcher": self.name, "type": event.type})


def object_identity(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A ``keep`` for a watcher whose callback keeps its own state: who the object is and its version."""
    metadata = obj.get("metadata") or {}
    kept = {k: metadata[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in metadata}
    return {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": kept}


def _temporary(exc: BaseException) -> bool:
    if isinstance(exc, KubeApiError):
        return exc.temporary
    return isinstance(exc, urllib3.exceptions.HTTPError | OSError | ValueError)


class NodeWatcher(ResourceWatcher):
    """Watches Nodes (all, those matching ``label_selector``, or the one ``node_name``)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        on_event: Callable[[WatchEvent], None] | None = None,
        *,
        node_name: str | None = None,
        label_selector: str | None = None,
        **options: Any,
    ) -> None:
        kwargs: dict[str, Any] = {}
        if node_name is not None:
            kwargs["field_selector"] = f"metadata.name={node_name}"
        if label_selector is not None:
            kwargs["label_selector"] = label_selector
        super().__init__(client.CoreV1Api(api_client).list_node, on_event, name="nodes", list_kwargs=kwargs,
                         **options)


class NodeMetricWatcher(ResourceWatcher):
    """Watches every NodeMetric (cluster scoped): each companion replica learns the metrics of the nodes that
    report to the other replicas from the objects those write."""

    def __init__(self, api_client: client.ApiClient, on_event: Callable[[WatchEvent], None] | None = None,
                 **options: Any) -> None:
        super().__init__(client.CustomObjectsApi(api_client).list_cluster_custom_object, on_event,
                         name=NODEMETRIC_PLURAL, list_kwargs={"group": SLO_GROUP, "version": SLO_VERSION,
                                                              "plural": NODEMETRIC_PLURAL}, **options)


class ConfigMapWatcher(ResourceWatcher):
    """Watches one ConfigMap (by default ``koordinator-system/slo-controller-config``).

    ``on_change`` gets the ConfigMap, or None when it does not exist; it is called after the first list
    even when the ConfigMap is absent, so the caller can fall back to defaults.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        on_change: Callable[[dict[str, Any] | None], None] | None = None,
        *,
        namespace: str = SLO_CONFIGMAP_NAMESPACE,
        name: str = SLO_CONFIGMAP_NAME,
        **options: Any,
    ) -> None:
        self.configmap_namespace = namespace
        self.configmap_name = name
        self._on_change = on_change
        self._announced_absent = False
        super().__init__(
            client.CoreV1Api(api_client).list_namespaced_config_map, self._changed, name=f"configmap-{name}",
            list_kwargs={"namespace": namespace, "field_selector": f"metadata.name={name}"}, **options,
        )

    @property
    def configmap(self) -> dict[str, Any] | None:
        return self.get(self.configmap_name, self.configmap_namespace)

    @property
    def data(self) -> dict[str, str] | None:
        """The ConfigMap's ``data`` (empty when it has none), or None when it does not exist."""
        cm = self.configmap
        return None if cm is None else dict(cm.get("data") or {})

    def _relist(self) -> None:
        super()._relist()
        if self.configmap is None and not self._announced_absent:
            self._announced_absent = True
            self._changed(None)

    def _changed(self, event: WatchEvent | None) -> None:
        absent = event is None or event.type == "DELETED"
        self._announced_absent = absent
        if self._on_change is not None:
            self._on_change(None if event is None or absent else event.object)
