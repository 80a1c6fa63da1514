"""The admission webhook's view of the cluster: ClusterColocationProfiles, Namespaces and PriorityClasses, each
kept by a list+watch (:class:`~koordlet.companion.kube.watch.ResourceWatcher`), so admitting a pod never waits
on kube-apiserver.

A namespace the watch has not delivered yet (created a moment before its first pod) is read from kube-apiserver
once, with a short timeout: upstream counts an unknown namespace as matching every namespaceSelector, which
would make the pods of a brand-new, unlabelled namespace batch pods.

Profiles are parsed as they arrive.  A profile that does not parse is logged with its name and the field at
fault and skipped; when an earlier version of it parsed, that version stays in force (an edit with a typo does
not silently switch a profile off), as Koordinator's webhook keeps serving what it had.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from kubernetes import client

from koordlet.companion.colocation.admission import PriorityClassInfo
from koordlet.companion.colocation.profile import Profile
from koordlet.companion.kube.client import KubeApiError, call_json
from koordlet.companion.kube.watch import ResourceWatcher, WatchEvent
from koordlet.errors import KoordletError

log = logging.getLogger(__name__)

PROFILE_GROUP = "config.koordinator.sh"
PROFILE_VERSION = "v1alpha1"
PROFILE_PLURAL = "clustercolocationprofiles"
NAMESPACE_READ_TIMEOUT_SECONDS = 1.0
"""A live read of a namespace missing from the cache: well inside the webhook's 3 s ``timeoutSeconds``."""


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class ClusterCache:
    """A :class:`~koordlet.companion.colocation.admission.ClusterView` fed by three watchers.

    Reads are dictionary look-ups of values replaced whole by the watcher threads, so they take no lock.
    """

    def __init__(self, api_client: client.ApiClient, **watch_options: Any) -> None:
        self._profiles: dict[str, Profile] = {}
        self._rejected: dict[str, str] = {}
        """profile name -> why its latest version was refused (while it stays refused)."""
        self._namespaces: dict[str, Mapping[str, str]] = {}
        self._priorities: dict[str, PriorityClassInfo] = {}
        self._lock = threading.Lock()  # writers only
        self._core = client.CoreV1Api(api_client)
        custom = client.CustomObjectsApi(api_client)
        self.watchers = [
            ResourceWatcher(custom.list_cluster_custom_object, self._on_profile, name=PROFILE_PLURAL,
                            list_kwargs={"group": PROFILE_GROUP, "version": PROFILE_VERSION,
                                         "plural": PROFILE_PLURAL}, **watch_options),
            ResourceWatcher(self._core.list_namespace, self._on_namespace, name="namespaces",
                            **watch_options),
            ResourceWatcher(client.SchedulingV1Api(api_client).list_priority_class, self._on_priority_class,
                            name="priorityclasses", **watch_options),
        ]

    # ---------------------------------------------------------------------------------- lifecycle

    def start(self) -> None:
        for watcher in self.watchers:
            watcher.start()

    def stop(self) -> None:
        for watcher in self.watchers:
            watcher.stop()

    def wait_synced(self, timeout_seconds: float | None = None) -> bool:
        """Blocks until every watcher has listed once (or the timeout; False then)."""
        return all(watcher.wait_synced(timeout_seconds) for watcher in self.watchers)

    def synced(self) -> bool:
        return all(watcher.wait_synced(0) for watcher in self.watchers)

    # ---------------------------------------------------------------------------------- ClusterView

    def profiles(self) -> Sequence[Profile]:
        return tuple(self._profiles.values())

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """Cached labels; a miss is read live (None: the namespace does not exist; KubeApiError: the read
        failed, which the mutation reports and, as upstream, counts as matching)."""
        found = self._namespaces.get(name)
        if found is not None or not name:
            return found
        try:
            obj = call_json(self._core.read_namespace, name, timeout=NAMESPACE_READ_TIMEOUT_SECONDS)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return MappingProxyType({str(k): str(v) for k, v in labels.items()})

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        return self._priorities.get(name)

    @property
    def rejected_profiles(self) -> Mapping[str, str]:
        """Profiles whose latest version does not parse: name -> the reason."""
        return dict(self._rejected)

    # ---------------------------------------------------------------------------------- events

    def _on_profile(self, event: WatchEvent) -> None:
        name = _name(event.object)
        with self._lock:
            if event.type == "DELETED":
                # Replaced, never changed in place: profiles() iterates without the lock.
                self._profiles = {k: v for k, v in self._profiles.items() if k != name}
                self._rejected.pop(name, None)
                return
            try:
                profile = Profile.from_object(event.object)
            except (KoordletError, ValueError, TypeError) as exc:
                kept = name in self._profiles
                self._rejected[name] = str(exc)
                log.warning("ClusterColocationProfile refused", extra={
                    "profile": name, "error": str(exc),
                    "in_force": "the last good version" if kept else "none (the profile is skipped)"})
                return
            self._profiles = {**self._profiles, name: profile}
            if self._rejected.pop(name, None) is not None:
                log.info("ClusterColocationProfile accepted again", extra={"profile": name})

    def _on_namespace(self, event: WatchEvent) -> None:
        name = _name(event.object)
        with self._lock:
            if event.type == "DELETED":
                self._namespaces.pop(name, None)
            else:
                labels = (event.object.get("metadata") or {}).get("labels") or {}
                self._namespaces[name] = MappingProxyType({str(k): str(v) for k, v in labels.items()})

    def _on_priority_class(self, event: WatchEvent) -> None:
        name = _name(event.object)
        with self._lock:
            if event.type == "DELETED":
                self._priorities.pop(name, None)
                return
            value = event.object.get("value")
            if not isinstance(value, int) or isinstance(value, bool):
                log.warning("PriorityClass without an integer value skipped", extra={"priority_class": name})
                self._priorities.pop(name, None)
                return
            policy = event.object.get("preemptionPolicy")
            self._priorities[name] = PriorityClassInfo(value, str(policy) if policy is not None else None)
