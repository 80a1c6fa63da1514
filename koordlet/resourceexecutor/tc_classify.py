"""Egress classification of the ``tc`` backend: ipsets of pod addresses and iptables ``CLASSIFY`` rules.

Mangle ``POSTROUTING -o <iface> -j <prefix>netqos``; that chain holds
``-m set --match-set <prefix>{system,ls,be}_class src -j CLASSIFY --set-class 1:N``.  CLASSIFY sets
``skb->priority``, which HTB honours before any filter (net/sched/sch_htb.c ``htb_classify``), and what no
set claims falls to the default class, SYSTEM.  Never fwmark: the kernels this runs on may lack the ``fw``
classifier, and u32 ignores mark matches.  ipsets are refilled through ``ipset swap`` (atomic), so the rule
never sees a half-filled set.
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial

from koordlet.errors import KoordletError, Unsupported
from koordlet.resourceexecutor.netqos import CLASS_NAMES, ClassBandwidth, NetQoSPlan
from koordlet.resourceexecutor.tc_netlink import ROOT_HANDLE, CommandFailed
from koordlet.resourceexecutor.tc_steps import Runner, Steps

CLASS_MINOR = {"system": 2, "ls": 3, "be": 4}
CLASS_PRIO = {"system": 1, "ls": 2, "be": 3}
"""HTB prio of each network class's class (and of the per-pod classes under it)."""
ETH_P_ALL, ETH_P_IP, ETH_P_IPV6 = 0x0003, 0x0800, 0x86DD


@dataclass(frozen=True)
class Family:
    """What differs between IPv4 and IPv6."""

    name: str
    ipset_family: str
    iptables: str
    ethertype: int
    filter_prio: int
    dst_offset: int
    set_suffix: str

    def owns(self, ip: str) -> bool:
        return ipaddress.ip_address(ip).version == (4 if self.name == "ipv4" else 6)

    def dst_keys(self, ip: str) -> tuple[tuple[int, int, int], ...]:
        """u32 (mask, value, offset) keys matching this destination address exactly."""
        packed = ipaddress.ip_address(ip).packed
        return tuple(
            (0xFFFFFFFF, int.from_bytes(packed[i:i + 4], "big"), self.dst_offset + i) for i in range(0, len(packed), 4)
        )


IPV4 = Family("ipv4", "inet", "iptables", ETH_P_IP, 10, 16, "")
IPV6 = Family("ipv6", "inet6", "ip6tables", ETH_P_IPV6, 11, 24, "6")
FAMILIES = (IPV4, IPV6)


class Classifiers:
    """The ipsets (``<prefix><class>_class[6]``) and the iptables chain (``<prefix>netqos``) of one backend;
    only objects with these names are ever changed or removed."""

    def __init__(self, prefix: str, run: Runner) -> None:
        self.prefix = prefix
        self.chain = f"{prefix}netqos"
        self._run = run

    def set_name(self, cls: str, family: Family) -> str:
        return f"{self.prefix}{cls}_class{family.set_suffix}"

    def _tmp_set(self, name: str) -> str:
        return f"{name}-tmp"

    def _owned_sets(self) -> list[str]:
        names = [self.set_name(c, f) for f in FAMILIES for c in CLASS_NAMES]
        return names + [self._tmp_set(n) for n in names]

    def read_sets(self) -> dict[str, tuple[str, frozenset[str]]]:
        present = set(self._run(["ipset", "list", "-n"], None).split())
        sets = {}
        for name in self._owned_sets():
            if name not in present:
                continue
            family, members = "", set()
            for line in self._run(["ipset", "save", name], None).splitlines():
                words = line.split()
                if words[:2] == ["create", name] and "family" in words:
                    family = words[words.index("family") + 1]
                elif words[:2] == ["add", name] and len(words) >= 3:
                    members.add(str(ipaddress.ip_address(words[2])))
            sets[name] = (family, frozenset(members))
        return sets

    def read_rules(self) -> dict[str, list[str]]:
        rules = {}
        for family in FAMILIES:
            try:
                lines = self._ipt(family, "-S").splitlines()
            except Unsupported:
                lines = []
            rules[family.iptables] = [
                ln for ln in lines if ln.startswith(("-A POSTROUTING ", f"-N {self.chain}", f"-A {self.chain} "))
                and (not ln.startswith("-A POSTROUTING ") or self.is_jump(ln))
            ]
        return rules

    def is_jump(self, line: str) -> bool:
        return line.startswith("-A POSTROUTING ") and line.split()[-2:] == ["-j", self.chain]

    def clear(self, attempt: Callable[[str, Callable[[], object]], None]) -> None:
        """Removes the jumps, the chain and the ipsets; ``attempt(what, action)`` runs each removal."""
        rules = self.read_rules()
        for family in FAMILIES:
            for line in rules.get(family.iptables, []):
                if self.is_jump(line):
                    args = shlex.split(line)[1:]
                    attempt(f"{family.iptables} delete jump", partial(self._ipt, family, "-D", *args))
            if any(line.startswith(f"-N {self.chain}") for line in rules.get(family.iptables, [])):
                attempt(f"{family.iptables} flush {self.chain}", partial(self._ipt, family, "-F", self.chain))
                attempt(f"{family.iptables} delete {self.chain}", partial(self._ipt, family, "-X", self.chain))
        present = set(self._run(["ipset", "list", "-n"], None).split())
        for name in self._owned_sets():
            if name in present:
                attempt(f"destroy ipset {name}", partial(self._ipset, "destroy", name))

    def apply(self, steps: Steps, plan: NetQoSPlan, sets: dict[str, tuple[str, frozenset[str]]],
              rules: dict[str, list[str]]) -> None:
        """Makes the sets and rules classify ``plan``'s addresses (IPv6 ones only when it has any)."""
        needs_v6 = any(not IPV4.owns(ip) for _, cls in plan.classes() for ip in cls.source_ips)
        for family in FAMILIES:
            if family is IPV6 and not needs_v6:
                self._remove_family(steps, family, sets, rules)
                continue
            for name, cls in plan.classes():
                self._ensure_set(steps, self.set_name(name, family), family, _members(cls, family), sets)
            self._ensure_rules(steps, family, plan.interface, rules.get(family.iptables, []))

    def _ensure_set(self, steps: Steps, name: str, family: Family, members: frozenset[str],
                    sets: dict[str, tuple[str, frozenset[str]]]) -> None:
        old = sets.get(name)
        if old is not None and old[0] != family.ipset_family:
            raise CommandFailed(f"{steps.where}: ipset {name} has family {old[0]}, expected {family.ipset_family}")
        if old is None:
            steps.run(f"create ipset {name} ({len(members)} address(es))",
                      lambda: self._restore(_fill(name, family, members)),
                      lambda: self._ipset("destroy", name))
        elif old[1] != members:
            tmp = self._tmp_set(name)
            if tmp in sets:
                self._ipset("destroy", tmp)
            steps.run(f"refill ipset {name} ({len(members)} address(es))",
                      lambda: self._swap(name, tmp, family, members), lambda: self._swap(name, tmp, family, old[1]))

    def _swap(self, name: str, tmp: str, family: Family, members: frozenset[str]) -> None:
        # ipset swap exchanges the sets atomically, so the iptables rule never sees a half-filled set.
        try:
            self._restore(_fill(tmp, family, members) + f"swap {tmp} {name}\ndestroy {tmp}\n")
        except KoordletError:
            with suppress(KoordletError):
                self._ipset("destroy", tmp)
            raise

    def _ensure_rules(self, steps: Steps, family: Family, iface: str, lines: list[str]) -> None:
        if f"-N {self.chain}" not in lines:
            steps.run(f"{family.iptables} create chain {self.chain}", lambda: self._ipt(family, "-N", self.chain),
                      lambda: self._ipt(family, "-X", self.chain))
        want = [
            f"-A {self.chain} -m set --match-set {self.set_name(name, family)} src "
            f"-j CLASSIFY --set-class {ROOT_HANDLE >> 16:04x}:{CLASS_MINOR[name]:04x}"
            for name in CLASS_NAMES
        ]
        jump = f"-A POSTROUTING -o {iface} -j {self.chain}"
        for line in [*want, jump]:
            if line not in lines:
                args = shlex.split(line)[1:]
                steps.run(f"{family.iptables} {line}", partial(self._ipt, family, "-A", *args),
                          partial(self._ipt, family, "-D", *args))
        for line in lines:
            if line.startswith("-A ") and line not in want and line != jump:
                args = shlex.split(line)[1:]
                steps.run(f"{family.iptables} delete {line}", partial(self._ipt, family, "-D", *args),
                          partial(self._ipt, family, "-A", *args))

    def _remove_family(self, steps: Steps, family: Family, sets: dict[str, tuple[str, frozenset[str]]],
                       rules: dict[str, list[str]]) -> None:
        lines = rules.get(family.iptables, [])
        for line in lines:
            if self.is_jump(line):
                args = shlex.split(line)[1:]
                steps.run(f"{family.iptables} delete {line}", partial(self._ipt, family, "-D", *args))
        if f"-N {self.chain}" in lines:
            steps.run(f"{family.iptables} flush chain {self.chain}", lambda: self._ipt(family, "-F", self.chain))
            steps.run(f"{family.iptables} delete chain {self.chain}", lambda: self._ipt(family, "-X", self.chain))
        for name in CLASS_NAMES:
            set_name = self.set_name(name, family)
            if set_name in sets:
                steps.run(f"destroy ipset {set_name}", partial(self._ipset, "destroy", set_name))

    def _ipt(self, family: Family, *args: str) -> str:
        return self._run([family.iptables, "-w", "-t", "mangle", *args], None)

    def _ipset(self, *args: str) -> str:
        return self._run(["ipset", *args], None)

    def _restore(self, script: str) -> None:
        self._run(["ipset", "restore"], script)


def _members(cls: ClassBandwidth, family: Family) -> frozenset[str]:
    return frozenset(ip for ip in cls.source_ips if family.owns(ip))


def _fill(name: str, family: Family, members: frozenset[str]) -> str:
    lines = [f"create {name} hash:ip family {family.ipset_family}"]
    lines += [f"add {name} {ip}" for ip in sorted(members, key=ipaddress.ip_address)]
    return "\n".join(lines) + "\n"
