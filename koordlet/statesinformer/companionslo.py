"""NodeSLO in from the companion: :class:`CompanionNodeSLOSource`, a thread holding a ``WatchNodeSLO`` stream.

Each update is offered to the NodeSLO holder (a spec the holder rejects leaves the last good one in force), and
the last good spec is persisted so that a koordlet restarted while the companion is away starts from it rather
than from the defaults.  A broken stream is reopened with exponential backoff (1 s doubling to 30 s, with jitter
so a companion restart is not met by every node in the same second); HTTP/2 keepalive notices a dead companion
behind a silent connection.  The watch asks for the Kubernetes Node's facts too (``want_node``): each
``node_json`` is validated into a :class:`~.nodeinfo.KubeNodeInfo`, handed on (``StatesInformer.set_kube_node``)
and persisted with the spec; a companion that sends none (an older one, or one without Kubernetes) changes
nothing.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final, Protocol

import grpc

from koordlet.component import Worker
from koordlet.errors import ParseError
from koordlet.statesinformer.companion import (
    INITIAL_BACKOFF_SECONDS,
    MAX_BACKOFF_SECONDS,
    PERMANENT_CODES,
    CompanionClient,
    describe_error,
    status_code,
)
from koordlet.statesinformer.nodeinfo import KubeNodeInfo
from koordlet.system import atomicfile

log = logging.getLogger(__name__)

JITTER: Final = 0.2
"""Each backoff is scaled by a random factor in [1 - JITTER, 1 + JITTER]."""
STOP_GRACE_SECONDS: Final = 2.0
PERSIST_FORMAT: Final = 1
BAD_SUFFIX: Final = ".bad"
"""An unusable persisted NodeSLO is renamed to its path plus this, for inspection."""


class NodeSLOTarget(Protocol):
    """What the source needs of :class:`koordlet.statesinformer.nodeslo.NodeSLOHolder`."""

    def offer_spec(self, spec_json: Any, origin: str, where: str = "spec") -> bool:
        ...

    def reject(self, origin: str, reason: str) -> bool:
        ...


class CompanionNodeSLOSource:
    """Keeps the holder's NodeSLO in step with the companion over a ``WatchNodeSLO`` stream (a daemon
    component: :meth:`start`, :meth:`stop`).

    ``persist_path`` holds the last good spec (``{"format", "generation", "instance", "origin", "spec"}``, replaced
    atomically); :meth:`start` offers it first, so a koordlet restarted while the companion is away runs the
    spec it ran before instead of the defaults.  A dead or restarting companion changes nothing in the holder:
    the spec in force stays until the companion sends another one."""

    name: Final = "companion-nodeslo"

    def __init__(self, client: CompanionClient, holder: NodeSLOTarget, persist_path: str | os.PathLike[str], *,
                 initial_backoff_seconds: float = INITIAL_BACKOFF_SECONDS,
                 max_backoff_seconds: float = MAX_BACKOFF_SECONDS,
                 rng: Callable[[], float] = random.random,
                 on_policy: Callable[[bytes], None] | None = None,
                 on_reconnect: Callable[[], None] | None = None,
                 on_node: Callable[[KubeNodeInfo], None] | None = None) -> None:
        """``on_policy`` receives the NodeMetric collect policy each update carries (the report sink's
        ``offer_policy``), so the first report already runs on the companion's cadence.  ``on_reconnect`` is
        called when a watch is established again after the first (the NodeMetric runner's ``report_now``): a
        companion that restarted has no figures of this node until the next report, up to an interval away.
        ``on_node`` receives each valid Node the companion sends (``StatesInformer.set_kube_node``); without it
        the watch does not ask for the Node."""
        self._client = client
        self._on_policy = on_policy
        self._on_reconnect = on_reconnect
        self._on_node = on_node
        self._holder = holder
        self.persist_path = Path(persist_path)
        self._initial_backoff = initial_backoff_seconds
        self._max_backoff = max_backoff_seconds
        self._rng = rng
        self._lock = threading.Lock()
        self._worker = Worker("koordlet-companion-nodeslo")
        self._call: Any = None
        self.last_generation = 0
        """Generation of the newest update received (accepted or not): sent back when the watch reopens."""
        self.last_instance = ""
        """The companion instance ``last_generation`` came from (generations compare only within one)."""
        self.last_node_version = ""
        """``node_version`` of the newest valid Node received (sent back so an unchanged one is not re-sent)."""
        self.node: KubeNodeInfo | None = None
        """The newest valid Node (None: none received nor persisted)."""
        self._node_json: bytes = b""
        self.connected = False
        """True while a watch stream is established."""
        self.connects = 0
        """Streams the companion accepted so far."""
        self._persisted: tuple[int, str, Any, bytes] | None = None
        self._persist_failing = False

    # ------------------------------------------------------------------------------------- persistence

    def load_persisted(self) -> bool:
        """Offers the persisted spec to the holder; True when one was found and accepted.  A missing file is
        normal (first start).  One that cannot be read is logged and ignored; one whose content is unusable
        (garbage, truncated, another format) is logged, moved to ``<path>.bad`` for inspection and ignored.
        Either way the holder keeps the spec it has (the defaults at start) until the companion sends one."""
        path = str(self.persist_path)
        try:
            raw = self.persist_path.read_bytes()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.warning("persisted NodeSLO unreadable, ignored until the companion sends one",
                        extra={"path": path, "error": exc.strerror or str(exc)})
            return False
        try:
            document = _decode_persisted(raw)
        except ValueError as exc:
            bad = f"{path}{BAD_SUFFIX}"
            try:
                os.replace(path, bad)  # a rename needs no space on a full disk
            except OSError as move_error:
                bad = f"not moved: {move_error.strerror or move_error}"
            log.warning("persisted NodeSLO unusable, dropped until the companion sends one",
                        extra={"path": path, "error": str(exc), "bytes": len(raw), "moved_to": bad})
            return False
        origin = f"companion:{document.get('origin') or self._client.target} (persisted)"
        node_raw = self._load_persisted_node(document.get("node"))
        if not self._holder.offer_spec(document["spec"], origin):
            return False
        self.last_generation = document["generation"]
        instance = document.get("instance")
        self.last_instance = instance if isinstance(instance, str) else ""
        self._persisted = (document["generation"], self.last_instance, document["spec"], node_raw)
        log.info("NodeSLO loaded from the persisted copy", extra={"path": path, "generation": self.last_generation})
        return True

    def _load_persisted_node(self, node: Any) -> bytes:
        """Hands on the persisted Node (an optional key: copies written before it have none); its node_json."""
        if node is None:
            return b""
        try:
            info = KubeNodeInfo.from_json(node, "persisted node")
        except ParseError as exc:
            log.warning("persisted Node unusable, ignored until the companion sends one",
                        extra={"path": str(self.persist_path), "error": str(exc)})
            return b""
        self._set_node(info, str(node.get("version", "")) if isinstance(node, Mapping) else "")
        self._node_json = json.dumps(info.to_json(), sort_keys=True).encode()
        return self._node_json

    def _set_node(self, info: KubeNodeInfo, version: str) -> None:
        self.node = info
        self.last_node_version = version
        if self._on_node is not None:
            self._on_node(info)

    def _persist(self, update: Any, spec: Any) -> None:
        if self._persisted == (update.generation, update.instance, spec, self._node_json):
            return
        document: dict[str, Any] = {"format": PERSIST_FORMAT, "generation": update.generation,
                                    "instance": update.instance, "origin": update.origin, "spec": spec}
        if self.node is not None:
            document["node"] = {**self.node.to_json(), "version": self.last_node_version}
        data = json.dumps(document, sort_keys=True).encode() + b"\n"
        directory = self.persist_path.parent
        try:
            directory.mkdir(parents=True, exist_ok=True)
            # A failed directory fsync loses nothing a crash would not: the copy is only a fallback.
            atomicfile.write(self.persist_path, data, mode=0o600, on_dir_sync_error=lambda exc: None)
        except OSError as exc:
            if not self._persist_failing:
                log.warning("cannot persist NodeSLO; a restart without the companion would use the defaults",
                            extra={"path": str(self.persist_path), "error": exc.strerror or str(exc)})
            self._persist_failing = True
            return
        if self._persist_failing:
            log.info("NodeSLO persisted again", extra={"path": str(self.persist_path), "generation": update.generation})
        self._persist_failing = False
        self._persisted = (update.generation, update.instance, spec, self._node_json)

    # ------------------------------------------------------------------------------------- updates

    def apply(self, update: Any) -> bool:
        """Offers one ``NodeSLOUpdate`` to the holder and persists it when accepted; True when accepted."""
        self.last_generation = update.generation
        self.last_instance = update.instance
        origin = f"companion:{update.origin or self._client.target}"
        if self._on_policy is not None and update.collect_policy_json:
            self._on_policy(bytes(update.collect_policy_json))
        if update.node_json:
            self._apply_node(bytes(update.node_json), update.node_version)
        try:
            spec = json.loads(update.spec_json)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            return self._holder.reject(origin, f"spec_json: not valid JSON: {exc}")
        if not self._holder.offer_spec(spec, origin):
            return False
        self._persist(update, spec)
        return True

    def _apply_node(self, raw: bytes, version: str) -> None:
        """A Node from the companion: handed on when valid; an invalid one is logged and the last good stays."""
        if raw == self._node_json:
            self.last_node_version = version
            return
        try:
            info = KubeNodeInfo.from_json(raw)
        except ParseError as exc:
            log.error("companion sent an invalid Node; keeping the last good one", extra={"error": str(exc)})
            return
        self._node_json = raw
        for problem in info.problems():
            log.warning("companion sent a Node fact that cannot be used, treated as absent", extra={"error": problem})
        self._set_node(info, version)

    # ------------------------------------------------------------------------------------- component

    @property
    def running(self) -> bool:
        return self._worker.running

    def start(self, on_failure: Callable[[BaseException], None]) -> None:
        if self._worker.running:
            raise RuntimeError("CompanionNodeSLOSource already started")
        self.load_persisted()
        self._worker.start(lambda: self._loop(on_failure))

    def stop(self, timeout_seconds: float = STOP_GRACE_SECONDS) -> None:
        self._worker.stopping.set()
        with self._lock:
            call = self._call
        if call is not None:
            call.cancel()  # a watch in flight ends now rather than at the companion's next message
        if not self._worker.stop(timeout_seconds):
            log.warning("companion NodeSLO watch still busy at stop", extra={"timeout_seconds": timeout_seconds})

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before reopening after ``attempt`` consecutive failures (1-based)."""
        base = min(self._initial_backoff * 2.0 ** min(attempt - 1, 32), self._max_backoff)
        return base * (1 - JITTER + 2 * JITTER * self._rng())

    def _loop(self, on_failure: Callable[[BaseException], None]) -> None:
        try:
            attempt = 0
            while not self._worker.stopping.is_set():
                connected, error = self._watch_once()
                if self._worker.stopping.is_set():
                    break
                if connected:  # a stream that worked starts the backoff afresh
                    attempt = 0
                if error is None:  # the companion ended the stream cleanly (shutting down): reopen at once
                    continue
                attempt += 1
                code = status_code(error)
                delay = self._max_backoff if code in PERMANENT_CODES else self.backoff(attempt)
                if attempt == 1 or code in PERMANENT_CODES:
                    log.warning("NodeSLO watch on the companion failed; keeping the NodeSLO in force",
                                extra={"target": self._client.target, "error": describe_error(error),
                                       "retry_seconds": round(delay, 1)})
                else:
                    log.debug("NodeSLO watch still failing", extra={"attempt": attempt, "error": describe_error(error)})
                self._worker.stopping.wait(delay)
        except BaseException as exc:  # a bug in the loop: the daemon decides
            on_failure(exc)

    def _watch_once(self) -> tuple[bool, grpc.RpcError | None]:
        """One stream from open to end: whether the companion accepted it, and the error that ended it (None
        for a clean end)."""
        call = self._client.watch(self.last_generation, self.last_instance, self.last_node_version,
                                  want_node=self._on_node is not None)
        with self._lock:
            self._call = call
        if self._worker.stopping.is_set():  # stop() ran before the call was visible to it
            call.cancel()
        connected = False
        try:
            # Returns once the companion sent its headers (it does so on accepting the watch) or the call failed.
            call.initial_metadata()
            if not call.done():
                connected = True
                self.connects += 1
                self.connected = True
                log.info("watching NodeSLO on the companion", extra={"target": self._client.target,
                                                                     "generation": self.last_generation})
                if self.connects > 1 and self._on_reconnect is not None:
                    self._on_reconnect()
            for update in call:
                self.apply(update)
            return connected, None
        except grpc.RpcError as exc:
            return connected, exc
        finally:
            with self._lock:
                self._call = None
            self.connected = False


def _decode_persisted(raw: bytes) -> Mapping[str, Any]:
    """The persisted document in ``raw``; ValueError naming what is wrong with it."""
    try:
        document = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError is one too
        raise ValueError(f"not valid JSON: {exc}") from None
    if not isinstance(document, Mapping):
        raise ValueError(f"must hold a JSON object, got {type(document).__name__}")
    if document.get("format") != PERSIST_FORMAT:
        raise ValueError(f"format: expected {PERSIST_FORMAT}, got {document.get('format')!r}")
    if not isinstance(document.get("generation"), int):
        raise ValueError(f"generation: must be an integer, got {document.get('generation')!r}")
    if not isinstance(document.get("spec"), Mapping):
        raise ValueError(f"spec: must be an object, got {type(document.get('spec')).__name__}")
    return document


