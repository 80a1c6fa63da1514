"""Schemata lines from percentages (Koordinator ``CalculateCatL3MaskValue``, ``calculateIntel``,
``calculateAMDMba``).

* L3: the mask covers ways ``[ceil(ways*start/100), ceil(ways*end/100))`` of the ``ways`` bits of
  ``cbm_mask``: 11 ways, 0..30 % -> ways [0, 4) -> ``f``; 11 ways, 10..50 % -> [2, 6) -> ``3c``.
* MB on Intel: a percentage rounded up to the MBA step (``info/MB/bandwidth_gran``, 10 on every Intel part
  Koordinator knows): 35 -> 40.
* MB on AMD: absolute units of 1/8 GB/s; 100 % is 2048 (unlimited), otherwise ``160*percent/100``
  truncated, 160 being Koordinator's 25 GB/s * 8 * 0.8 measured on EPYC Milan.

A value that cannot be written (empty mask, fewer ways than ``min_cbm_bits``, a percentage outside 1..100)
raises :class:`PlanError` naming the field, before anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from koordlet.isolation.resctrl.host import CatInfo, HostInfo
from koordlet.resourceexecutor.resctrl import MB_RESOURCE

AMD_MAX_MB_UNITS = 160
"""Koordinator ``AMDCCDMaxMBGbps`` = 25 * 8 * 0.8: what 100 % of a CCD's bandwidth is taken to be."""


class PlanError(ValueError):
    """Bad input for a schemata; the message starts with the field that holds it."""


def check_percent(where: str, value: object, *, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{where}: must be an integer percentage, got {value!r}")
    if not low <= value <= 100:
        raise PlanError(f"{where}: must be {low}..100, got {value}")
    return value


def check_range(where: str, start: object, end: object) -> tuple[int, int]:
    """``where`` names the pair (``...resctrlQOS`` or ``...llc.schemata.range``)."""
    start = check_percent(f"{where} start", start)
    end = check_percent(f"{where} end", end)
    if start >= end:
        raise PlanError(f"{where}: start {start} must be below end {end}")
    return start, end


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def cat_mask(where: str, cat: CatInfo, start: int, end: int) -> int:
    """The cache mask for ``[start, end)`` percent of ``cat``'s ways."""
    low, high = _ceil_div(cat.ways * start, 100), _ceil_div(cat.ways * end, 100)
    mask = (1 << high) - (1 << low)
    if high - low < max(cat.min_cbm_bits, 1):
        raise PlanError(
            f"{where}: {start}..{end} % of {cat.ways} cache ways (info/{cat.resource}/cbm_mask {cat.cbm_mask:x}) "
            f"is ways [{low}, {high}), {high - low} ways; info/{cat.resource}/min_cbm_bits needs {cat.min_cbm_bits}"
        )
    return mask


def mb_value(where: str, host: HostInfo, percent: int) -> int:
    """The MB schemata value for ``percent`` (1..100) of the bandwidth on this host's vendor."""
    percent = check_percent(where, percent, low=1)
    if host.amd:
        value = host.mb_max if percent == 100 else AMD_MAX_MB_UNITS * percent // 100
    else:
        step = max(host.mb_granularity, 1)
        value = min(_ceil_div(percent, step) * step, host.mb_max)
    if value < host.mb_min:
        raise PlanError(f"{where}: {percent} % gives MB value {value}, below info/MB/min_bandwidth {host.mb_min}")
    return value


@dataclass(frozen=True)
class Schemata:
    """Values per resource and domain, rendered as the lines the executor takes."""

    cat: Mapping[str, Mapping[int, int]]
    mb: Mapping[int, int]

    def lines(self) -> list[str]:
        lines = [f"{res}:" + ";".join(f"{d}={m:x}" for d, m in sorted(masks.items()))
                 for res, masks in self.cat.items() if masks]
        if self.mb:
            lines.append(f"{MB_RESOURCE}:" + ";".join(f"{d}={v}" for d, v in sorted(self.mb.items())))
        return lines

    def numbers(self) -> dict[str, object]:
        return {"cat": {res: {str(d): f"{m:x}" for d, m in sorted(masks.items())} for res, masks in self.cat.items()},
                "mb": {str(d): v for d, v in sorted(self.mb.items())}}


def uniform(host: HostInfo, masks: Mapping[str, int], mb: int | None) -> Schemata:
    """The same mask on every cache id of each resource and the same MB value on every MB domain."""
    return Schemata({c.resource: dict.fromkeys(c.domains, masks[c.resource]) for c in host.cat},
                    dict.fromkeys(host.mb_domains, mb) if mb is not None else {})


def full(host: HostInfo) -> Schemata:
    """Every way and unlimited bandwidth: what the root group has, for resetting a group."""
    return uniform(host, {c.resource: c.cbm_mask for c in host.cat}, host.mb_max)
