"""Reads kubelet's reservation and CPU manager policy from ``/configz``: every ``interval`` until the first
read succeeds, then every ``refresh_seconds``, so a kubelet restarted with another configuration is followed
without restarting koordlet (upstream re-reads kubelet's configuration on its node topology syncs)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from koordlet.component import Worker
from koordlet.statesinformer.kubelet import KubeletClient, KubeletError
from koordlet.statesinformer.reservation import Reservation

log = logging.getLogger(__name__)

REFRESH_SECONDS = 60.0


class KubeletConfigSync:
    """A daemon component; each reservation that differs from the last goes to ``on_reservation``.  A read
    that fails after a good one keeps the good one in force and is logged once per failure streak."""

    name = "kubelet-config"

    def __init__(self, client: KubeletClient, interval_seconds: float,
                 on_reservation: Callable[[Reservation], None], refresh_seconds: float = REFRESH_SECONDS) -> None:
        self._client = client
        self._interval = interval_seconds
        self._refresh = refresh_seconds
        self._on_reservation = on_reservation
        self._worker = Worker("koordlet-kubelet-config")
        self._failing = False
        self.attempts = 0
        self.reservation: Reservation | None = None

    def sync_once(self) -> bool:
        self.attempts += 1
        try:
            reservation = self._client.get_reservation()
        except KubeletError as exc:
            if not self._failing:
                if self.reservation is None:
                    log.warning("cannot read kubelet's reservation yet, assuming none; retrying",
                                extra={"error": exc.reason})
                else:
                    log.warning("cannot re-read kubelet's configuration; keeping the last one read",
                                extra={"error": exc.reason})
            self._failing = True
            return False
        self._failing = False
        if reservation != self.reservation:
            self.reservation = reservation
            self._on_reservation(reservation)
            log.info("kubelet reservation", extra={"cpu_milli": reservation.cpu_milli,
                                                   "memory_bytes": reservation.memory_bytes,
                                                   "cpu_manager_policy": reservation.cpu_manager_policy})
        return True

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        def sync() -> float:
            self.sync_once()
            return self._interval if self.reservation is None else self._refresh

        self._worker.loop(sync, on_failure)

    def stop(self, timeout_seconds: float) -> None:
        self._worker.stopping.set()
        self._client.abort()  # a read in flight ends now rather than at its timeout
        self._worker.stop(timeout_seconds)
