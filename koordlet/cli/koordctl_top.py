"""``koordctl top``: a live view of the node and its pods, read from the koordlet's debug API.

The header shows the node, the agent's mode and uptime, the node's CPU and memory usage averaged over
``--window`` seconds and the NodeSLO in force; the table lists every pod with its usage over the same
window and the CPU shares and CFS quota read from its cgroup.  On a terminal the view refreshes in place
(stdlib ``curses``; keys ``q`` quit, ``c``/``m``/``n`` sort by CPU, memory, name); when stdout is not a
terminal each refresh is printed as a plain block, which is what scripts and ``--iterations`` want.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TextIO

from koordlet.cli.debugclient import ApiError, DaemonDown, DaemonTimeout, DebugClient
from koordlet.cli.koordctl_cmds.flags import add_socket_flag, resolve_socket
from koordlet.debugapi import contract

EXIT_OK: Final = 0

DEFAULT_INTERVAL_SECONDS: Final = 2.0
DEFAULT_WINDOW_SECONDS: Final = 10.0
SORT_KEYS: Final = ("cpu", "memory", "name")
KEY_SORTS: Final[Mapping[str, str]] = {"c": "cpu", "m": "memory", "n": "name"}
FOOTER: Final = "q quit  c sort by CPU  m sort by memory  n sort by name"
COLUMNS: Final = ("NAMESPACE", "NAME", "QOS", "CPU(cores)", "MEMORY", "CPU-SHARES", "QUOTA")


class Getter(Protocol):
    """What ``top`` needs of a debug API client (:class:`koordlet.cli.debugclient.DebugClient` has it)."""

    def get(self, path: str, **query: Any) -> dict[str, Any]: ...


def _positive(value: str) -> float:
    number = float(value)
    if not (math.isfinite(number) and number > 0):
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


def _positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return number


def add_top_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``top`` on ``koordctl``'s sub-command parsers."""
    top: argparse.ArgumentParser = subparsers.add_parser(
        "top",
        help="live view of node and pod usage from the running koordlet",
        description="Refresh the node's and every pod's CPU and memory usage, read from the koordlet's debug "
                    "socket.  Keys: q quit, c/m/n sort by CPU, memory, name.",
    )
    top.add_argument("--interval", type=_positive, default=DEFAULT_INTERVAL_SECONDS, metavar="SECONDS",
                     help=f"seconds between refreshes (default {DEFAULT_INTERVAL_SECONDS:g})")
    top.add_argument("--window", type=_positive, default=DEFAULT_WINDOW_SECONDS, metavar="SECONDS",
                     help=f"average usage over this many seconds (default {DEFAULT_WINDOW_SECONDS:g})")
    add_socket_flag(top)
    top.add_argument("--iterations", type=_positive_int, default=None, metavar="N",
                     help="stop after N refreshes (default: run until q or Ctrl-C)")
    top.add_argument("--sort", choices=SORT_KEYS, default="cpu", help="initial sort order (default cpu)")
    return top


# --- the snapshot and its rendering (pure, no I/O) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodRow:
    namespace: str
    name: str
    qos: str
    cpu_cores: float | None
    memory_bytes: float | None
    cpu_shares: float | None
    cpu_cfs_quota: float | None
    cpu_cfs_period: float | None


@dataclass(frozen=True, slots=True)
class Snapshot:
    status: Mapping[str, Any]
    metrics: Mapping[str, Any]
    slo: Mapping[str, Any] | None
    rows: tuple[PodRow, ...]
    taken_at: float


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def join_pods(metrics: Mapping[str, Any], pods: Mapping[str, Any]) -> tuple[PodRow, ...]:
    """One row per pod known to either document: usage from ``/v1/metrics``, cgroup values from ``/v1/pods``."""
    usage: dict[tuple[str, str], Mapping[str, Any]] = {}
    for entry in metrics.get("pods") or ():
        entry = _mapping(entry)
        usage[(str(entry.get("namespace", "")), str(entry.get("name", "")))] = entry
    described: dict[tuple[str, str], Mapping[str, Any]] = {}
    for entry in pods.get("pods") or ():
        entry = _mapping(entry)
        described[(str(entry.get("namespace", "")), str(entry.get("name", "")))] = entry
    rows = []
    for key in dict.fromkeys([*described, *usage]):
        used = usage.get(key, {})
        pod = described.get(key, {})
        current = _mapping(pod.get("current"))
        rows.append(PodRow(
            namespace=key[0],
            name=key[1],
            qos=str(pod.get("qos") or used.get("qos") or "-"),
            cpu_cores=_number(used.get("cpu_cores")),
            memory_bytes=_number(used.get("memory_bytes")),
            cpu_shares=_number(current.get("cpu_shares")),
            cpu_cfs_quota=_number(current.get("cpu_cfs_quota")),
            cpu_cfs_period=_number(current.get("cpu_cfs_period")),
        ))
    return tuple(rows)


def sort_rows(rows: Sequence[PodRow], key: str) -> list[PodRow]:
    """Largest usage first (pods without a sample last), ties and ``name`` by namespace/name."""
    by_name = sorted(rows, key=lambda r: (r.namespace, r.name))
    if key == "name":
        return by_name

    def usage(row: PodRow) -> float | None:
        return row.cpu_cores if key == "cpu" else row.memory_bytes

    return sorted(by_name, key=lambda r: (usage(r) is None, -(usage(r) or 0.0)))


def format_cores(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def format_bytes(value: float | None) -> str:
    if value is None:
        return "-"
    amount = float(value)
    for unit in ("B", "Ki", "Mi", "Gi"):
        if abs(amount) < 1024:
            return f"{amount:.0f}{unit}" if unit == "B" else f"{amount:.1f}{unit}"
        amount /= 1024
    return f"{amount:.1f}Ti"


def format_quota(quota: float | None, period: float | None) -> str:
    """The CFS quota in cores (``quota / period``); ``max`` when unlimited (-1 on cgroup v1)."""
    if quota is None:
        return "-"
    if quota < 0:
        return "max"
    if period:
        return f"{quota / period:.2f}"
    return f"{quota:.0f}us"


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    total = int(seconds)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}d {clock}" if days else clock


def _table(rows: Sequence[PodRow]) -> list[str]:
    cells = [COLUMNS, *(
        (r.namespace, r.name, r.qos, format_cores(r.cpu_cores), format_bytes(r.memory_bytes),
         "-" if r.cpu_shares is None else f"{r.cpu_shares:.0f}", format_quota(r.cpu_cfs_quota, r.cpu_cfs_period))
        for r in rows
    )]
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    # Text columns left-aligned, numbers right-aligned, as top(1) and kubectl top do.
    numeric = {3, 4, 5, 6}
    return ["  ".join(cell.rjust(w) if i in numeric else cell.ljust(w)
                      for i, (cell, w) in enumerate(zip(row, widths, strict=True))).rstrip()
            for row in cells]


def render(snapshot: Snapshot, sort: str, error: str | None = None) -> list[str]:
    """The screen as lines: header, a blank line, the pod table (its first line the column titles)."""
    status, metrics = snapshot.status, snapshot.metrics
    node = _mapping(metrics.get("node"))
    window = _number(metrics.get("window_seconds"))
    uptime = _number(status.get("uptime_seconds"))
    lines = [
        f"koordctl top - node {status.get('node', '-')}  mode {status.get('mode', '-')}  "
        f"uptime {format_duration(uptime)}  koordlet {status.get('version', '-')}  "
        f"{time.strftime('%H:%M:%S', time.localtime(snapshot.taken_at))}",
        f"Node usage (avg {'-' if window is None else f'{window:g}'}s): "
        f"CPU {format_cores(_number(node.get('cpu_cores')))} cores  "
        f"MEMORY {format_bytes(_number(node.get('memory_bytes')))}",
    ]
    if snapshot.slo is None:
        lines.append("NodeSLO: unavailable")
    else:
        slo = snapshot.slo
        slo_line = f"NodeSLO: origin {slo.get('origin', '-')}  generation {slo.get('generation', '-')}"
        if snapshot.slo.get("rejected"):
            slo_line += f"  rejected: {snapshot.slo['rejected']}"
        lines.append(slo_line)
    lines.append(f"Pods: {len(snapshot.rows)}  sorted by {sort}" + (f"  error: {error}" if error else ""))
    lines.append("")
    lines.extend(_table(sort_rows(snapshot.rows, sort)))
    return lines


# --- fetching and the two front ends -----------------------------------------------------------------


def fetch(client: Getter, window: float) -> Snapshot:
    """One consistent-enough view: four GETs, the NodeSLO optional (older agents may lack ``/v1/slo``)."""
    status = client.get(contract.STATUS)
    metrics = client.get(contract.METRICS, window=f"{window:g}")
    pods = client.get(contract.PODS)
    slo: Mapping[str, Any] | None
    try:
        slo = client.get(contract.SLO)
    except ApiError:
        # An agent without /v1/slo answers 404: the usage view is still worth showing.
        slo = None
    return Snapshot(status=status, metrics=metrics, slo=slo, rows=join_pods(metrics, pods), taken_at=time.time())


def _run_plain(args: argparse.Namespace, client: Getter, first: Snapshot, out: TextIO,
               sleep: Callable[[float], None]) -> int:
    snapshot, count = first, 0
    while True:
        out.write("\n".join(render(snapshot, args.sort)) + "\n\n")
        out.flush()
        count += 1
        if args.iterations is not None and count >= args.iterations:
            return EXIT_OK
        sleep(args.interval)
        snapshot = fetch(client, args.window)


def _run_curses(args: argparse.Namespace, client: Getter, first: Snapshot) -> int:
    import curses

    def loop(screen: Any) -> int:
        with contextlib.suppress(curses.error):
            curses.curs_set(0)
        screen.timeout(int(args.interval * 1000))
        sort, snapshot, error, count = args.sort, first, None, 0
        while True:
            height, width = screen.getmaxyx()
            screen.erase()
            lines = render(snapshot, sort, error)
            body = lines[:max(height - 1, 0)]
            for y, line in enumerate(body):
                # The column titles (after header and blank line) in reverse video, as top(1) shows them.
                attr = curses.A_REVERSE if y == 5 else curses.A_NORMAL
                with contextlib.suppress(curses.error):
                    screen.addnstr(y, 0, line, max(width - 1, 0), attr)
            with contextlib.suppress(curses.error):
                screen.addnstr(height - 1, 0, FOOTER, max(width - 1, 0), curses.A_BOLD)
            screen.refresh()
            count += 1
            if args.iterations is not None and count >= args.iterations:
                return EXIT_OK
            deadline = time.monotonic() + args.interval
            redraw_only = False
            while True:
                key = screen.getch()
                if key in (ord("q"), ord("Q")):
                    return EXIT_OK
                char = chr(key) if 0 <= key < 256 else ""
                if char.lower() in KEY_SORTS:
                    sort, redraw_only = KEY_SORTS[char.lower()], True
                    break
                if key == curses.KEY_RESIZE:
                    redraw_only = True
                    break
                remaining = deadline - time.monotonic()
                if key == -1 or remaining <= 0:
                    break
                screen.timeout(max(int(remaining * 1000), 1))
            screen.timeout(int(args.interval * 1000))
            if redraw_only:
                continue
            try:
                snapshot, error = fetch(client, args.window), None
            except (DaemonDown, DaemonTimeout):
                # Keep the last frame and retry, as top(1) does across a restart of what it watches.
                error = f"koordlet stopped answering on {args.socket}"
            except (ApiError, OSError) as exc:
                error = str(exc)

    result: int = curses.wrapper(loop)
    return result


def run_top(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``koordctl top``.  A koordlet that does not answer at start raises the debug client's errors, which
    ``koordctl``'s main maps to its exit codes and messages like every other command."""
    stream = out if out is not None else sys.stdout
    socket_path = resolve_socket(args.socket, os.environ)
    client = DebugClient(socket_path)
    try:
        first = fetch(client, args.window)
        if out is None and sys.stdout.isatty() and sys.stdin.isatty():
            return _run_curses(args, client, first)
        return _run_plain(args, client, first, stream, time.sleep)
    except KeyboardInterrupt:
        return EXIT_OK
