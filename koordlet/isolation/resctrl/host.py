"""What the host's resctrl offers, read once per round: the cache resources of the root ``schemata`` with
their ``info/<resource>/cbm_mask`` and ``min_cbm_bits``, the MB domains with ``info/MB`` limits, and the CPU
vendor (Koordinator ``util/system/resctrl.go``: ``GetVendorIDByCPUInfo``, ``GetCacheIds``).

Only reads: every write goes through :class:`~koordlet.resourceexecutor.resctrl.ResctrlExecutor`."""

from __future__ import annotations

import os
from dataclasses import dataclass

from koordlet.resourceexecutor.resctrl import CAT_RESOURCES, MB_MAX_AMD, MB_MAX_PERCENT, MB_RESOURCE, parse_schemata

INTEL_VENDOR_ID = "GenuineIntel"
AMD_VENDOR_ID = "AuthenticAMD"
DEFAULT_MB_GRANULARITY = 10
"""Intel's MBA step when ``info/MB/bandwidth_gran`` cannot be read (Koordinator hard-codes 10)."""


class HostError(Exception):
    """The resctrl tree is unreadable or says something impossible; the message names the file."""


@dataclass(frozen=True)
class CatInfo:
    """One cache resource of the root schemata (``L3``, or ``L3CODE``/``L3DATA`` with CDP on)."""

    resource: str
    cbm_mask: int
    """``info/<resource>/cbm_mask``: one bit per cache way, all set."""
    min_cbm_bits: int
    domains: tuple[int, ...]
    """Cache ids, as the root schemata lists them."""

    @property
    def ways(self) -> int:
        return self.cbm_mask.bit_length()


@dataclass(frozen=True)
class HostInfo:
    vendor: str
    cat: tuple[CatInfo, ...]
    mb_domains: tuple[int, ...]
    """Empty when the host has no memory bandwidth allocation."""
    mb_min: int = 0
    mb_granularity: int = DEFAULT_MB_GRANULARITY

    @property
    def amd(self) -> bool:
        return self.vendor == AMD_VENDOR_ID

    @property
    def mb_max(self) -> int:
        """The unlimited MB value: 100 (percent) on Intel, 2048 (absolute units) on AMD."""
        return MB_MAX_AMD if self.amd else MB_MAX_PERCENT

    def numbers(self) -> dict[str, object]:
        return {"vendor": self.vendor,
                "cat": {c.resource: {"cbm_mask": f"{c.cbm_mask:x}", "ways": c.ways, "min_cbm_bits": c.min_cbm_bits,
                                     "domains": list(c.domains)} for c in self.cat},
                "mb_domains": list(self.mb_domains), "mb_min": self.mb_min, "mb_granularity": self.mb_granularity,
                "mb_max": self.mb_max}


def read_vendor(cpuinfo: str) -> str:
    """The first ``vendor_id`` of ``/proc/cpuinfo``; "unknown" when there is none (treated as Intel, as
    Koordinator's class reconcile does)."""
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "vendor_id":
                    return value.strip()
    except OSError:
        pass
    return "unknown"


def read_host(root: str, cpuinfo: str) -> HostInfo:
    """Raises :class:`HostError` naming the file when the tree cannot be used."""
    schemata_path = os.path.join(root, "schemata")
    try:
        schemata = parse_schemata(_read(schemata_path))
    except OSError as exc:
        raise HostError(f"cannot read {schemata_path}: {exc.strerror or exc}") from None
    cat: list[CatInfo] = []
    for resource in CAT_RESOURCES:
        domains = schemata.get(resource)
        if not domains:
            continue
        info = os.path.join(root, "info", resource)
        mask = _read_int(os.path.join(info, "cbm_mask"), 16, required=True)
        assert mask is not None
        # The root's mask has every way set from bit 0 (Koordinator CalculateCatL3MaskValue checks cbm+1
        # is a power of two); the way arithmetic below depends on it.
        if mask <= 0 or mask & (mask + 1):
            raise HostError(f"{os.path.join(info, 'cbm_mask')}: {mask:x} is not a run of set bits from bit 0")
        min_bits = _read_int(os.path.join(info, "min_cbm_bits"), 10) or 1
        cat.append(CatInfo(resource, mask, min_bits, tuple(sorted(domains))))
    mb_domains = tuple(sorted(schemata.get(MB_RESOURCE, {})))
    info = os.path.join(root, "info", MB_RESOURCE)
    mb_min = _read_int(os.path.join(info, "min_bandwidth"), 10) or 0
    granularity = _read_int(os.path.join(info, "bandwidth_gran"), 10) or DEFAULT_MB_GRANULARITY
    if not cat and not mb_domains:
        raise HostError(f"{schemata_path} lists neither L3 nor MB: no cache or bandwidth allocation on this host")
    return HostInfo(read_vendor(cpuinfo), tuple(cat), mb_domains, mb_min, granularity)


def _read(path: str) -> str:
    with open(path, encoding="ascii", errors="replace") as f:
        return f.read()


def _read_int(path: str, base: int, *, required: bool = False) -> int | None:
    try:
        text = _read(path).strip()
    except OSError as exc:
        if required:
            raise HostError(f"cannot read {path}: {exc.strerror or exc}") from None
        return None
    try:
        return int(text, base)
    except ValueError:
        raise HostError(f"{path}: cannot parse {text!r} (base {base})") from None


def read_num_closids(root: str) -> int | None:
    """The control groups the host can hold, the root included: the smallest ``info/<resource>/num_closids``
    (each resource has its own count and a group needs a CLOSID in all of them; Documentation/arch/x86/
    resctrl.rst).  None when no resource says (the kernel then refuses a group as it runs out)."""
    info = os.path.join(root, "info")
    try:
        resources = sorted(os.listdir(info))
    except OSError:
        return None
    counts = []
    for resource in resources:
        try:
            value = _read_int(os.path.join(info, resource, "num_closids"), 10)
        except HostError:
            continue
        if value is not None and value > 0:
            counts.append(value)
    return min(counts) if counts else None
