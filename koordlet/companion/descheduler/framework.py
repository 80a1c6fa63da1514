"""What a descheduler plugin is given and must provide (upstream ``pkg/descheduler/framework/types.go``): a
balance plugin looks at one round's :class:`~koordlet.companion.descheduler.cluster.Snapshot` and evicts
through the :class:`~koordlet.companion.descheduler.evictor.Evictor`; the runner owns time and leadership."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kubernetes import client

from koordlet.apis import gojson
from koordlet.apis.gojson import member
from koordlet.companion.kube.client import MERGE_PATCH, call_json
from koordlet.errors import ConfigError

if TYPE_CHECKING:
    from koordlet.companion.descheduler.cluster import Snapshot
    from koordlet.companion.descheduler.evictor import Evictor


class BalancePlugin(Protocol):
    """Upstream ``BalancePlugin``: moves pods between nodes once per round."""

    name: str

    def balance(self, snap: Snapshot, evictor: Evictor) -> None:
        """Evicts what the plugin's policy wants moved; raising ends the round (the runner logs it)."""


PluginFactory = Callable[[Mapping[str, Any] | None, "Handle"], BalancePlugin]
"""``(pluginConfig args or None, handle) -> plugin``; raises ConfigError naming the bad argument."""
ArgsParser = Callable[[Any, str], object]
"""``(pluginConfig args or None, where) -> parsed args``; raises ConfigError naming ``where`` and the field."""


class Handle:
    """What plugins may reach beyond the snapshot (upstream ``framework.Handle``): the API for cordoning and
    the logger.  ``api_client`` None: no API (config validation, pure tests); cordoning then raises."""

    def __init__(self, api_client: client.ApiClient | None, *, logger: logging.Logger | None = None,
                 dry_run: bool = False, timeout_seconds: float = 10.0,
                 clock: Callable[[], float] = time.time, interval_seconds: float = 0.0) -> None:
        self.api_client = api_client
        self.interval_seconds = interval_seconds
        """``deschedulingInterval`` (0: a single round)."""
        self.clock = clock
        """Wall-clock seconds (anomaly detectors expire on it); tests pass a fake."""
        self.log = logger or logging.getLogger("koordlet.companion.descheduler")
        self.dry_run = dry_run
        self.timeout_seconds = timeout_seconds

    def cordon(self, node: str, unschedulable: bool = True) -> None:
        """Sets ``spec.unschedulable`` of ``node`` (a merge patch); in dry-run only logs.  Raises KubeApiError."""
        if self.dry_run:
            self.log.info("descheduler dry-run: would set node unschedulable",
                          extra={"node": node, "unschedulable": unschedulable})
            return
        if self.api_client is None:
            raise RuntimeError("descheduler handle has no API client")
        call_json(client.CoreV1Api(self.api_client).patch_node, node, {"spec": {"unschedulable": unschedulable}},
                  timeout=self.timeout_seconds, _content_type=MERGE_PATCH)
        self.log.info("descheduler: set node unschedulable", extra={"node": node, "unschedulable": unschedulable})


def _name_list(obj: Any, where: str) -> tuple[str, ...]:
    items = gojson.array(obj, where, ConfigError)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise ConfigError(f"{where}[{i}]: expected a namespace name, got {item!r}")
    return tuple(items)


@dataclass(frozen=True)
class Namespaces:
    """Upstream ``Namespaces`` (``evictableNamespaces``, DefaultEvictor ``namespaces``): an include list or an
    exclude list, never both."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    _include_set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)
    _exclude_set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_include_set", frozenset(self.include))
        object.__setattr__(self, "_exclude_set", frozenset(self.exclude))

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Namespaces:
        body = gojson.mapping(obj, where, ConfigError)
        include = _name_list(member(body, "include"), f"{where}.include")
        exclude = _name_list(member(body, "exclude"), f"{where}.exclude")
        # Upstream validation (ValidateLowLoadUtilizationArgs, validateNamespaces): only one of them.
        if include and exclude:
            raise ConfigError(f"{where}: only one of include and exclude may be set")
        return cls(include=include, exclude=exclude)

    def allows(self, namespace: str) -> bool:
        if self._include_set:
            return namespace in self._include_set
        return namespace not in self._exclude_set
