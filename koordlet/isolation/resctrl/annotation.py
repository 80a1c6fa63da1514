"""The pod annotation ``node.koordinator.sh/resctrl`` (Koordinator ``apis/extension/resctrl.go``)::

    {"llc": {"schemata": {"range": [20, 80]},
             "schemataPerCache": [{"cacheID": 0, "range": [20, 50]}]},
     "mb":  {"schemata": {"percent": 20},
             "schemataPerCache": [{"cacheID": 1, "percent": 40}]}}

``schemata`` applies to every cache id, ``schemataPerCache`` overrides single ids.  Keys match
case-insensitively, as Go's ``encoding/json`` matches them (Koordinator's own tests write ``cacheid`` and
``LLC``); unknown keys are ignored like Go does.  Unlike Go, a value of the wrong type, a range that is not
two percentages with start < end, a percent outside 1..100 (0 in ``schemata`` means unset, as in
Go) or a per-cache entry without ``cacheID`` is an
error naming the field, not a silent zero."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from koordlet.apis.gojson import loads
from koordlet.isolation.resctrl.host import HostInfo
from koordlet.isolation.resctrl.schemata import (
    PlanError,
    Schemata,
    cat_mask,
    check_percent,
    check_range,
    mb_value,
)

ANNOTATION_RESCTRL = "node.koordinator.sh/resctrl"


@dataclass(frozen=True)
class PodResctrl:
    """What one pod asks for; None / empty = the full cache or bandwidth."""

    llc_range: tuple[int, int] | None = None
    llc_per_cache: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    mb_percent: int | None = None
    mb_per_cache: Mapping[int, int] = field(default_factory=dict)


def _lower(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PlanError(f"{where}: must be an object, got {json.dumps(value)}")
    # Go's encoding/json prefers an exact match, then any case-insensitive one; the last duplicate wins.
    return {str(k).lower(): v for k, v in value.items()}


def _range(where: str, value: Any) -> tuple[int, int]:
    if not isinstance(value, list) or len(value) != 2:
        raise PlanError(f"{where}: must be [start, end] percentages, got {json.dumps(value)}")
    return check_range(where, value[0], value[1])


def _per_cache(where: str, value: Any, key: str) -> dict[int, Any]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise PlanError(f"{where}: must be a list, got {json.dumps(value)}")
    result: dict[int, Any] = {}
    for i, raw in enumerate(value):
        entry = _lower(f"{where}[{i}]", raw)
        cache_id = entry.get("cacheid")
        if isinstance(cache_id, bool) or not isinstance(cache_id, int) or cache_id < 0:
            raise PlanError(f"{where}[{i}].cacheID: must be a cache id >= 0, got {json.dumps(cache_id)}")
        if cache_id in result:
            raise PlanError(f"{where}[{i}].cacheID: cache {cache_id} given twice")
        if key == "range":
            result[cache_id] = _range(f"{where}[{i}].range", entry.get("range"))
        else:
            result[cache_id] = check_percent(f"{where}[{i}].percent", entry.get("percent"), low=1)
    return result


def parse(text: str) -> PodResctrl:
    """Raises :class:`PlanError` with the field path inside the annotation."""
    try:
        raw = loads(text)
    except ValueError as exc:
        raise PlanError(f"not JSON: {exc}") from None
    top = _lower("(top level)", raw)
    llc = _lower("llc", top["llc"]) if top.get("llc") is not None else {}
    mb = _lower("mb", top["mb"]) if top.get("mb") is not None else {}
    llc_schemata = _lower("llc.schemata", llc["schemata"]) if llc.get("schemata") is not None else {}
    mb_schemata = _lower("mb.schemata", mb["schemata"]) if mb.get("schemata") is not None else {}
    llc_range = _range("llc.schemata.range", llc_schemata["range"]) if llc_schemata.get("range") is not None else None
    percent = mb_schemata.get("percent")
    # 0 is Go's zero value: "not set" (Koordinator checks Percent != 0).
    mb_percent = check_percent("mb.schemata.percent", percent) or None if percent is not None else None
    return PodResctrl(llc_range, _per_cache("llc.schemataPerCache", llc.get("schematapercache"), "range"),
                      mb_percent, _per_cache("mb.schemataPerCache", mb.get("schematapercache"), "percent"))


def pod_schemata(spec: PodResctrl, host: HostInfo) -> Schemata:
    """Per cache id: the per-cache entry, else ``schemata``, else the full cache / bandwidth.  Raises
    :class:`PlanError` for a cache id the host does not have or a range too narrow for its ways."""
    cat: dict[str, dict[int, int]] = {}
    for info in host.cat:
        unknown = sorted(set(spec.llc_per_cache) - set(info.domains))
        if unknown:
            raise PlanError(f"llc.schemataPerCache: cacheID {unknown[0]} unknown (this host's {info.resource} cache "
                            f"ids: {', '.join(map(str, info.domains))})")
        base = cat_mask("llc.schemata.range", info, *spec.llc_range) if spec.llc_range else info.cbm_mask
        cat[info.resource] = {d: cat_mask(f"llc.schemataPerCache cacheID {d}", info, *spec.llc_per_cache[d])
                              if d in spec.llc_per_cache else base for d in info.domains}
    if spec.llc_per_cache and not host.cat:
        raise PlanError("llc.schemataPerCache: this host has no L3 cache allocation")
    if not host.mb_domains:
        if spec.mb_per_cache:
            raise PlanError("mb.schemataPerCache: this host has no memory bandwidth allocation")
        return Schemata(cat, {})
    unknown = sorted(set(spec.mb_per_cache) - set(host.mb_domains))
    if unknown:
        raise PlanError(f"mb.schemataPerCache: cacheID {unknown[0]} unknown (this host's MB domains: "
                        f"{', '.join(map(str, host.mb_domains))})")
    base_mb = mb_value("mb.schemata.percent", host, spec.mb_percent) if spec.mb_percent else host.mb_max
    mb = {d: mb_value(f"mb.schemataPerCache cacheID {d}", host, spec.mb_per_cache[d])
          if d in spec.mb_per_cache else base_mb for d in host.mb_domains}
    return Schemata(cat, mb)
