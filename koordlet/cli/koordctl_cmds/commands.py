"""The ``koordctl`` commands that read the daemon's debug API: what each one asks and how its table looks.

Each :class:`Command` fetches one document (``-o json|yaml`` print it as is) and renders it as a table for
people.  Table cells never contain spaces except in the last column, so ``awk`` and ``column`` work on them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from koordlet.cli.debugclient import DebugClient
from koordlet.cli.koordctl_cmds import render
from koordlet.debugapi import contract
from koordlet.errors import KoordletError

Document = dict[str, Any]

RECENT_ACTIONS: Final = 10
"""How many of the QoS decisions that acted the ``qos`` table lists below the strategies."""


class PodNotFound(KoordletError, LookupError):
    """``koordctl cgroup NAME`` matched no pod, or pods in several namespaces."""


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    fetch: Callable[[DebugClient, argparse.Namespace], Document]
    table: Callable[[Document, float], str]
    """Renders the document for people; the float is the current Unix time (for ages)."""
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None


def positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {value!r}")
    return number


def _items(document: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    value = document.get(key)
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _fields(pairs: Sequence[tuple[str, str]]) -> str:
    width = max(len(label) for label, _ in pairs) + 1
    return "".join(f"{label + ':':<{width}} {value}".rstrip() + "\n" for label, value in pairs)


# --- status -------------------------------------------------------------------------------------------

def status_table(doc: Document, now: float) -> str:
    companion = doc.get("companion")
    if isinstance(companion, Mapping):
        link = "connected" if companion.get("nodeslo_connected") else "NodeSLO stream down"
        reports = "reports failing" if companion.get("reports_failing") else "reports ok"
        companion_text = f"{render.text(companion.get('address'))} ({link}, {reports})"
    else:
        companion_text = "none"
    fields = [
        ("Node", render.text(doc.get("node"))),
        ("Version", f"{render.text(doc.get('version'))} (pid {render.text(doc.get('pid'))})"),
        ("Mode", render.text(doc.get("mode"))),
        ("Uptime", render.duration(doc.get("uptime_seconds"))),
        ("Companion", companion_text),
    ]
    shadow = doc.get("shadow")
    if isinstance(shadow, Mapping):
        effective = shadow.get("effective")
        names = [str(n) for n, on in effective.items() if on is True] if isinstance(effective, Mapping) else []
        fields.append(("Shadow mode", ", ".join(names) if names else "none (every strategy active)"))
    pressure = doc.get("pressure")
    triggers: list[Mapping[str, Any]] = []
    if isinstance(pressure, Mapping):
        fields += _pressure_fields(pressure)
        triggers = [t for t in pressure.get("triggers") or () if isinstance(t, Mapping)]
    parts = [_fields(fields)]
    if triggers:
        parts.append(render.table(PRESSURE_HEADER, (
            (render.text(t.get("name")), render.text(t.get("trigger")), ",".join(map(str, t.get("wakes") or ())),
             render.text(t.get("registered")), render.text(t.get("fired")), render.age(t.get("last_fired"), now),
             render.text(t.get("error") or t.get("note") or None)) for t in triggers)))
    parts.append(render.table(("COMPONENT", "RUNNING"),
                              ((render.text(c.get("name")), render.text(c.get("running")))
                               for c in _items(doc, "components"))))
    gates = doc.get("feature_gates")
    if isinstance(gates, Mapping) and gates:
        missing = doc.get("feature_gates_not_implemented")
        # An older koordlet does not send the list: say nothing rather than claim every gate is implemented.
        if isinstance(missing, list):
            absent = {str(name) for name in missing}
            parts.append(render.table(("FEATURE-GATE", "ENABLED", "IMPLEMENTED"),
                                      ((str(name), render.text(on), "no" if str(name) in absent else "yes")
                                       for name, on in gates.items())))
        else:
            parts.append(render.table(("FEATURE-GATE", "ENABLED"),
                                      ((str(name), render.text(on)) for name, on in gates.items())))
    probes = _items(doc, "probes")
    if probes:
        parts.append(render.table(("PROBE", "SUPPORTED", "REASON"),
                                  ((render.text(p.get("name")), render.text(p.get("supported")),
                                    render.text(p.get("reason"))) for p in probes)))
    return "\n".join(parts)


PRESSURE_HEADER: Final = ("PSI-TRIGGER", "THRESHOLD", "WAKES", "REGISTERED", "FIRED", "LAST-FIRED", "NOTE")


def _pressure_fields(pressure: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``Pressure`` (triggers on or why not) and ``Woken rounds`` (per strategy: acted / quiet / folded)."""
    if pressure.get("enabled") is not True:
        return [("Pressure", f"polling only: {render.text(pressure.get('reason') or None)}")]
    fields = [("Pressure", f"PSI triggers wake the eviction strategies (woken rounds at least "
                           f"{render.text(pressure.get('debounce_seconds'))} s apart)")]
    wakes = pressure.get("wakes")
    if isinstance(wakes, Mapping) and wakes:
        fields.append(("Woken rounds", "; ".join(
            f"{name}: {render.text(c.get('woken_rounds_acted'))} acted, {render.text(c.get('woken_rounds_quiet'))} "
            f"found nothing to do, {render.text(c.get('folded'))} wakes folded"
            for name, c in wakes.items() if isinstance(c, Mapping))))
    return fields


# --- pods ---------------------------------------------------------------------------------------------

PODS_HEADER: Final = ("NAMESPACE", "NAME", "QOS", "PRIORITY", "CPU-SHARES(cur/desired)", "QUOTA",
                      "MEMORY-LIMIT", "CPUSET")
DRIFT_MARK: Final = "*"
REFUSED_HEADER: Final = ("POD", "REFUSED-KEY")


def _priority(pod: Mapping[str, Any]) -> str:
    cls, number = pod.get("priority_class"), pod.get("priority")
    if cls and number is not None:
        return f"{cls}/{number}"
    return render.text(cls or number)


def _resources(pod: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    current, desired = pod.get("current"), pod.get("desired")
    return (current if isinstance(current, Mapping) else {}), (desired if isinstance(desired, Mapping) else {})


def _drifted(current: Mapping[str, Any], desired: Mapping[str, Any], key: str) -> bool:
    return key in desired and key in current and str(desired[key]) != str(current[key])


def _quota(current: Mapping[str, Any]) -> str:
    quota, period = current.get("cpu_cfs_quota"), current.get("cpu_cfs_period")
    if quota is None:
        return render.NONE
    if render.is_unlimited_bytes(quota):  # -1 in v1, "max" in v2
        return "unlimited"
    return f"{quota}/{period}" if period is not None else str(quota)


def pod_row(pod: Mapping[str, Any]) -> tuple[str, ...]:
    current, desired = _resources(pod)
    shares = f"{render.text(current.get('cpu_shares'))}/{render.text(desired.get('cpu_shares'))}"
    quota = _quota(current) + (DRIFT_MARK if _drifted(current, desired, "cpu_cfs_quota") else "")
    memory = render.size(current.get("memory_limit")) + (DRIFT_MARK if _drifted(current, desired, "memory_limit")
                                                          else "")
    cpuset = render.text(current.get("cpuset_cpus") or None) + (DRIFT_MARK if _drifted(current, desired, "cpuset_cpus")
                                                                 else "")
    return (render.text(pod.get("namespace")), render.text(pod.get("name")), render.text(pod.get("qos")),
            _priority(pod), shares, quota, memory, cpuset)


def pods_table(doc: Document, now: float) -> str:
    rows = [pod_row(pod) for pod in _items(doc, "pods")]
    out = render.table(PODS_HEADER, rows)
    if any(DRIFT_MARK in cell for row in rows for cell in row[5:]):
        out += f"\n{DRIFT_MARK} differs from the value koordlet last wrote (see -o json: current vs desired)\n"
    refused = [(f"{render.text(pod.get('namespace'))}/{render.text(pod.get('name'))}", str(text))
               for pod in _items(doc, "pods") for text in (pod.get("refused_keys") or ())]
    if refused:
        out += "\nRefused by the tenant policy (koordlet handles the pod as if it did not carry these):\n"
        out += render.table(REFUSED_HEADER, refused)
    would = [line for pod in _items(doc, "pods") for line in _would(pod)]
    if would:
        out += "\nShadow mode, per pod (nothing was written or evicted):\n" + "\n".join(would) + "\n"
    return out


def _would(pod: Mapping[str, Any]) -> list[str]:
    """"ns/name: would set <key> to <value> because <owner>" for the pod and its containers, and "would evict
    because <reason>" for each eviction shadow mode recorded."""
    name = f"{render.text(pod.get('namespace'))}/{render.text(pod.get('name'))}"
    lines = []
    places = [("", pod.get("intended"))] + [(f" container {render.text(c.get('name'))}", c.get("intended"))
                                            for c in pod.get("containers") or () if isinstance(c, Mapping)]
    for where, intended in places:
        if not isinstance(intended, Mapping):
            continue
        for key, item in intended.items():
            if isinstance(item, Mapping):
                lines.append(f"  {name}{where}: would set {key} to {render.text(item.get('value'))} because "
                             f"{render.text(item.get('because'))}")
    for eviction in pod.get("intended_evictions") or ():
        if isinstance(eviction, Mapping):
            lines.append(f"  {name}: would evict because {render.text(eviction.get('reason'))}: "
                         f"{render.text(eviction.get('message'))}")
    return lines


# --- metrics ------------------------------------------------------------------------------------------

METRICS_HEADER: Final = ("NAMESPACE", "NAME", "QOS", "CPU(cores)", "MEMORY")


def _cpu_key(pod: Mapping[str, Any]) -> tuple[bool, float]:
    cpu = pod.get("cpu_cores")
    if isinstance(cpu, int | float) and not isinstance(cpu, bool):
        return (False, -float(cpu))
    return (True, 0.0)


def metrics_table(doc: Document, now: float) -> str:
    node = doc.get("node")
    window = render.text(doc.get("window_seconds"))
    if isinstance(node, Mapping):
        line = (f"NODE  cpu {render.cores(node.get('cpu_cores'))} cores  "
                f"memory {render.size(node.get('memory_bytes'))}  ({window} s average)\n")
    else:
        line = f"NODE  no samples in the last {window} s\n"
    pods = sorted(_items(doc, "pods"), key=_cpu_key)
    rows = ((render.text(p.get("namespace")), render.text(p.get("name")), render.text(p.get("qos")),
             render.cores(p.get("cpu_cores")), render.size(p.get("memory_bytes"))) for p in pods)
    return line + "\n" + render.table(METRICS_HEADER, rows)


def _add_window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", type=positive_int, metavar="SECONDS", default=None,
                        help=f"average over the last SECONDS (default {contract.DEFAULT_METRICS_WINDOW_SECONDS})")


# --- slo ----------------------------------------------------------------------------------------------

def slo_table(doc: Document, now: float) -> str:
    head = _fields([
        ("Origin", render.text(doc.get("origin"))),
        ("Generation", render.text(doc.get("generation"))),
        ("Rejected", render.text(doc.get("rejected"))),
    ])
    return head + "\n" + render.table(("FIELD", "VALUE"), render.flatten(doc.get("spec") or {}))


# --- qos ----------------------------------------------------------------------------------------------

QOS_HEADER: Final = ("STRATEGY", "ENABLED", "MODE", "LAST-ACTION", "AGE", "SUMMARY")


def _mode(shadow: Any) -> str:
    return "shadow" if shadow is True else "active"


def qos_table(doc: Document, now: float) -> str:
    rows = []
    intended: list[str] = []
    for strategy in _items(doc, "strategies"):
        last = strategy.get("last")
        last = last if isinstance(last, Mapping) else {}
        rows.append((render.text(strategy.get("name")), render.text(strategy.get("enabled")),
                     _mode(strategy.get("shadow")), render.text(last.get("action")), render.age(last.get("at"), now),
                     _summary(last)))
        sentences = last.get("intended")
        if last.get("shadow") is True and isinstance(sentences, list) and sentences:
            intended += [f"  {render.text(strategy.get('name'))}: {render.text(s)}" for s in sentences]
    out = render.table(QOS_HEADER, rows)
    if intended:
        out += "\nShadow mode, the last rounds would have (nothing was written or evicted):\n" + "\n".join(intended)
        out += "\n"
    history = _items(doc, "history")
    if history:
        recent = history[-RECENT_ACTIONS:]
        out += f"\nRecent actions ({len(recent)} of {len(history)}, oldest first):\n"
        out += render.table(("AGE", "STRATEGY", "ACTION", "SUMMARY"),
                            ((render.age(d.get("at"), now), render.text(d.get("strategy")),
                              render.text(d.get("action")), _summary(d)) for d in recent))
    return out


def _summary(decision: Mapping[str, Any]) -> str:
    """The decision's summary, after what woke its round when a pressure trigger did."""
    woken = decision.get("woken_by")
    summary = render.text(decision.get("summary") or None)
    return f"[woken: {woken}] {summary}" if isinstance(woken, str) and woken else summary


# --- hooks --------------------------------------------------------------------------------------------

HOOKS_HEADER: Final = ("AGE", "TRANSPORT", "STAGE", "POD", "CONTAINER", "DURATION", "OK", "ADJUSTMENT")


def _adjustment(call: Mapping[str, Any]) -> str:
    adjustment = call.get("adjustment")
    parts = [f"{k}={v}" for k, v in adjustment.items()] if isinstance(adjustment, Mapping) else []
    intended = call.get("intended")
    if isinstance(intended, Mapping) and intended:
        parts.append("shadow, would set: " + ", ".join(f"{k}={v}" for k, v in intended.items()))
    errors = call.get("errors")
    if isinstance(errors, list) and errors:
        parts.append("errors: " + "; ".join(str(e) for e in errors))
    return ", ".join(parts) or render.NONE


def _milliseconds(value: Any) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return render.NONE
    return f"{value:.1f}ms"


def hooks_table(doc: Document, now: float) -> str:
    names = doc.get("hooks")
    line = "Hooks: " + (", ".join(str(n) for n in names) if isinstance(names, list) and names else "none") + "\n"
    rows = ((render.age(c.get("at"), now), render.text(c.get("transport")), render.text(c.get("stage")),
             render.text(c.get("pod") or None), render.text(c.get("container") or None),
             _milliseconds(c.get("duration_ms")), render.text(c.get("ok")), _adjustment(c))
            for c in _items(doc, "calls"))
    return line + "\n" + render.table(HOOKS_HEADER, rows)


# --- evictions ----------------------------------------------------------------------------------------

EVICTIONS_HEADER: Final = ("AGE", "POD", "REASON", "OUTCOME", "BACKEND", "MESSAGE")


def evictions_table(doc: Document, now: float) -> str:
    rows = ((render.age(e.get("at"), now), render.text(e.get("pod")), render.text(e.get("reason")),
             render.text(e.get("outcome")), render.text(e.get("backend")), render.text(e.get("message") or None))
            for e in _items(doc, "evictions"))
    return render.table(EVICTIONS_HEADER, rows)


def _add_limit(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=positive_int, metavar="N", default=None,
                        help=f"show the newest N entries (default {contract.DEFAULT_LIMIT})")


# --- cgroup -------------------------------------------------------------------------------------------

def resolve_pod(client: DebugClient, pod: str) -> str:
    """``namespace/name`` as given, or the one pod of that name in any namespace."""
    if "/" in pod:
        return pod
    matches = sorted(f"{p.get('namespace')}/{p.get('name')}"
                     for p in _items(client.get(contract.PODS), "pods") if p.get("name") == pod)
    if not matches:
        raise PodNotFound(f"no pod named {pod!r} on this node (koordctl pods lists them)")
    if len(matches) > 1:
        raise PodNotFound(f"pod name {pod!r} is ambiguous: {', '.join(matches)} (give NAMESPACE/NAME)")
    return matches[0]


def fetch_cgroup(client: DebugClient, args: argparse.Namespace) -> Document:
    return client.get(contract.CGROUP, pod=resolve_pod(client, args.pod), container=args.container)


def cgroup_table(doc: Document, now: float) -> str:
    head = _fields([
        ("Pod", render.text(doc.get("pod"))),
        ("Container", render.text(doc.get("container"))),
        ("Dir", render.text(doc.get("dir"))),
    ])
    files = doc.get("files")
    rows: list[tuple[str, str]] = []
    for name, content in (files.items() if isinstance(files, Mapping) else ()):
        lines = str(content).rstrip("\n").split("\n")
        rows.append((str(name), lines[0]))
        rows.extend(("", line) for line in lines[1:])
    return head + "\n" + render.table(("FILE", "CONTENT"), rows)


def _add_pod(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("pod", metavar="POD", help="NAMESPACE/NAME, or NAME when one namespace has it")
    parser.add_argument("container", metavar="CONTAINER", nargs="?", default=None,
                        help="a container of the pod (default: the pod's own cgroup)")


# --- profile ------------------------------------------------------------------------------------------

PROFILE_TOP: Final = 15
"""Functions listed in each of the ``profile`` tables."""


def fetch_profile(client: DebugClient, args: argparse.Namespace) -> Document:
    """Waits the profile's window out (the client's timeout grows with it); ``--folded FILE`` also writes the
    collapsed stacks there, one ``stack microseconds`` line each (flamegraph.pl, speedscope)."""
    slow = DebugClient(client.socket_path, client.timeout_seconds + args.seconds)
    doc = slow.get(contract.PROFILE, seconds=args.seconds, interval_ms=args.interval_ms)
    if args.folded:
        collapsed = doc.get("collapsed")
        lines = [f"{stack} {value}" for stack, value in collapsed.items()] if isinstance(collapsed, dict) else []
        with open(args.folded, "w", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
    return doc


def profile_table(doc: Document, now: float) -> str:
    cpu = doc.get("cpu_seconds")
    seconds = doc.get("seconds")
    share = f"{cpu / seconds:.1%} of one core" if isinstance(cpu, float) and isinstance(seconds, float | int) \
        and seconds else "-"
    head = _fields([("Window", f"{render.text(seconds)} s"), ("Samples", render.text(doc.get("samples"))),
                    ("CPU", f"{render.text(cpu)} s ({share})")])
    parts = [head]
    for key, title in (("top_self", "SELF-CPU"), ("top_total", "TOTAL-CPU")):
        rows = ((f"{float(f.get('cpu_seconds') or 0):.3f}", render.text(f.get("function")))
                for f in _items(doc, key)[:PROFILE_TOP])
        parts.append(render.table((title, "FUNCTION"), rows))
    return "\n".join(parts)


def _add_profile(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=positive_int, metavar="N", default=10,
                        help="how long to sample (default 10, at most 120)")
    parser.add_argument("--interval-ms", type=positive_int, metavar="MS", default=10, dest="interval_ms",
                        help="time between samples (default 10)")
    parser.add_argument("--folded", metavar="FILE", default=None,
                        help="also write the collapsed stacks (CPU microseconds) to FILE, for flamegraph.pl or "
                             "speedscope")


# --- shadow -------------------------------------------------------------------------------------------

SHADOW_HEADER: Final = ("KIND", "NAME", "MODE", "SET-BY")
_SWITCHES: Final = {"on": True, "off": False, "default": None}


def fetch_shadow(client: DebugClient, args: argparse.Namespace) -> Document:
    kind = "hook" if args.hook else "strategy"
    if args.mode is None:
        if args.name is not None:
            raise KoordletError(f"koordctl shadow {args.name}: say on, off or default")
        return client.get(contract.SHADOW)
    name = None if args.name in (None, "all") else args.name
    if name is None and args.mode == "default":
        raise KoordletError(f"koordctl shadow all: on or off (only one {kind}'s own setting can be dropped)")
    return client.post(contract.ADMIN_SHADOW, {kind: name, "shadow": _SWITCHES[args.mode]})


def _mode_rows(modes: Mapping[str, Any], own_key: str, kind: str) -> list[tuple[str, ...]]:
    effective = modes.get("effective")
    own = modes.get(own_key)
    own = own if isinstance(own, Mapping) else {}
    rows: list[tuple[str, ...]] = []
    for name, shadow in (effective.items() if isinstance(effective, Mapping) else ()):
        rows.append((kind, render.text(name), _mode(shadow), "own" if name in own else "default"))
    return rows


def shadow_table(doc: Document, now: float) -> str:
    rows = _mode_rows(doc, "strategies", "strategy")
    head = f"default: strategies {_mode(doc.get('default'))}"
    hooks = doc.get("hooks")
    if isinstance(hooks, Mapping):
        rows += _mode_rows(hooks, "hooks", "hook")
        head += f", hooks {_mode(hooks.get('default'))}"
    return head + "\n" + render.table(SHADOW_HEADER, rows)


def _add_shadow(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hook", action="store_true", help="NAME is a runtime hook, not a QoS strategy")
    parser.add_argument("name", nargs="?", metavar="NAME",
                        help="a strategy (a hook with --hook), or all: the default of every one without a setting "
                             "of its own")
    parser.add_argument("mode", nargs="?", choices=tuple(_SWITCHES),
                        help="on: shadow mode (decide, change nothing); off: active; default: drop its own "
                             "setting.  Takes effect in a strategy's next round, a hook's next call.")


def _simple(path: str, **query_args: str) -> Callable[[DebugClient, argparse.Namespace], Document]:
    """Fetch ``path`` with the query parameters named by ``query_args`` (query name -> attribute of args)."""

    def fetch(client: DebugClient, args: argparse.Namespace) -> Document:
        return client.get(path, **{name: getattr(args, attr) for name, attr in query_args.items()})

    return fetch


COMMANDS: Final[tuple[Command, ...]] = (
    Command("status", "the daemon: version, mode, components, feature gates, probes, companion link",
            _simple(contract.STATUS), status_table),
    Command("pods", "pods on this node with their QoS and cgroup values (current/desired)",
            _simple(contract.PODS), pods_table),
    Command("metrics", "node and pod CPU and memory averaged over a window",
            _simple(contract.METRICS, window="window"), metrics_table, _add_window),
    Command("slo", "the NodeSLO in force: where it came from and its spec",
            _simple(contract.SLO), slo_table),
    Command("qos", "QoS strategies: enabled, last decision and the recent actions",
            _simple(contract.QOS), qos_table),
    Command("hooks", "recent runtime hook calls and what they adjusted",
            _simple(contract.HOOKS, limit="limit"), hooks_table, _add_limit),
    Command("evictions", "recent evictions and their outcome",
            _simple(contract.EVICTIONS, limit="limit"), evictions_table, _add_limit),
    Command("cgroup", "every cgroup file of a pod or container, as koordlet reads it",
            fetch_cgroup, cgroup_table, _add_pod),
    Command("profile", "where the daemon's CPU goes: sample its threads for N seconds",
            fetch_profile, profile_table, _add_profile),
    Command("shadow", "shadow mode per strategy and hook; [--hook] NAME|all on|off|default switches it at run time",
            fetch_shadow, shadow_table, _add_shadow),
)
