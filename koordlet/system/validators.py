"""Value checks for cgroup writes, and the v1 <-> v2 value conversions.

A validator turns what a caller wants to write (an int, or the text of a device or CPU list) into a
canonical value, or raises ``ValueError`` saying what is wrong; :class:`~koordlet.system.resources.
CgroupFile` adds the file name and the offending value to the message.  Canonical values use cgroup v1
semantics (``cpu.shares``, ``-1`` for unlimited), which is what Koordinator's strategies compute; the
conversions below produce the v2 text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

INT64_MAX = (1 << 63) - 1

# kernel/sched/core.c: a quota above max_cfs_runtime = MAX_BW (2^44 - 1) µs is EINVAL.
CFS_QUOTA_MAX_US = (1 << 44) - 1

# include/linux/threads.h: PID_MAX_LIMIT on 64-bit kernels.
PID_MAX_LIMIT = 4 * 1024 * 1024

# kubelet's (and Koordinator's) shares <-> weight mapping, KEP-2254.
SHARES_MIN, SHARES_MAX = 2, 262144
WEIGHT_MIN, WEIGHT_MAX = 1, 10000


class Validator(Protocol):
    """Checks a value to write and renders it as v1 text."""

    def check(self, value: object) -> object:
        """The canonical value; raises ``ValueError`` with the reason when ``value`` is not acceptable."""

    def render(self, value: object) -> str:
        """The v1 file text of a canonical value."""

    def describe(self) -> str:
        """What is accepted, for error messages and docs."""


def as_int(value: object) -> int:
    """An int from an int or a decimal string; bools and anything else are rejected."""
    if isinstance(value, bool):
        raise ValueError("a boolean is not an integer")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()):
        return int(value.strip())
    raise ValueError("not an integer")


@dataclass(frozen=True)
class IntRange:
    """An integer in ``[low, high]``; with ``unlimited`` also -1 (or the text ``max``) for no limit."""

    low: int
    high: int
    unlimited: bool = False

    def check(self, value: object) -> int:
        if self.unlimited and isinstance(value, str) and value.strip() == "max":
            return -1
        try:
            number = as_int(value)
        except ValueError:
            raise ValueError(f"expected {self.describe()}") from None
        if self.unlimited and number == -1:
            return -1
        if not self.low <= number <= self.high:
            raise ValueError(f"out of range: expected {self.describe()}")
        return number

    def render(self, value: object) -> str:
        return str(value)

    def describe(self) -> str:
        text = f"an integer in {self.low}..{self.high}"
        return text + " or -1 (unlimited)" if self.unlimited else text


def parse_cpulist(text: str) -> list[int]:
    """CPU ids of a kernel list like ``0-3,8,10-11`` (``Documentation/admin-guide/cgroup-v1/cpusets.rst``).

    Raises ``ValueError`` naming the bad part; an empty list is an empty result."""
    cpus: set[int] = set()
    body = text.strip()
    if not body:
        return []
    for part in body.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if not match:
            raise ValueError(f"bad list element {part!r}")
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) is not None else first
        if first > last:
            raise ValueError(f"descending range {part!r}")
        if last > CpuList.MAX_ID:
            raise ValueError(f"id {last} above {CpuList.MAX_ID}")
        cpus.update(range(first, last + 1))
    return sorted(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """The shortest kernel list text for a set of ids: ``[0, 1, 2, 3, 8]`` -> ``0-3,8``."""
    ids = sorted(set(cpus))
    parts: list[str] = []
    start = prev = None
    for cpu in ids:
        if prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            parts.append(f"{start}-{prev}" if start != prev else f"{start}")
        start = prev = cpu
    if start is not None:
        parts.append(f"{start}-{prev}" if start != prev else f"{start}")
    return ",".join(parts)


@dataclass(frozen=True)
class CpuList:
    """A non-empty CPU (or memory node) list: text such as ``0-3,8`` or an iterable of ids.

    Empty is refused: writing an empty ``cpuset.cpus`` to a cgroup with tasks fails with ENOSPC
    (Koordinator #1460), and leaving it empty makes every later attach fail the same way."""

    MAX_ID = 65535  # far above any NR_CPUS; catches garbage such as a byte count passed by mistake

    def check(self, value: object) -> str:
        if isinstance(value, str):
            cpus = parse_cpulist(value)
        elif isinstance(value, Iterable):
            cpus = []
            for item in value:
                number = as_int(item)
                if not 0 <= number <= self.MAX_ID:
                    raise ValueError(f"id {number} outside 0..{self.MAX_ID}")
                cpus.append(number)
        else:
            raise ValueError(f"expected {self.describe()}")
        if not cpus:
            raise ValueError("empty list (the kernel answers ENOSPC for a cgroup with tasks)")
        return format_cpulist(cpus)

    def render(self, value: object) -> str:
        return str(value)

    def describe(self) -> str:
        return "a non-empty CPU list such as 0-3,8"


@dataclass(frozen=True)
class DeviceValue:
    """One ``<major>:<minor> <value>`` line of a per-device file (blkio throttle, io weight)."""

    low: int
    high: int = INT64_MAX

    def check(self, value: object) -> tuple[int, int, int]:
        if isinstance(value, tuple) and len(value) == 3:
            numbers = [as_int(v) for v in value]
        elif isinstance(value, str):
            match = re.fullmatch(r"(\d+):(\d+)\s+(-?\d+)", value.strip())
            if not match:
                raise ValueError(f"expected {self.describe()}")
            numbers = [int(g) for g in match.groups()]
        else:
            raise ValueError(f"expected {self.describe()}")
        major, minor, number = numbers
        if major < 0 or minor < 0:
            raise ValueError("negative device number")
        if not self.low <= number <= self.high:
            raise ValueError(f"value {number} out of range {self.low}..{self.high}")
        return (major, minor, number)

    def render(self, value: object) -> str:
        if not isinstance(value, tuple) or len(value) != 3:
            raise ValueError(f"not a checked device value: {value!r}")
        major, minor, number = value
        return f"{major}:{minor} {number}"

    def describe(self) -> str:
        return f"'<major>:<minor> <value>' with value in {self.low}..{self.high}"


# Keys of blkio.cost.qos / io.cost.qos (Documentation/admin-guide/cgroup-v2.rst, "io.cost.qos").
_COST_QOS_KEYS = {"enable", "ctrl", "rpct", "rlat", "wpct", "wlat", "min", "max"}


@dataclass(frozen=True)
class CostQos:
    """One ``<major>:<minor> key=value...`` line of ``io.cost.qos`` (root cgroup only)."""

    def check(self, value: object) -> str:
        if not isinstance(value, str):
            raise ValueError(f"expected {self.describe()}")
        tokens = value.split()
        if not tokens or not re.fullmatch(r"\d+:\d+", tokens[0]):
            raise ValueError(f"expected {self.describe()}")
        if len(tokens) == 1:
            raise ValueError("no key=value settings after the device")
        for token in tokens[1:]:
            key, sep, setting = token.partition("=")
            if not sep or key not in _COST_QOS_KEYS:
                raise ValueError(f"unknown setting {token!r} (keys: {', '.join(sorted(_COST_QOS_KEYS))})")
            if key == "ctrl":
                if setting not in ("auto", "user"):
                    raise ValueError(f"ctrl must be auto or user, got {setting!r}")
            elif not re.fullmatch(r"\d+(\.\d+)?", setting):
                raise ValueError(f"{key} needs a non-negative number, got {setting!r}")
        return " ".join(tokens)

    def render(self, value: object) -> str:
        return str(value)

    def describe(self) -> str:
        return "'<major>:<minor> key=value ...' (keys: " + ", ".join(sorted(_COST_QOS_KEYS)) + ")"


# ---------------------------------------------------------------------------------------- conversions


def shares_to_weight(shares: int) -> int:
    """cgroup v1 ``cpu.shares`` -> v2 ``cpu.weight``: ``1 + (shares - 2) * 9999 / 262142`` (kubelet)."""
    weight = 1 + (shares - SHARES_MIN) * 9999 // 262142
    return min(max(weight, WEIGHT_MIN), WEIGHT_MAX)


def weight_to_shares(weight: int) -> int:
    """v2 ``cpu.weight`` -> v1 ``cpu.shares``, the inverse mapping (``(weight - 1) * 262142 / 9999 + 2``)."""
    shares = (weight - WEIGHT_MIN) * 262142 // 9999 + SHARES_MIN
    return min(max(shares, SHARES_MIN), SHARES_MAX)


def to_v2_max(value: int) -> str:
    """v1's ``-1`` (unlimited) is v2's ``max``; other values are written as they are."""
    return "max" if value == -1 else str(value)


def from_v2_max(text: str) -> int:
    """v2 ``max`` -> -1, else the integer; raises ``ValueError`` for anything else."""
    body = text.strip()
    return -1 if body == "max" else as_int(body)


def format_cpu_max(quota: int, period: int) -> str:
    """The text of a v2 ``cpu.max`` write: ``"<quota|max> <period>"``."""
    return f"{to_v2_max(quota)} {period}"
