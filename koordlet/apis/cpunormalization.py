"""CPU normalization on the wire (Koordinator ``apis/extension/cpu_normalization.go``): the node's CPU basic info
(reported by the koordlet, the NodeResourceTopology annotation ``node.koordinator.sh/cpu-basic-info``), the
ratio the companion derives from it (Node annotation ``node.koordinator.sh/cpu-normalization-ratio``) and the
node label that switches normalization on or off for one node.

A ratio r > 1 says one CPU of this node does the work of r CPUs of the reference model: the batch allocatable
is advertised r times larger, and the koordlet divides a pod's CFS quota by r so that a limit in normalized
CPUs becomes the right amount of this node's CPU time.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from koordlet.errors import ParseError

ANNOTATION_CPU_NORMALIZATION_RATIO: Final = "node.koordinator.sh/cpu-normalization-ratio"
LABEL_CPU_NORMALIZATION_ENABLED: Final = "node.koordinator.sh/cpu-normalization-enabled"
ANNOTATION_CPU_BASIC_INFO: Final = "node.koordinator.sh/cpu-basic-info"
RATIO_DIFF_EPSILON: Final = 0.01
"""``NormalizationRatioDiffEpsilon``: two ratios closer than this are the same ratio (no rewrite, no rescale)."""

# Go's strconv.ParseBool, which upstream uses for the node label.
_TRUE: Final = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE: Final = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True)
class CPUBasicInfo:
    """``extension.CPUBasicInfo``: what the ratio is looked up by (model, hyper-threading, turbo), plus the
    vendor and L3 CAT mask upstream reports alongside."""

    cpu_model: str = ""
    hyper_thread_enabled: bool = False
    turbo_enabled: bool = False
    cat_l3_cbm_mask: str = ""
    vendor_id: str = ""

    def to_json(self) -> dict[str, Any]:
        """Upstream's JSON: every field ``omitempty``."""
        pairs = (("cpuModel", self.cpu_model), ("hyperThreadEnabled", self.hyper_thread_enabled),
                 ("turboEnabled", self.turbo_enabled), ("catL3CbmMask", self.cat_l3_cbm_mask),
                 ("vendorID", self.vendor_id))
        return {key: value for key, value in pairs if value}

    def to_json_str(self) -> str:
        """The annotation value (Go's ``json.Marshal``: compact, field order as declared)."""
        return json.dumps(self.to_json(), separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json_str(cls, text: str, where: str = ANNOTATION_CPU_BASIC_INFO) -> CPUBasicInfo:
        """Raises ParseError naming ``where`` when ``text`` is not a CPUBasicInfo object."""
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as err:
            raise ParseError(f"{where}: invalid JSON: {err}") from None
        if not isinstance(obj, Mapping):
            raise ParseError(f"{where}: expected a JSON object, got {type(obj).__name__}")
        lowered = {str(k).lower(): v for k, v in obj.items()}  # Go's decoder matches keys case-insensitively

        def text_field(key: str) -> str:
            value = lowered.get(key.lower(), "")
            if not isinstance(value, str):
                raise ParseError(f"{where}: {key}: expected a string, got {value!r}")
            return value

        def bool_field(key: str) -> bool:
            value = lowered.get(key.lower(), False)
            if not isinstance(value, bool):
                raise ParseError(f"{where}: {key}: expected true or false, got {value!r}")
            return value

        return cls(cpu_model=text_field("cpuModel"), hyper_thread_enabled=bool_field("hyperThreadEnabled"),
                   turbo_enabled=bool_field("turboEnabled"), cat_l3_cbm_mask=text_field("catL3CbmMask"),
                   vendor_id=text_field("vendorID"))


def basic_info_of(annotations: Mapping[str, str] | None) -> CPUBasicInfo | None:
    """``GetCPUBasicInfo``: None without the annotation; raises ParseError when it is garbage."""
    raw = (annotations or {}).get(ANNOTATION_CPU_BASIC_INFO)
    return None if raw is None else CPUBasicInfo.from_json_str(raw)


def parse_ratio(annotations: Mapping[str, str] | None) -> float | None:
    """``GetCPUNormalizationRatio``: the node's ratio, None without the annotation; raises ParseError naming
    the annotation when it is not a positive number."""
    raw = (annotations or {}).get(ANNOTATION_CPU_NORMALIZATION_RATIO)
    if raw is None:
        return None
    try:
        value = float(raw.strip()) if raw.strip() == raw else float("nan")
    except ValueError:
        value = float("nan")
    if not math.isfinite(value):
        raise ParseError(f"{ANNOTATION_CPU_NORMALIZATION_RATIO}: not a number: {raw!r}")
    if value <= 0:
        raise ParseError(f"{ANNOTATION_CPU_NORMALIZATION_RATIO}: must be positive, got {raw!r}")
    return value


def format_ratio(ratio: float) -> str:
    """``strconv.FormatFloat(ratio, 'f', 2, 64)``: 1.2 -> "1.20"."""
    return f"{ratio:.2f}"


def ratio_differs(old: float, new: float) -> bool:
    """``IsCPUNormalizationRatioDifferent``."""
    return old > new + RATIO_DIFF_EPSILON or old < new - RATIO_DIFF_EPSILON


def enabled_label(labels: Mapping[str, str] | None) -> bool | None:
    """``GetCPUNormalizationEnabled``: the node label's switch, None without the label; raises ParseError on a
    value Go's ``strconv.ParseBool`` refuses."""
    raw = (labels or {}).get(LABEL_CPU_NORMALIZATION_ENABLED)
    if raw is None:
        return None
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ParseError(f"label {LABEL_CPU_NORMALIZATION_ENABLED}: expected true or false, got {raw!r}")


def scale_quota(quota_us: int, ratio: float | None) -> int:
    """A CFS quota in normalized CPUs as this node's CPU time: ``ceil(quota / ratio)`` when the ratio is above
    1 (upstream supports no ratio in (0, 1)); an unset or unlimited quota (<= 0) is left alone."""
    if quota_us <= 0 or ratio is None or ratio <= 1.0:
        return quota_us
    return math.ceil(quota_us / ratio)
