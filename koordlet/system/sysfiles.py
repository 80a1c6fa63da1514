"""Node-wide kernel knobs under ``/proc/sys`` and ``/sys`` that koordlet may write (Koordinator
``pkg/koordlet/util/system/system_resource.go``): one typed descriptor per file, so writers and validators
name a descriptor, never a path string.

The bounds are Koordinator's validators, not the kernel's: ``min_free_kbytes`` between 10 MiB and 10 GiB
(in KiB) keeps a mistyped factor from starving or flooding the page allocator's reserve, and
``watermark_scale_factor`` 10..400 is narrower than the kernel's 1..3000 (Documentation/admin-guide/sysctl/vm.rst)
on purpose.  Files marked ``optional`` exist only on some kernels (Alibaba Cloud Linux / Anolis): a host
without them is "unsupported", never an error.
"""

from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from typing import Final

from koordlet.system.hostpaths import HostPaths


class Root(enum.Enum):
    """Which pseudo file system the knob lives in (each has its own configurable root in :class:`HostPaths`)."""

    PROC = "proc"
    SYS = "sys"


@dataclass(frozen=True)
class SysFile:
    """One integer kernel knob."""

    key: str
    """Stable name in audit entries, metrics and state files (``min_free_kbytes``)."""
    root: Root
    rel_path: str
    """Path below the root (``sys/vm/min_free_kbytes`` below /proc)."""
    low: int
    high: int | None
    """Inclusive bounds of the accepted value; None: no upper bound."""
    optional: bool
    """Only some kernels have it: a missing file means unsupported, not broken."""
    doc: str

    def path(self, paths: HostPaths) -> str:
        root = paths.proc_root if self.root is Root.PROC else paths.sys_root
        return os.path.join(root, self.rel_path)

    def check(self, value: int) -> int:
        """``value`` when it is accepted; raises ``ValueError`` naming the knob and the bounds otherwise."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{self.key}: must be an integer, got {value!r}")
        if value < self.low or (self.high is not None and value > self.high):
            bound = f"[{self.low}, {self.high}]" if self.high is not None else f">= {self.low}"
            raise ValueError(f"{self.key}: {value} is outside {bound}")
        return value


MIN_FREE_KBYTES: Final = SysFile("min_free_kbytes", Root.PROC, "sys/vm/min_free_kbytes", 10 * 1024,
                                 10 * 1024 * 1024, False, "KiB the page allocator keeps free (vm.min_free_kbytes)")
WATERMARK_SCALE_FACTOR: Final = SysFile("watermark_scale_factor", Root.PROC, "sys/vm/watermark_scale_factor", 10,
                                        400, False, "kswapd watermark distance, in 1/10000 of memory")
MEMCG_REAP_BACKGROUND: Final = SysFile("memcg_reap_background", Root.SYS, "kernel/mm/memcg_reaper/reap_background",
                                       0, 1, True, "background async memcg reclaim (Alibaba Cloud Linux)")
SCHED_GROUP_IDENTITY_ENABLED: Final = SysFile(
    "sched_group_identity_enabled", Root.PROC, "sys/kernel/sched_group_identity_enabled", 0, 1, True,
    "group identity (bvt) scheduling switch (Alibaba Cloud Linux)")
SCHED_IDLE_SAVER_WMARK: Final = SysFile("sched_idle_saver_wmark", Root.PROC, "sys/kernel/sched_idle_saver_wmark", 0,
                                        None, True, "group identity idle saver watermark, ns (Alibaba Cloud Linux)")
PAGE_CACHE_LIMIT_ENABLED: Final = SysFile("pagecache_limit_enabled", Root.SYS, "kernel/mm/pagecache_limit/enabled",
                                          0, 1, True, "global memcg page cache limit switch (Anolis)")

REGISTRY: Final = {f.key: f for f in (MIN_FREE_KBYTES, WATERMARK_SCALE_FACTOR, MEMCG_REAP_BACKGROUND,
                                      SCHED_GROUP_IDENTITY_ENABLED, SCHED_IDLE_SAVER_WMARK, PAGE_CACHE_LIMIT_ENABLED)}
"""Every descriptor by key (the executor refuses a file not listed here)."""

SCHED_FEATURES_REL_PATHS: Final = ("kernel/debug/sched_features", "kernel/debug/sched/features")
"""Below the sys root: the scheduler's feature switches in debugfs (``NAME`` sets one, ``NO_NAME`` clears it).
Koordinator knows the first, where kernels before 5.13 (and Alibaba Cloud Linux) keep it; 5.13 moved the
scheduler's debug files into debugfs' ``sched/`` directory."""
_FEATURE_NAME = re.compile(r"[A-Z][A-Z0-9_]*")


def sched_features_path(paths: HostPaths) -> str:
    """The host's ``sched_features`` file: the first that exists, else Koordinator's path (whose absence
    then says the knob is unsupported)."""
    candidates = [os.path.join(paths.sys_root, rel) for rel in SCHED_FEATURES_REL_PATHS]
    return next((path for path in candidates if os.path.exists(path)), candidates[0])


def parse_sched_features(text: str) -> dict[str, bool]:
    """``GENTLE_FAIR_SLEEPERS NO_HRTICK ...`` -> {name: enabled} (Koordinator ``GetSchedFeatures``); a feature
    listed both ways is a ``ValueError``."""
    features: dict[str, bool] = {}
    for word in text.split():
        name, enabled = (word[3:], False) if word.startswith("NO_") else (word, True)
        if features.get(name, enabled) != enabled:
            raise ValueError(f"sched_features lists {name} both set and cleared")
        features[name] = enabled
    return features


def check_feature_name(name: str) -> str:
    """``name`` when it can name a scheduler feature; ``ValueError`` otherwise (the kernel would take
    ``NO_X`` as clearing X, and anything else is EINVAL)."""
    if not _FEATURE_NAME.fullmatch(name) or name.startswith("NO_"):
        raise ValueError(f"{name!r} is not a scheduler feature name (upper case, digits and _, no NO_ prefix)")
    return name
