"""Network QoS (Koordinator runtimehooks/hooks/tc with gate ``TCNetworkQoS``, hooks/terwayqos with gate
``TerwayQoS``; both off by default).

``resourceQOSStrategy.policies.netQOSPolicy`` picks the backend (``tc``, the default, or ``terway-qos``)
and its gate must be on; the strategy runs while ``networkQOS.enable`` is true for the LS or the BE class.
Each round turns the NodeSLO into a :class:`~koordlet.resourceexecutor.netqos.NetQoSPlan` (see
:mod:`.plan` for units and defaults): the total from ``systemStrategy.totalNetworkBandwidth`` (0: the NIC's
speed), the interface from ``--net-interface`` (empty: the default route's), and the addresses of the
running pods by class (LSE, LSR and LS pods in LS, as Koordinator's ``GetPodNetQoSClassByName``).  The
plan goes to the backend only when it changed or ``resource_force_update_seconds`` passed.

Bad input (a malformed quantity, a percentage above 100, a request above its limit, guarantees above the
total) rejects the whole plan with the field named; the plan in force stays.  Switched off, or moved to
the other policy, the backend that was in use is cleared once.
"""

from __future__ import annotations

import logging
from typing import Any

from koordlet.apis.extension import QoSClass
from koordlet.apis.nodeslo import NodeSLOSpec, ResourceQOSStrategy
from koordlet.config import gates
from koordlet.errors import ConfigError, KoordletError
from koordlet.isolation.netqos import host
from koordlet.isolation.netqos.plan import TOTAL_FIELD, ClassRates, class_rates, parse_total
from koordlet.isolation.netqos.policy import GATES, POLICY_FIELD, POLICY_TC, policy_of
from koordlet.isolation.slo import qos_strategy
from koordlet.qosmanager.framework import Action, Decider, Decision, Options
from koordlet.qosmanager.plugins.netqos.pods import OwnBandwidth, own_limit, pod_bandwidths
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoS, NetQoSPlan, plan_text

log = logging.getLogger(__name__)

NAME = "netqos"
_CLASS_OF = {QoSClass.LSE: "ls", QoSClass.LSR: "ls", QoSClass.LS: "ls", QoSClass.BE: "be",
             QoSClass.SYSTEM: "system"}
_RANK = {"system": 0, "ls": 1, "be": 2}
_IGNORED = (("lsrClass", "lsr_class"), ("systemClass", "system_class"))


def _network(strategy: ResourceQOSStrategy, attr: str) -> Any:
    cls = getattr(strategy, attr)
    return None if cls is None else cls.network_qos


class NetQoSStrategy:
    """The ``netqos`` strategy."""

    name = NAME

    def __init__(self, options: Options) -> None:
        self.options = options
        self._backends: dict[str, NetQoS] = {}
        self._in_force: NetQoSPlan | None = None
        self._in_force_policy: str | None = None
        """The policy whose backend holds something (cleared on switch-off or policy change)."""
        self._applied_at = 0.0
        self._last_error: str | None = None
        self._decide = Decider(NAME, log, options.clock)

    # ------------------------------------------------------------------------------------------ protocol

    def enabled(self, slo: NodeSLOSpec) -> bool:
        """The policy's gate and ``networkQOS.enable`` of the LS or BE class."""
        gate = GATES.get(policy_of(slo))
        if gate is None or not gates.enabled(self.options.gates, gate):
            return False
        strategy = qos_strategy(slo)
        return any(cfg is not None and cfg.enable is True
                   for cfg in (_network(strategy, "ls_class"), _network(strategy, "be_class")))

    def interval(self) -> float:
        return self.options.config.reconcile_interval_seconds

    def run_once(self, slo: NodeSLOSpec, enabled: bool = True) -> Decision:
        now = self.options.clock()
        if not enabled:
            return self._switch_off(now)
        policy = policy_of(slo)
        if policy not in GATES:
            return self._rejected(now, f"{POLICY_FIELD}: must be one of {', '.join(GATES)}, got {policy!r}")
        if self.options.netqos is None:
            return self._rejected(now, "no network QoS backend is configured on this koordlet", Action.SKIP,
                                  reason="no_backend")
        notes: list[str] = []
        try:
            plan, numbers = self._plan(slo, policy, notes)
        except (ConfigError, KoordletError) as exc:
            return self._rejected(now, str(exc))
        numbers["policy"] = policy
        if self._in_force_policy is not None and self._in_force_policy != policy:
            try:
                self._backend(self._in_force_policy).clear()
            except Exception as exc:  # a backend failure must not escape run_once
                return self._rejected(now, f"cannot clear the {self._in_force_policy} backend before switching to "
                                           f"{policy}: {exc}", Action.ERROR)
            notes.append(f"{self._in_force_policy} cleared")
            self._in_force, self._in_force_policy = None, None
        force = self.options.config.resource_force_update_seconds
        if plan == self._in_force and (force <= 0 or now - self._applied_at < force):
            self._last_error = None
            return self._decide(Action.NONE, _summary("unchanged", plan, policy, notes), numbers, at=now)
        try:
            self._backend(policy).apply(plan)
        except Exception as exc:  # Unsupported, refused by kernel or agent, or a bug
            return self._rejected(now, f"{policy} backend refused the plan: {exc}", Action.ERROR)
        changed = plan != self._in_force
        self._in_force, self._in_force_policy, self._applied_at = plan, policy, now
        self._last_error = None
        verb = "applied" if changed else "re-applied"
        summary = _summary(verb, plan, policy, notes)
        if changed:
            log.info("network QoS plan applied", extra={"summary": summary})
        return self._decide(Action.APPLY, summary, numbers, at=now)

    # ------------------------------------------------------------------------------------------ plan

    def _plan(self, slo: NodeSLOSpec, policy: str, notes: list[str]) -> tuple[NetQoSPlan, dict[str, Any]]:
        strategy = qos_strategy(slo)
        for json_name, attr in _IGNORED:
            cfg = _network(strategy, attr)
            if cfg is not None and cfg.enable is True:
                notes.append(f"resourceQOSStrategy.{json_name}.networkQOS ignored: Koordinator shapes the LS and BE "
                             "classes only (LSE/LSR pods are in LS, SYSTEM gets the rest)")
        interface = self.options.config.net_interface
        interface_source = "--net-interface"
        if not interface:
            interface = host.default_route_interface(self.options.layout.paths)
            interface_source = "default route"
        raw_total = (slo.system_strategy.total_network_bandwidth if slo.system_strategy is not None else None) or "0"
        total = parse_total(raw_total)
        total_source = TOTAL_FIELD
        if total == 0:
            try:
                total = host.link_speed_bps(self.options.layout.paths, interface)
            except KoordletError as exc:
                raise ConfigError(f"{TOTAL_FIELD}: 0 means the link speed of {interface}, which it does not "
                                  f"report ({exc}); set the node's bandwidth") from None
            total_source = f"link speed of {interface}"
        rates = class_rates(policy, {"ls": _network(strategy, "ls_class"), "be": _network(strategy, "be_class")},
                            total)
        ips, own, conflicts = self._pod_ips(policy == POLICY_TC)
        notes.extend(conflicts)
        plan = NetQoSPlan(
            interface=interface,
            total_bps=total,
            system=_bandwidth(rates["system"], ips["system"]),
            ls=_bandwidth(rates["ls"], ips["ls"]),
            be=_bandwidth(rates["be"], ips["be"]),
            pods=pod_bandwidths(own, total, notes),
        )
        numbers: dict[str, Any] = {
            "interface": interface, "interface_source": interface_source,
            "total_bps": total, "total_source": total_source,
            **{name: {**r.numbers(), "configured": r.configured, "source_ips": len(ips[name])}
               for name, r in rates.items()},
        }
        return plan, numbers

    def _pod_ips(self, per_pod: bool) -> tuple[dict[str, list[str]], list[OwnBandwidth], list[str]]:
        """Addresses of running pods by class, and (``per_pod``: the tc policy) the pods with a bandwidth of
        their own, whose addresses stay out of the classes.  Two pods claiming one address (an IP reused
        before the old pod's status caught up) keep it in the higher-priority class: throttling a
        latency-sensitive pod as BE is the worse mistake."""
        owner: dict[str, tuple[str, str]] = {}
        notes: list[str] = []
        own: list[OwnBandwidth] = []
        for meta in sorted(self.options.informer.pods(), key=lambda m: m.pod.key):
            pod = meta.pod
            cls = _CLASS_OF.get(meta.qos)
            if cls is None or pod.terminated:
                continue
            limit = own_limit(pod, notes) if per_pod else None
            if limit is not None:
                own.append(OwnBandwidth(pod, cls, limit))
                continue
            for ip in pod.ips:
                seen = owner.get(ip)
                if seen is None:
                    owner[ip] = (cls, pod.key)
                elif seen[0] != cls:
                    keep = min((seen, (cls, pod.key)), key=lambda s: _RANK[s[0]])
                    notes.append(f"{ip} claimed by {seen[1]} ({seen[0]}) and {pod.key} ({cls}); kept in {keep[0]}")
                    owner[ip] = keep
        ips: dict[str, list[str]] = {"system": [], "ls": [], "be": []}
        for ip, (cls, _) in owner.items():
            ips[cls].append(ip)
        return ips, own, notes

    def _backend(self, policy: str) -> NetQoS:
        backend = self._backends.get(policy)
        if backend is None:
            assert self.options.netqos is not None
            backend = self._backends[policy] = self.options.netqos(policy)
        return backend

    # ------------------------------------------------------------------------------------------ decisions

    def _switch_off(self, now: float) -> Decision:
        policy = self._in_force_policy
        if policy is None:
            return self._decide(Action.NONE, "network QoS off; nothing in force", at=now)
        try:
            self._backend(policy).clear()
        except Exception as exc:
            return self._rejected(now, f"cannot clear the {policy} backend: {exc}", Action.ERROR)
        self._in_force, self._in_force_policy, self._last_error = None, None, None
        log.info("network QoS off: backend cleared", extra={"policy": policy})
        return self._decide(Action.CLEAR, f"network QoS off: {policy} shaping removed", {"policy": policy}, at=now)

    def _rejected(self, now: float, error: str, action: Action = Action.INVALID, reason: str | None = None
                  ) -> Decision:
        if error != self._last_error:
            self._last_error = error
            log.warning("network QoS not changed", extra={"error": error})
        kept = self._in_force
        numbers: dict[str, Any] = {"error": error, "in_force_policy": self._in_force_policy,
                                   "in_force_interface": kept.interface if kept else None,
                                   "in_force_total_bps": kept.total_bps if kept else None}
        tail = f"; {self._in_force_policy} plan on {kept.interface} stays" if kept else ""
        return self._decide(action, f"network QoS not changed: {error}{tail}", numbers, reason=reason, at=now)


def _bandwidth(rates: ClassRates, ips: list[str]) -> ClassBandwidth:
    return ClassBandwidth(rates.egress_rate_bps, rates.egress_ceil_bps, rates.ingress_rate_bps,
                          rates.ingress_ceil_bps, tuple(sorted(ips)))


def _summary(verb: str, plan: NetQoSPlan, policy: str, notes: list[str]) -> str:
    return "; ".join([f"{verb} {policy} on {plan_text(plan)}", *notes])
