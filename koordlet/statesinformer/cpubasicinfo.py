"""The node's CPU normalization facts: the ratio in force (:class:`NormalizationRatio`) and the CPU basic info
(Koordinator ``pkg/koordlet/util/cpuinfo.go``, ``getCPUBasicInfo``): the facts the
companion looks the CPU normalization ratio up by.

* model: the first ``model name`` (or ``Model Name``) line of ``/proc/cpuinfo``, "unknown" without one;
* hyper-threading: ``/sys/devices/system/cpu/smt/active`` is 1; a kernel without that file: CPU 0's
  ``topology/thread_siblings_list`` holds more than one CPU (what ``lscpu``'s "Thread(s) per core" upstream
  falls back to is computed from);
* turbo: ``/sys/devices/system/cpu/intel_pstate/no_turbo`` is 0; without the file (not intel_pstate) turbo
  counts as off, as upstream;
* vendor: the first ``vendor_id``; L3 CAT mask: resctrl's ``info/L3/cbm_mask`` when mounted.

A fact that cannot be read counts as absent/false (upstream logs and goes on): the ratio lookup then fails or
falls back to the configured default ratio on the companion, which says so.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping

from koordlet.apis.cpunormalization import ANNOTATION_CPU_NORMALIZATION_RATIO, CPUBasicInfo, parse_ratio
from koordlet.errors import ParseError
from koordlet.system.hostpaths import HostPaths

log = logging.getLogger(__name__)

UNKNOWN_MODEL = "unknown"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _cpuinfo_values(text: str) -> tuple[str, str]:
    """(model, vendor) from /proc/cpuinfo text."""
    model, vendor = "", ""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if not model and key in ("model name", "Model Name"):
            model = value.strip()
        elif not vendor and key == "vendor_id":
            vendor = value.strip()
        if model and vendor:
            break
    return model or UNKNOWN_MODEL, vendor


def _int_file(path: str) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _siblings(text: str) -> int:
    count = 0
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            count += int(high) - int(low) + 1 if high else 1
        except ValueError:
            return 0
    return count


def hyper_thread_enabled(paths: HostPaths) -> bool:
    active = _int_file(paths.sys("devices/system/cpu/smt/active"))
    if active is not None:
        return active == 1
    siblings = _read(paths.sys("devices/system/cpu/cpu0/topology/thread_siblings_list"))
    return siblings is not None and _siblings(siblings) > 1


def turbo_enabled(paths: HostPaths) -> bool:
    no_turbo = _int_file(paths.sys("devices/system/cpu/intel_pstate/no_turbo"))
    return no_turbo == 0


def read_cpu_basic_info(paths: HostPaths) -> CPUBasicInfo:
    """The node's :class:`CPUBasicInfo`; never raises (a fact it cannot read is left out)."""
    cpuinfo = _read(paths.proc("cpuinfo")) or ""
    model, vendor = _cpuinfo_values(cpuinfo)
    mask = _read(paths.resctrl("info", "L3", "cbm_mask")) if os.path.isdir(paths.resctrl("info")) else None
    return CPUBasicInfo(cpu_model=model, hyper_thread_enabled=hyper_thread_enabled(paths),
                        turbo_enabled=turbo_enabled(paths), cat_l3_cbm_mask=(mask or "").strip(), vendor_id=vendor)


class NormalizationRatio:
    """The node's CPU normalization ratio from the Node annotations the companion sends down (upstream's hooks
    parse ``node.koordinator.sh/cpu-normalization-ratio`` from the Node the koordlet watches).

    Called with no argument: the ratio, None while the node has none (1.0 once a ratio was in force and the
    annotation went away).  An annotation that is not a positive
    number is refused with one warning per bad value and the last good ratio stays in force (upstream's rule
    parse fails and keeps its rule)."""

    def __init__(self, annotations: Callable[[], Mapping[str, str] | None]) -> None:
        self._annotations = annotations
        self._lock = threading.Lock()
        self._good: float | None = None
        self._refused: str | None = None

    def __call__(self) -> float | None:
        annotations = self._annotations()
        with self._lock:
            try:
                ratio = parse_ratio(annotations)
            except ParseError as err:
                raw = (annotations or {}).get(ANNOTATION_CPU_NORMALIZATION_RATIO)
                if raw != self._refused:
                    self._refused = raw
                    log.warning("cpu normalization ratio refused, last good kept",
                                extra={"error": str(err), "kept": self._good})
                return self._good
            self._refused = None
            if ratio is None and self._good is not None:
                # The annotation went away after a ratio was in force: 1.0 makes the hooks write kubelet's
                # quotas back (without any ratio they set nothing and the scaled quotas would stay).
                ratio = 1.0
            self._good = ratio
            return ratio
