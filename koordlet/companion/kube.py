"""The companion's only door to kube-apiserver: thin adapters over the official ``kubernetes`` client.

Everything here goes through the real client (URL building, TLS, bearer tokens, watch decoding); no
REST is hand-rolled.  Objects travel as plain JSON dicts (``_preload_content=False`` and a watch that
returns raw objects), because the NodeSLO/NodeMetric custom resources have no generated models and the
generated models for built-in types reject objects that miss a field they think required.

- :func:`make_api_client` / :func:`make_in_cluster_client`: an ``ApiClient`` from a host, token file and
  CA (the token file is re-read when it changes, as kubelet rotates projected tokens);
- :class:`NodeWatcher`, :class:`ConfigMapWatcher`: list+watch with resourceVersion (a reflector): a
  dropped watch resumes from the last version after a bounded backoff, a 410 Expired relists, and the
  relist reports what changed meanwhile;
- :func:`patch_node_batch_resources`: the node status ``kubernetes.io/batch-{cpu,memory}`` merge patch;
- :class:`NodeSLOWriter`, :class:`NodeMetricWriter`: create-or-update of the cluster-scoped CRs, writing
  only when the content differs; every object they create names its Node as owner, so the garbage collector
  removes it with the node;
- :class:`NodeBatchResourceWriter`: the same batch patch with the writers' per-object backoff;
- :class:`WriteBackoff`: a write refused for good (a 4xx other than 401/408/409/429) backs off for that object
  only, so one bad object never holds up the writes of the others;
- :class:`LeaderElector`: client-go's Lease election (acquire, renew, take over after expiry, release);
- :func:`evict_pod`: the policy/v1 Eviction API.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import InClusterConfigLoader

from koordlet.errors import ConfigError, KoordletError

log = logging.getLogger(__name__)

# Unannotated in the client (strict mypy refuses untyped calls): used through Any.
_Watch: Any = watch.Watch
_InClusterConfigLoader: Any = InClusterConfigLoader

SLO_GROUP = "slo.koordinator.sh"
SLO_VERSION = "v1alpha1"
NODESLO_PLURAL = "nodeslos"
NODEMETRIC_PLURAL = "nodemetrics"
SLO_CONFIGMAP_NAMESPACE = "koordinator-system"
SLO_CONFIGMAP_NAME = "slo-controller-config"
BATCH_CPU = "kubernetes.io/batch-cpu"
"""Node extended resource: batch CPU in integer milli-cores (quantity ``"15000"`` is 15 cores)."""
BATCH_MEMORY = "kubernetes.io/batch-memory"
"""Node extended resource: batch memory in bytes."""
MERGE_PATCH = "application/merge-patch+json"
SERVICE_TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_CA_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
REQUEST_TIMEOUT_SECONDS = 10.0
"""Default bound on one non-watch request (connect and read together)."""

# Status codes worth retrying: the request may succeed later unchanged (0: no HTTP answer at all).
_TEMPORARY = frozenset({0, 408, 429, 500, 502, 503, 504})


class KubeApiError(KoordletError, ConnectionError):
    """kube-apiserver refused or failed a request; ``status`` 0 when no HTTP answer came (network, TLS, timeout)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def temporary(self) -> bool:
        """True when retrying the same request later may succeed (timeouts, throttling, server errors)."""
        return self.status in _TEMPORARY

    @property
    def permanent(self) -> bool:
        """True when the same request will be refused again until something else changes: a 4xx about the
        request or its object (400, 403, 404, 413, 422...).  Not 401 (the credential, re-read from its file
        at the next request), 408, 409 (a write in between: re-read and retry) or 429."""
        return 400 <= self.status < 500 and self.status not in (401, 408, 409, 429)

    @classmethod
    def from_api_exception(cls, exc: ApiException) -> KubeApiError:
        status = int(exc.status or 0)
        reason, message = str(exc.reason or ""), ""
        try:
            body = json.loads(exc.body) if exc.body else {}
        except ValueError:
            body = {}
        if isinstance(body, dict) and body.get("kind") == "Status":
            reason = str(body.get("reason") or reason)
            message = str(body.get("message") or "")
        return cls(status, reason, message or str(exc.body or "")[:200])


def call_json(fn: Callable[..., Any], *args: Any, timeout: float = REQUEST_TIMEOUT_SECONDS, **kwargs: Any) -> Any:
    """Calls a generated API method and returns the answer as decoded JSON; errors as :class:`KubeApiError`."""
    try:
        response = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException as exc:
        raise KubeApiError.from_api_exception(exc) from exc
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeApiError(0, type(exc).__name__, str(exc)) from exc
    try:
        return json.loads(response.data)
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise KubeApiError(0, type(exc).__name__, str(exc)) from exc
    except ValueError as exc:
        raise KubeApiError(0, "BadResponse", f"the answer is not JSON: {exc}") from exc
    finally:
        response.release_conn()


# ------------------------------------------------------------------------------------- clients


class _TokenFile:
    """``refresh_api_key_hook``: re-reads the bearer token when the file changes (kubelet rotates it)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._token = ""

    def read(self) -> str:
        with self._lock:
            try:
                stat = self._path.stat()
                stamp = (stat.st_mtime_ns, stat.st_ino)
                if stamp != self._stamp:
                    self._token = self._path.read_text().strip()
                    self._stamp = stamp
            except OSError as exc:
                if not self._token:
                    raise ConfigError(f"kube token_file: cannot read {self._path}: {exc.strerror}") from exc
                if self._stamp is not None:  # warn once per loss, not at every request
                    log.warning("kube token file unreadable, keeping the last token",
                                extra={"path": str(self._path), "error": exc.strerror})
                    self._stamp = None
            return self._token

    def __call__(self, configuration: client.Configuration) -> None:
        configuration.api_key["BearerToken"] = self.read()
        configuration.api_key_prefix["BearerToken"] = "Bearer"


def make_api_client(
    host: str,
    token_file: str | Path | None = None,
    ca_file: str | Path | None = None,
    *,
    insecure: bool = False,
) -> client.ApiClient:
    """An ``ApiClient`` for ``host`` (``https://10.0.0.1:6443``).

    ``token_file`` holds the bearer token (re-read when it changes); ``ca_file`` is the CA that signed
    the server's certificate (None: the system trust store); ``insecure`` skips TLS verification
    entirely - for a lab only.
    """
    if insecure and ca_file is not None:
        raise ConfigError("kube: give ca_file or insecure, not both")
    configuration = client.Configuration(host=host.rstrip("/"))
    if insecure:
        configuration.verify_ssl = False
    elif ca_file is not None:
        if not Path(ca_file).is_file():
            raise ConfigError(f"kube ca_file: {ca_file} is not a file")
        configuration.ssl_ca_cert = str(ca_file)
    if token_file is not None:
        hook = _TokenFile(Path(token_file))
        hook(configuration)  # fails now, not at the first request, when the file is missing
        hooked: Any = configuration  # the client annotates the hook attribute as None
        hooked.refresh_api_key_hook = hook
    return client.ApiClient(configuration)


def make_in_cluster_client(
    environ: Mapping[str, str] | None = None,
    token_file: str | Path = SERVICE_TOKEN_FILE,
    ca_file: str | Path = SERVICE_CA_FILE,
) -> client.ApiClient:
    """An ``ApiClient`` from the pod's service account (``KUBERNETES_SERVICE_HOST``/``_PORT``, token, CA)."""
    configuration = client.Configuration()
    try:
        _InClusterConfigLoader(
            token_filename=str(token_file), cert_filename=str(ca_file),
            environ=dict(os.environ if environ is None else environ),
        ).load_and_set(configuration)
    except ConfigException as exc:
        raise ConfigError(f"kube in-cluster config: {exc}") from exc
    return client.ApiClient(configuration)


# ------------------------------------------------------------------------------------- watchers


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


def _rv(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


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
    ) -> None:
        self.name = name
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
        """Blocks until the first list completed; False on timeout."""
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

    def _relist(self) -> None:
        self.lists += 1
        body = call_json(self._list_fn, timeout=self._request_timeout, **self._list_kwargs)
        kind = str(body.get("kind") or "").removesuffix("List")
        fresh: dict[tuple[str, str], dict[str, Any]] = {}
        for item in body.get("items") or []:
            # Built-in lists leave kind/apiVersion to the list; callbacks get complete objects.
            item.setdefault("kind", kind)
            item.setdefault("apiVersion", body.get("apiVersion"))
            fresh[_key(item)] = item
        events: list[WatchEvent] = []
        with self._lock:
            for key, obj in fresh.items():
                old = self._cache.get(key)
                if old is None:
                    events.append(WatchEvent("ADDED", obj))
                elif _rv(old) != _rv(obj):
                    events.append(WatchEvent("MODIFIED", obj, old))
            events.extend(WatchEvent("DELETED", old) for key, old in self._cache.items() if key not in fresh)
            self._cache = fresh
            self._resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "0")
        self._synced.set()
        self._backoff.reset()
        for event in events:
            self._dispatch(event)

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
        rv = _rv(obj)
        if event_type == "BOOKMARK":
            with self._lock:
                self._resource_version = rv or self._resource_version
            return
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning("unknown watch event ignored", extra={"watcher": self.name, "type": event_type})
            return
        key = _key(obj)
        with self._lock:
            old = self._cache.get(key)
            if event_type == "DELETED":
                self._cache.pop(key, None)
            else:
                self._cache[key] = obj
            self._resource_version = rv or self._resource_version
        if event_type == "DELETED":
            self._dispatch(WatchEvent("DELETED", obj, old))
        elif old is None:
            self._dispatch(WatchEvent("ADDED", obj))
        elif _rv(old) != rv:
            self._dispatch(WatchEvent("MODIFIED", obj, old))

    def _dispatch(self, event: WatchEvent) -> None:
        if self._on_event is None:
            return
        try:
            self._on_event(event)
        except Exception:  # a bad callback must not stop the watch
            log.exception("watch callback failed", extra={"watcher": self.name, "type": event.type})


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


# ------------------------------------------------------------------------------------- writes


class ApplyResult(Enum):
    """What a writer did."""

    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"
    DEFERRED = "deferred"
    """Not written: kube-apiserver refused this object for good a moment ago and it is backing off
    (:class:`WriteBackoff`); the write is tried again once the object's backoff ends."""


WRITE_BACKOFF_INITIAL_SECONDS = 2.0
"""First pause after an object's write was refused for good; doubled at each further refusal."""
WRITE_BACKOFF_MAX_SECONDS = 300.0
"""Cap of that pause: an object refused for good (a schema the CRD rejects, an admission policy, RBAC) is
tried again at most every five minutes, so a fix on the cluster side is picked up without a restart."""
WRITE_BACKOFF_MAX_OBJECTS = 65536
"""Backoff streaks kept at most; past that the oldest is forgotten (that object is simply tried again)."""


@dataclass
class _Streak:
    refusals: int
    until: float
    first_error: str


class WriteBackoff:
    """Per-object exponential backoff after permanent refusals (:attr:`KubeApiError.permanent`).

    The companion has one writer thread for every node: retrying an object that kube-apiserver refuses for good
    on every turn would hold up all the others.  Instead the refused object alone waits (``initial_seconds``,
    doubled per refusal, capped at ``max_seconds``) while the others are written; its first refusal is logged
    as a warning, the rest of the streak at debug, and the first success after it at info.  Temporary errors
    (no answer, 408, 409, 429, 5xx) and 401 (the credential, re-read from its file) are not counted: they stay
    with the caller's retry.  ``on_retry(key)`` (optional) is called from a timer thread when an object's
    pause ends, so the caller can queue it again even if nothing else changes it.
    """

    def __init__(
        self,
        what: str,
        *,
        initial_seconds: float = WRITE_BACKOFF_INITIAL_SECONDS,
        max_seconds: float = WRITE_BACKOFF_MAX_SECONDS,
        max_objects: int = WRITE_BACKOFF_MAX_OBJECTS,
        on_retry: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0 < initial_seconds <= max_seconds:
            raise ConfigError(f"write backoff: need 0 < initial_seconds <= max_seconds, got {initial_seconds} / "
                              f"{max_seconds}")
        self.what = what
        self.initial = initial_seconds
        self.max = max_seconds
        self._max_objects = max(1, max_objects)
        self._on_retry = on_retry
        self._clock = clock
        self._lock = threading.Lock()
        self._streaks: dict[str, _Streak] = {}
        self._timers: dict[str, threading.Timer] = {}
        self._closed = False

    def retry_in(self, key: str) -> float:
        """Seconds until ``key`` may be written again (0: now)."""
        with self._lock:
            streak = self._streaks.get(key)
            return 0.0 if streak is None else max(0.0, streak.until - self._clock())

    def backing_off(self) -> dict[str, float]:
        """Every object in a streak and the seconds until its next try (for logs, koordctl and tests)."""
        now = self._clock()
        with self._lock:
            return {key: max(0.0, streak.until - now) for key, streak in self._streaks.items()}

    def failed(self, key: str, err: KubeApiError) -> float:
        """Records a permanent refusal of ``key``; returns the pause before its next try."""
        with self._lock:
            streak = self._streaks.pop(key, None)  # re-inserted last: the dict stays in age order
            refusals = 1 if streak is None else streak.refusals + 1
            delay = min(self.max, self.initial * (1 << min(refusals - 1, 30)))
            self._streaks[key] = _Streak(refusals, self._clock() + delay,
                                         str(err) if streak is None else streak.first_error)
            while len(self._streaks) > self._max_objects:
                oldest = next(iter(self._streaks))
                del self._streaks[oldest]
                self._cancel(oldest)
            self._schedule(key, delay)
        if refusals == 1:
            log.warning("%s for %s refused, backing off this object only (retried after %.0f s, at most every "
                        "%.0f s; later refusals are logged at debug): %s", self.what, key, delay, self.max, err,
                        extra={"object": key, "status": err.status, "reason": err.reason})
        else:
            log.debug("%s for %s refused again (%d in a row), next try in %.0f s: %s", self.what, key, refusals,
                      delay, err)
        return delay

    def succeeded(self, key: str) -> None:
        """``key`` was written (or found up to date): its streak, if any, ends."""
        with self._lock:
            streak = self._streaks.pop(key, None)
            self._cancel(key)
        if streak is not None:
            log.info("%s for %s accepted again after %d refusal(s) (the first: %s)", self.what, key,
                     streak.refusals, streak.first_error, extra={"object": key})

    def forget(self, key: str) -> None:
        """Drops ``key``'s streak without a try (its node is gone)."""
        with self._lock:
            self._streaks.pop(key, None)
            self._cancel(key)

    def close(self) -> None:
        """Cancels the pending ``on_retry`` timers."""
        with self._lock:
            self._closed = True
            for key in list(self._timers):
                self._cancel(key)

    def guard(self, key: str, write: Callable[[], ApplyResult]) -> ApplyResult:
        """Runs ``write`` unless ``key`` is backing off: :attr:`ApplyResult.DEFERRED` while it is, and when
        ``write`` is refused for good; other errors propagate."""
        if self.retry_in(key) > 0:
            return ApplyResult.DEFERRED
        try:
            result = write()
        except KubeApiError as err:
            if not err.permanent:
                raise
            self.failed(key, err)
            return ApplyResult.DEFERRED
        self.succeeded(key)
        return result

    # The caller holds the lock.

    def _schedule(self, key: str, delay: float) -> None:
        self._cancel(key)
        if self._on_retry is None or self._closed:
            return
        timer = threading.Timer(delay, self._fire, args=(key,))
        timer.daemon = True
        timer.name = f"write-backoff-{key}"[:64]
        self._timers[key] = timer
        timer.start()

    def _cancel(self, key: str) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _fire(self, key: str) -> None:
        with self._lock:
            if self._timers.get(key) is not threading.current_thread():
                return  # cancelled or rescheduled meanwhile
            del self._timers[key]
        if self._on_retry is None:
            return
        try:
            self._on_retry(key)
        except Exception:  # a timer thread must not die with a traceback on stderr
            log.exception("write backoff retry callback failed", extra={"object": key})


# ------------------------------------------------------------------------------------- ownership


NodeLookup = Callable[[str], Mapping[str, Any] | None]
"""The Node object of a name (a watcher's cache, say), or None when there is no such node."""


def node_owner_reference(node: Mapping[str, Any]) -> dict[str, Any]:
    """The ownerReference naming ``node`` (a v1 Node object) as the owner of an object.

    The garbage collector deletes a dependent once none of its owners exists (matched by uid), so the NodeSLO
    and NodeMetric of a deleted node go with it and the companion needs no delete permission.  Neither
    ``controller`` nor ``blockOwnerDeletion`` is set: nothing adopts these objects by controller reference, and
    ``blockOwnerDeletion: true`` would need ``update`` on ``nodes/finalizers`` (the
    OwnerReferencesPermissionEnforcement admission plugin) only to make a foreground deletion of the Node wait
    for its NodeSLO, which buys nothing.
    """
    meta = node.get("metadata") or {}
    name, uid = meta.get("name"), meta.get("uid")
    if not name or not uid:
        raise ValueError(f"a Node owner needs metadata.name and metadata.uid, got {name!r} / {uid!r}")
    return {"apiVersion": "v1", "kind": "Node", "name": str(name), "uid": str(uid)}


def _owned_by_node(meta: Mapping[str, Any], node: str) -> bool:
    return any(isinstance(ref, Mapping) and ref.get("kind") == "Node" and ref.get("apiVersion") == "v1"
               and ref.get("name") == node and ref.get("uid") for ref in meta.get("ownerReferences") or [])


class _NodeOwners:
    """Finds the Node that owns a node's objects: from ``lookup`` when given, else ``GET /api/v1/nodes/<name>``
    (once per object created or adopted, not per write)."""

    def __init__(self, api_client: client.ApiClient, lookup: NodeLookup | None, timeout_seconds: float) -> None:
        self._core = client.CoreV1Api(api_client)
        self._lookup = lookup
        self._timeout = timeout_seconds

    def reference(self, node: str, what: str) -> dict[str, Any]:
        """The owner reference for ``node``; a 404 :class:`KubeApiError` (permanent) when the node does not
        exist: an object without an existing owner would never be collected."""
        obj: Mapping[str, Any] | None
        if self._lookup is not None:
            obj = self._lookup(node)
        else:
            try:
                obj = call_json(self._core.read_node, node, timeout=self._timeout)
            except KubeApiError as err:
                if err.status != 404:
                    raise
                obj = None
        if obj is None or not (obj.get("metadata") or {}).get("uid"):
            raise KubeApiError(404, "NotFound", f"node {node} does not exist: its {what} is not written (nothing "
                                                f"would garbage-collect it)")
        return node_owner_reference(obj)

    def adopted(self, node: str, what: str, meta: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """``meta``'s ownerReferences with the node added (an object made before owners were set, or by
        someone else); None when it already names the node."""
        if _owned_by_node(meta, node):
            return None
        ours = self.reference(node, what)
        others = [dict(ref) for ref in meta.get("ownerReferences") or []
                  if isinstance(ref, Mapping) and not (ref.get("kind") == "Node" and ref.get("name") == node)]
        return [*others, ours]


# ------------------------------------------------------------------------------------- node status


def patch_node_batch_resources(
    api_client: client.ApiClient,
    node: str,
    batch_cpu_milli: int | None,
    batch_memory_bytes: int | None,
    *,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> dict[str, Any]:
    """Sets ``kubernetes.io/batch-cpu``/``batch-memory`` in the node's status capacity and allocatable.

    A JSON merge patch on the status subresource; None removes the key (a merge-patch ``null``).
    Returns the patched Node.
    """
    body = _batch_patch(batch_cpu_milli, batch_memory_bytes)
    node_obj: dict[str, Any] = call_json(client.CoreV1Api(api_client).patch_node_status, node, body,
                                     timeout=timeout_seconds, _content_type=MERGE_PATCH)
    return node_obj


def _batch_patch(batch_cpu_milli: int | None, batch_memory_bytes: int | None) -> dict[str, Any]:
    values: dict[str, str | None] = {}
    for key, value in ((BATCH_CPU, batch_cpu_milli), (BATCH_MEMORY, batch_memory_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{key} must be a non-negative integer or None, got {value!r}")
        values[key] = None if value is None else str(value)
    return {"status": {"capacity": dict(values), "allocatable": dict(values)}}


class NodeBatchResourceWriter:
    """:func:`patch_node_batch_resources` with the per-node :class:`WriteBackoff`: a node whose patch is refused
    for good (gone: 404; rejected: 422) is skipped until its pause ends instead of holding up the writer."""

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 on_retry: Callable[[str], None] | None = None) -> None:
        self._api = api_client
        self._timeout = timeout_seconds
        self.backoff = WriteBackoff("node batch resources", on_retry=on_retry)

    def apply(self, node: str, batch_cpu_milli: int | None, batch_memory_bytes: int | None) -> ApplyResult:
        """UPDATED once the patch is in (kube-apiserver skips a no-op patch itself), DEFERRED while backing off."""
        _batch_patch(batch_cpu_milli, batch_memory_bytes)  # bad values raise ValueError before any backoff

        def write() -> ApplyResult:
            patch_node_batch_resources(self._api, node, batch_cpu_milli, batch_memory_bytes,
                                       timeout_seconds=self._timeout)
            return ApplyResult.UPDATED

        return self.backoff.guard(node, write)


# ------------------------------------------------------------------------------------- custom resources


class _ClusterCustomObjects:
    """Get/create/replace of one cluster-scoped custom resource, as JSON."""

    def __init__(self, api_client: client.ApiClient, plural: str, kind: str, timeout_seconds: float) -> None:
        self._api = client.CustomObjectsApi(api_client)
        self.plural = plural
        self.kind = kind
        self._timeout = timeout_seconds

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            obj: dict[str, Any] = call_json(self._api.get_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                        name, timeout=self._timeout)
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise
        return obj

    def list(self, **selectors: str) -> dict[str, Any]:
        """The list (``kubectl get <plural>``): ``items`` and ``metadata.resourceVersion``."""
        body: dict[str, Any] = call_json(self._api.list_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                     timeout=self._timeout, **selectors)
        return body

    def create(self, name: str, spec: Mapping[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": f"{SLO_GROUP}/{SLO_VERSION}", "kind": self.kind,
                "metadata": {"name": name, "ownerReferences": [dict(owner)]}, "spec": copy.deepcopy(dict(spec))}
        obj: dict[str, Any] = call_json(self._api.create_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                    body, timeout=self._timeout)
        return obj

    def replace(self, obj: dict[str, Any]) -> dict[str, Any]:
        """PUT with the object's resourceVersion (409 when someone wrote in between)."""
        new: dict[str, Any] = call_json(self._api.replace_cluster_custom_object, SLO_GROUP, SLO_VERSION, self.plural,
                                    obj["metadata"]["name"], obj, timeout=self._timeout)
        return new

    def replace_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        new: dict[str, Any] = call_json(self._api.replace_cluster_custom_object_status, SLO_GROUP, SLO_VERSION,
                                    self.plural, obj["metadata"]["name"], obj, timeout=self._timeout)
        return new


def _conflict(err: KubeApiError) -> bool:
    return err.status == 409


_ATTEMPTS = 3
"""Writes retried after a 409 (someone else wrote in between), each after a fresh read."""


class NodeSLOWriter:
    """Creates or updates ``NodeSLO/<node>`` with the given spec, writing only when it differs.

    The object is owned by its Node (:func:`node_owner_reference`); an existing object without that owner is
    adopted at the next apply.  A node whose write is refused for good backs off alone (:attr:`backoff`).
    ``node_lookup`` (a Node watcher's cache) saves the ``GET node`` made when an object is created or adopted.
    """

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 node_lookup: NodeLookup | None = None, on_retry: Callable[[str], None] | None = None) -> None:
        self._objects = _ClusterCustomObjects(api_client, NODESLO_PLURAL, "NodeSLO", timeout_seconds)
        self._owners = _NodeOwners(api_client, node_lookup, timeout_seconds)
        self.backoff = WriteBackoff("NodeSLO", on_retry=on_retry)
        # node -> (resourceVersion our last write produced, spec we wrote): a server that normalises the
        # spec (defaulting, pruning) must not make every apply a write.
        self._written: dict[str, tuple[str, dict[str, Any]]] = {}

    def get(self, node: str) -> dict[str, Any] | None:
        return self._objects.get(node)

    def list(self, **selectors: str) -> dict[str, Any]:
        return self._objects.list(**selectors)

    def apply(self, node: str, spec: Mapping[str, Any]) -> ApplyResult:
        wanted = copy.deepcopy(dict(spec))
        return self.backoff.guard(node, lambda: self._apply(node, wanted))

    def _apply(self, node: str, wanted: dict[str, Any]) -> ApplyResult:
        for _ in range(_ATTEMPTS):
            current = self._objects.get(node)
            try:
                if current is None:
                    created = self._objects.create(node, wanted, self._owners.reference(node, "NodeSLO"))
                    self._written[node] = (_rv(created), wanted)
                    return ApplyResult.CREATED
                owners = self._owners.adopted(node, "NodeSLO", current.get("metadata") or {})
                if owners is None and (
                        current.get("spec") == wanted or self._written.get(node) == (_rv(current), wanted)):
                    return ApplyResult.UNCHANGED
                body = copy.deepcopy(current)
                body["spec"] = wanted
                if owners is not None:
                    body["metadata"]["ownerReferences"] = owners
                updated = self._objects.replace(body)
                self._written[node] = (_rv(updated), wanted)
                return ApplyResult.UPDATED
            except KubeApiError as err:
                if not _conflict(err):
                    raise
        raise KubeApiError(409, "Conflict", f"NodeSLO {node} kept changing during {_ATTEMPTS} attempts")

    def forget(self, node: str) -> None:
        """The node is gone: drop what is remembered of it (the garbage collector removes the object)."""
        self._written.pop(node, None)
        self.backoff.forget(node)


class NodeMetricWriter:
    """Creates or updates ``NodeMetric/<node>``: ``spec.metricCollectPolicy`` on the object, ``status``
    through the status subresource; each written only when it differs.  Owned by its Node and backed off per
    node like :class:`NodeSLOWriter`."""

    def __init__(self, api_client: client.ApiClient, *, timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
                 node_lookup: NodeLookup | None = None, on_retry: Callable[[str], None] | None = None) -> None:
        self._objects = _ClusterCustomObjects(api_client, NODEMETRIC_PLURAL, "NodeMetric", timeout_seconds)
        self._owners = _NodeOwners(api_client, node_lookup, timeout_seconds)
        self.backoff = WriteBackoff("NodeMetric", on_retry=on_retry)

    def get(self, node: str) -> dict[str, Any] | None:
        return self._objects.get(node)

    def list(self, **selectors: str) -> dict[str, Any]:
        """``kubectl get nodemetric``: the list with ``items`` and ``metadata.resourceVersion``."""
        return self._objects.list(**selectors)

    def apply(
        self, node: str, status: Mapping[str, Any], collect_policy: Mapping[str, Any] | None = None
    ) -> ApplyResult:
        """Writes ``status`` and (unless None) ``spec.metricCollectPolicy``."""
        wanted_status = copy.deepcopy(dict(status))
        wanted_policy = copy.deepcopy(dict(collect_policy)) if collect_policy is not None else None
        return self.backoff.guard(node, lambda: self._apply(node, wanted_status, wanted_policy))

    def _apply(self, node: str, wanted_status: dict[str, Any], wanted_policy: dict[str, Any] | None) -> ApplyResult:
        created = changed = False
        for _ in range(_ATTEMPTS):
            current = self._objects.get(node)
            try:
                if current is None:
                    spec = {"metricCollectPolicy": wanted_policy} if wanted_policy is not None else {}
                    current = self._objects.create(node, spec, self._owners.reference(node, "NodeMetric"))
                    created = True
                owners = self._owners.adopted(node, "NodeMetric", current.get("metadata") or {})
                policy = (current.get("spec") or {}).get("metricCollectPolicy")
                if owners is not None or (wanted_policy is not None and policy != wanted_policy):
                    body = copy.deepcopy(current)
                    if wanted_policy is not None:
                        body.setdefault("spec", {})["metricCollectPolicy"] = wanted_policy
                    if owners is not None:
                        body["metadata"]["ownerReferences"] = owners
                    current = self._objects.replace(body)
                    changed = True
                if current.get("status") != wanted_status:
                    body = copy.deepcopy(current)
                    body["status"] = wanted_status
                    self._objects.replace_status(body)
                    changed = True
            except KubeApiError as err:
                if not _conflict(err):
                    raise
                continue
            if created:
                return ApplyResult.CREATED
            return ApplyResult.UPDATED if changed else ApplyResult.UNCHANGED
        raise KubeApiError(409, "Conflict", f"NodeMetric {node} kept changing during {_ATTEMPTS} attempts")

    def forget(self, node: str) -> None:
        """The node is gone (the garbage collector removes the object)."""
        self.backoff.forget(node)


# ------------------------------------------------------------------------------------- eviction


class EvictionResult(Enum):
    """The answer of the Eviction API."""

    EVICTED = "evicted"
    """201: the pod is being deleted with the given grace period."""
    BLOCKED_BY_PDB = "blocked_by_pdb"
    """429: a PodDisruptionBudget forbids it now (the API's priority-and-fairness throttling answers 429
    too; either way, try again later)."""
    GONE = "gone"
    """404: the pod no longer exists."""


def evict_pod(
    api_client: client.ApiClient,
    namespace: str,
    name: str,
    grace_seconds: int | None = None,
    *,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> EvictionResult:
    """Evicts a pod through ``POST .../pods/<name>/eviction`` (policy/v1); other failures raise
    :class:`KubeApiError`."""
    body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
    if grace_seconds is not None:
        body["deleteOptions"] = {"gracePeriodSeconds": int(grace_seconds)}
    eviction = client.V1Eviction.from_dict(body)
    try:
        call_json(client.CoreV1Api(api_client).create_namespaced_pod_eviction, name, namespace, eviction,
              timeout=timeout_seconds)
    except KubeApiError as err:
        if err.status == 429:
            log.info("eviction blocked", extra={"pod": f"{namespace}/{name}", "reason": err.message})
            return EvictionResult.BLOCKED_BY_PDB
        if err.status == 404:
            return EvictionResult.GONE
        raise
    return EvictionResult.EVICTED


# ------------------------------------------------------------------------------------- leader election


def _micro_time(moment: datetime) -> str:
    """metav1.MicroTime as the API writes it (RFC 3339, microseconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Leader election over a coordination.k8s.io/v1 Lease, with client-go's semantics.

    A candidate takes the Lease when it is absent, released (no holder), or its holder has not renewed it
    for ``leaseDurationSeconds`` as measured on *this* process's clock from the moment it last saw the
    record change (never by comparing the record's timestamps to the local wall clock, so clock skew
    between nodes does not matter).  The leader renews every ``retry_period``; when no renewal succeeded
    for ``renew_deadline`` it stops leading - before any other candidate can take over, because
    ``renew_deadline < lease_duration``.  Writes carry the Lease's resourceVersion, so two candidates
    never both win the same record.  ``is_leader`` is False as soon as the last successful renewal
    (counted from when its request was sent) is older than ``renew_deadline``, even between loop turns.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        lease_name: str,
        namespace: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        request_timeout_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not identity:
            raise ConfigError("leader election: identity must not be empty")
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ConfigError(
                "leader election: need 0 < retry_period < renew_deadline < lease_duration, got "
                f"{retry_period} / {renew_deadline} / {lease_duration}"
            )
        self._leases = client.CoordinationV1Api(api_client)
        self.lease_name = lease_name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._timeout = request_timeout_seconds if request_timeout_seconds is not None else renew_deadline / 2
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._leading = False
        self._last_renew = -math.inf
        self._observed_record: tuple[Any, ...] | None = None
        self._observed_time = -math.inf
        self._stop = threading.Event()
        self._release_on_stop = True
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("leader elector already started")
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.lease_name}", daemon=True)
        self._thread.start()

    def stop(self, *, release: bool = True, timeout_seconds: float = 10.0) -> None:
        """Stops campaigning; a leader releases the Lease (unless ``release`` is False) and stops leading."""
        self._release_on_stop = release
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_seconds)

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return self._leading and self._clock() - self._last_renew < self.renew_deadline

    # ---------------------------------------------------------------------------------- loop

    def _run(self) -> None:
        while not self._stop.is_set():
            started = self._clock()
            outcome = self._try_acquire_or_renew()
            if outcome == "acquired":
                with self._lock:
                    self._last_renew = started
                    was_leading, self._leading = self._leading, True
                if not was_leading:
                    log.info("started leading", extra={"lease": self.lease_name, "identity": self.identity})
                    self._callback(self._on_started)
            else:
                with self._lock:
                    lost = self._leading and (
                        outcome == "held" or self._clock() - self._last_renew >= self.renew_deadline
                    )
                    if lost:
                        self._leading = False
                if lost:
                    log.warning("stopped leading", extra={"lease": self.lease_name, "identity": self.identity,
                                                          "why": outcome})
                    self._callback(self._on_stopped)
            with self._lock:
                leading = self._leading
            # client-go jitters the candidates' retries (factor 1.2) so they do not stampede.
            delay = self.retry_period if leading else self.retry_period * (1 + random.uniform(0, 1.2))
            self._stop.wait(delay)
        with self._lock:
            was_leading, self._leading = self._leading, False
        if was_leading:
            if self._release_on_stop:
                self._release()
            self._callback(self._on_stopped)

    def _callback(self, fn: Callable[[], None] | None) -> None:
        if fn is None:
            return
        try:
            fn()
        except Exception:
            log.exception("leader election callback failed", extra={"lease": self.lease_name})

    def _get_lease(self) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = call_json(self._leases.read_namespaced_lease, self.lease_name, self.namespace,
                                          timeout=self._timeout)
        except KubeApiError as err:
            if err.status == 404:
                return None
            raise
        return lease

    def _observe(self, spec: Mapping[str, Any]) -> None:
        record = (spec.get("holderIdentity"), spec.get("leaseDurationSeconds"), spec.get("acquireTime"),
                  spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed_record:
            self._observed_record = record
            self._observed_time = self._clock()

    def _try_acquire_or_renew(self) -> str:
        """One attempt: ``acquired`` (we hold the lease now), ``held`` (someone else validly holds it) or
        ``failed`` (the API failed or another candidate won the race)."""
        now = self._wall_clock()
        duration = max(1, math.ceil(self.lease_duration))
        try:
            lease = self._get_lease()
            if lease is None:
                self._create_lease(now, duration)
                return "acquired"
            spec = dict(lease.get("spec") or {})
            self._observe(spec)
            holder = spec.get("holderIdentity") or ""
            held_for = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and holder != self.identity and self._observed_time + held_for > self._clock():
                return "held"
            new_spec = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": spec.get("acquireTime") if holder == self.identity else _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1),
            }
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": lease["metadata"],
                    "spec": new_spec}
            updated = call_json(self._leases.replace_namespaced_lease, self.lease_name, self.namespace,
                            client.V1Lease.from_dict(body), timeout=self._timeout)
            self._observe(updated.get("spec") or {})
            return "acquired"
        except KubeApiError as err:
            level = logging.DEBUG if err.status == 409 else logging.WARNING
            log.log(level, "lease acquire/renew failed", extra={"lease": self.lease_name, "error": str(err)})
            return "failed"

    def _create_lease(self, now: datetime, duration: int) -> None:
        spec = {"holderIdentity": self.identity, "leaseDurationSeconds": duration, "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now), "leaseTransitions": 0}
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.lease_name, "namespace": self.namespace}, "spec": spec}
        created = call_json(self._leases.create_namespaced_lease, self.namespace, client.V1Lease.from_dict(body),
                        timeout=self._timeout)
        self._observe(created.get("spec") or {})

    def _release(self) -> None:
        """Hands the Lease back (no holder, 1s duration), as client-go's ReleaseOnCancel does."""
        try:
            lease = self._get_lease()
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            now = _micro_time(self._wall_clock())
            spec = {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now,
                    "leaseTransitions": int((lease.get("spec") or {}).get("leaseTransitions") or 0)}
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": lease["metadata"],
                    "spec": spec}
            call_json(self._leases.replace_namespaced_lease, self.lease_name, self.namespace,
                  client.V1Lease.from_dict(body), timeout=self._timeout)
        except KubeApiError as err:
            log.warning("lease release failed", extra={"lease": self.lease_name, "error": str(err)})
