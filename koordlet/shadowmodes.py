"""Which strategies or runtime hooks run in shadow mode (:mod:`koordlet.qosmanager.shadow`,
:mod:`koordlet.runtimehooks.framework`): a default for all and per-name overrides, set from the configuration
and changed at run time through the debug API (``koordctl shadow``)."""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping
from typing import Any

from koordlet.errors import ConfigError

_PLURAL = {"strategy": "strategies"}


class ShadowModes:
    """Which of a kind's names (strategies, or runtime hooks) are in shadow mode: ``default`` for all,
    ``overrides`` per name (only the names in ``known``, when given).  Thread-safe: the debug API sets, the QoS
    manager and the hook runner read, the latter for every hook of every call: a read takes no lock."""

    def __init__(self, default: bool = False, overrides: Mapping[str, bool] | None = None,
                 known: Collection[str] = (), kind: str = "strategy") -> None:
        self._known = frozenset(known)
        self._kind = kind
        self._lock = threading.Lock()
        self._state: tuple[bool, Mapping[str, bool]] = (default, {})
        """(default, overrides), replaced whole by :meth:`set`, so a reader sees one or the other."""
        for name, shadow in (overrides or {}).items():
            self.set(name, shadow)

    def shadow(self, name: str) -> bool:
        """Whether ``name`` runs in shadow mode now."""
        default, overrides = self._state
        return overrides.get(name, default)

    def any(self) -> bool:
        """Whether anything may be in shadow mode (the hook runner's shortcut when nothing is)."""
        default, overrides = self._state
        return default or any(overrides.values())

    def set(self, name: str | None, shadow: bool | None) -> None:
        """Puts ``name`` (None: the default of all without an override of their own) in shadow mode (True) or
        active mode (False); None drops the name's override.  ConfigError for a name this koordlet does not
        have."""
        if name is not None and self._known and name not in self._known:
            raise ConfigError(f"shadow mode: unknown {self._kind} {name!r} (known: {', '.join(sorted(self._known))})")
        with self._lock:
            default, overrides = self._state
            changed = dict(overrides)
            if name is None:
                if shadow is None:
                    raise ConfigError("shadow mode: the default is on or off, it cannot be dropped")
                default = shadow
            elif shadow is None:
                changed.pop(name, None)
            else:
                changed[name] = shadow
            self._state = (default, changed)

    def to_json(self) -> dict[str, Any]:
        """``{"default": bool, "strategies" (or "hooks"): {name: bool}}`` (the overrides only)."""
        default, overrides = self._state
        return {"default": default, _PLURAL.get(self._kind, f"{self._kind}s"): dict(sorted(overrides.items()))}
