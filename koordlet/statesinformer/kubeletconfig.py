"""Reads kubelet's reservation from ``/configz`` once, retrying every interval until it succeeds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from koordlet.statesinformer.kubelet import KubeletClient, KubeletError
from koordlet.statesinformer.reservation import Reservation

log = logging.getLogger(__name__)


class KubeletConfigSync:
    """A daemon component; the reservation it reads goes to ``on_reservation``."""

    name = "kubelet-config"

    def __init__(self, client: KubeletClient, interval_seconds: float,
                 on_reservation: Callable[[Reservation], None]) -> None:
        self._client = client
        self._interval = interval_seconds
        self._on_reservation = on_reservation
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.attempts = 0
        self.reservation: Reservation | None = None

    def sync_once(self) -> bool:
        self.attempts += 1
        try:
            reservation = self._client.get_reservation()
        except KubeletError as exc:
            if self.attempts == 1:
                log.warning("cannot read kubelet's reservation yet, assuming none; retrying",
                            extra={"error": exc.reason})
            return False
        self.reservation = reservation
        self._on_reservation(reservation)
        log.info("kubelet reservation", extra={"cpu_milli": reservation.cpu_milli,
                                               "memory_bytes": reservation.memory_bytes})
        return True

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        def loop() -> None:
            try:
                while not self._stop.is_set() and not self.sync_once():
                    self._stop.wait(self._interval)
            except BaseException as exc:
                on_failure(exc)

        self._thread = threading.Thread(target=loop, name="koordlet-kubelet-config", daemon=True)
        self._thread.start()

    def stop(self, timeout_seconds: float) -> None:
        self._stop.set()
        self._client.abort()
        if self._thread is not None:
            self._thread.join(timeout_seconds)
