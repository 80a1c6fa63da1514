"""client-go's Lease election: acquire, renew, take over after expiry, release."""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from koordlet.companion.kube.client import KubeApiError, call_json
from koordlet.errors import ConfigError

log = logging.getLogger(__name__)


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
