"""The NodeSLO's resctrl class settings and the names of the resctrl groups they configure."""

from __future__ import annotations

from koordlet.apis.nodeslo import ResctrlQOSCfg, ResourceQOSStrategy

POD_GROUP_PREFIX = "koordlet-"
CLASS_GROUPS = ("LSR", "LS", "BE")
_FIELDS = {"LSR": ("lsrClass", "lsr_class"), "LS": ("lsClass", "ls_class"), "BE": ("beClass", "be_class")}


def class_cfg(strategy: ResourceQOSStrategy, group: str) -> ResctrlQOSCfg | None:
    """``resctrlQOS`` of the class behind class group ``group`` (None when the class is not configured)."""
    cls = getattr(strategy, _FIELDS[group][1])
    return None if cls is None else cls.resctrl_qos


def class_field(group: str) -> str:
    """The NodeSLO field of ``group``'s settings, for messages that name it."""
    return f"resourceQOSStrategy.{_FIELDS[group][0]}.resctrlQOS"


def pod_group(uid: str) -> str:
    """The resctrl group of an annotated pod."""
    return POD_GROUP_PREFIX + uid
