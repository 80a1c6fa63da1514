"""TcNetQoS over a recording fake kernel: plan -> the exact tc, ipset and iptables operations; identical
plans are no-ops; live changes touch only what differs; a failing step rolls back; clear() removes only
what carries our names.  No root, no sleeps."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from koordlet.errors import ConfigError, KoordletError
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoSPlan
from koordlet.resourceexecutor.tc import TcNetQoS
from koordlet.resourceexecutor.tc_netlink import CommandFailed, HtbClass, Link, Qdisc, U32Filter, _burst_bytes

MBIT = 1_000_000
TOTAL = 100 * MBIT
ROOT = 0xFFFFFFFF


class FakeKernel:
    """Links, qdiscs, classes and u32 filters in dicts; every mutating call is appended to ``ops``."""

    def __init__(self) -> None:
        self.links: dict[str, Link] = {"eth0": Link(2, "eth0", "", True)}
        self.qdisc_table: dict[int, list[Qdisc]] = {2: [Qdisc("noqueue", 0, ROOT)]}
        self.class_table: dict[int, dict[int, HtbClass]] = {}
        self.filter_table: dict[tuple[int, int], list[U32Filter]] = {}
        self.ops: list[tuple[Any, ...]] = []
        self.fail_on: str | None = None

    def _op(self, *op: Any) -> None:
        self.ops.append(op)
        if self.fail_on is not None and op[0] == self.fail_on:
            raise CommandFailed(f"{op[0]}: Operation not permitted")

    def _name(self, index: int) -> str:
        return next(name for name, link in self.links.items() if link.index == index)

    # Netlink
    def link(self, name: str) -> Link | None:
        return self.links.get(name)

    def default_route_interface(self) -> str | None:
        return "eth0"

    def add_ifb(self, name: str) -> None:
        self._op("add_ifb", name)
        self.links[name] = Link(10, name, "ifb", False)
        self.qdisc_table[10] = [Qdisc("noqueue", 0, ROOT)]

    def set_up(self, index: int) -> None:
        self._op("set_up", self._name(index))
        name = self._name(index)
        self.links[name] = replace(self.links[name], up=True)

    def del_link(self, index: int) -> None:
        name = self._name(index)
        self._op("del_link", name)
        del self.links[name]

    def qdiscs(self, index: int) -> list[Qdisc]:
        return list(self.qdisc_table.get(index, []))

    def add_htb(self, index: int, default_minor: int, replace: bool) -> None:
        self._op("add_htb", self._name(index), default_minor, replace)
        kept = [q for q in self.qdisc_table[index] if q.parent != ROOT]
        self.qdisc_table[index] = [*kept, Qdisc("htb", 0x10000, ROOT)]
        self.class_table[index] = {}

    def add_ingress(self, index: int) -> None:
        self._op("add_ingress", self._name(index))
        self.qdisc_table[index].append(Qdisc("ingress", 0xFFFF0000, 0xFFFFFFF1))

    def del_qdisc(self, index: int, handle: int, parent: int) -> None:
        self._op("del_qdisc", self._name(index), hex(handle))
        self.qdisc_table[index] = [q for q in self.qdisc_table[index] if q.handle != handle]
        if handle == 0x10000:
            self.class_table.pop(index, None)
            self.filter_table.pop((index, handle), None)
            self.qdisc_table[index].append(Qdisc("noqueue", 0, ROOT))
        else:
            self.filter_table.pop((index, handle), None)

    def classes(self, index: int) -> list[HtbClass]:
        return list(self.class_table.get(index, {}).values())

    def put_class(self, index: int, cls: HtbClass, change: bool) -> None:
        self._op("change_class" if change else "add_class", self._name(index), hex(cls.classid), cls.rate_bps,
                 cls.ceil_bps, cls.prio)
        self.class_table[index][cls.classid] = cls

    def del_class(self, index: int, classid: int) -> None:
        self._op("del_class", self._name(index), hex(classid))
        self.class_table[index].pop(classid, None)

    def filters(self, index: int, parent: int) -> list[U32Filter]:
        return list(self.filter_table.get((index, parent), []))

    def add_u32(self, index: int, flt: U32Filter) -> None:
        self._op("add_u32", self._name(index), hex(flt.parent), flt.prio, hex(flt.handle), hex(flt.classid),
                 flt.keys, flt.redirect_ifindex)
        self.filter_table.setdefault((index, flt.parent), []).append(flt)

    def del_filter(self, index: int, flt: U32Filter) -> None:
        self._op("del_filter", self._name(index), hex(flt.parent), flt.prio, hex(flt.handle))
        self.filter_table[(index, flt.parent)].remove(flt)

    def close(self) -> None:
        pass


class FakeTools:
    """ipset and iptables/ip6tables (mangle only) as a :data:`Runner`; mutating argv are recorded."""

    def __init__(self) -> None:
        self.sets: dict[str, tuple[str, list[str]]] = {"cali40all-hosts": ("inet", ["10.0.0.1"])}
        self.rules: dict[str, list[str]] = {"iptables": ["-A POSTROUTING -o eth0 -j KUBE-POSTROUTING"],
                                            "ip6tables": []}
        self.chains: dict[str, list[str]] = {"iptables": ["KUBE-POSTROUTING"], "ip6tables": []}
        self.calls: list[str] = []
        self.fail_on: str | None = None

    def __call__(self, argv: Sequence[str], stdin: str | None = None) -> str:
        text = shlex.join(argv) + (f" <<< {stdin!r}" if stdin else "")
        if argv[:2] not in (["ipset", "list"], ["ipset", "save"]) and "-S" not in argv:
            self.calls.append(text)
        if self.fail_on is not None and self.fail_on in text:
            raise CommandFailed(f"`{shlex.join(argv)}` failed (exit 1): refused")
        if argv[0] == "ipset":
            return self._ipset(list(argv[1:]), stdin)
        return self._ipt(argv[0], list(argv[4:]))

    def _ipset(self, args: list[str], stdin: str | None) -> str:
        if args == ["list", "-n"]:
            return "".join(f"{name}\n" for name in self.sets)
        if args[0] == "save":
            family, members = self.sets[args[1]]
            return f"create {args[1]} hash:ip family {family} hashsize 1024\n" + "".join(
                f"add {args[1]} {ip}\n" for ip in members)
        if args[0] == "destroy":
            if args[1] not in self.sets:
                raise CommandFailed(f"ipset destroy {args[1]}: The set with the given name does not exist")
            del self.sets[args[1]]
            return ""
        assert args == ["restore"] and stdin is not None
        for line in stdin.splitlines():
            words = line.split()
            if words[0] == "create":
                assert words[1] not in self.sets
                self.sets[words[1]] = (words[4], [])
            elif words[0] == "add":
                self.sets[words[1]][1].append(words[2])
            elif words[0] == "swap":
                self.sets[words[1]], self.sets[words[2]] = self.sets[words[2]], self.sets[words[1]]
            elif words[0] == "destroy":
                del self.sets[words[1]]
        return ""

    def _ipt(self, binary: str, args: list[str]) -> str:
        rules, chains = self.rules[binary], self.chains[binary]
        if args == ["-S"]:
            return "".join(f"-N {c}\n" for c in chains) + "".join(f"{r}\n" for r in rules)
        op, rest = args[0], args[1:]
        if op == "-N":
            chains.append(rest[0])
        elif op == "-X":
            chains.remove(rest[0])
        elif op == "-F":
            rules[:] = [r for r in rules if not r.startswith(f"-A {rest[0]} ")]
        elif op == "-A":
            rules.append(shlex.join(["-A", *rest]))
        elif op == "-D":
            rules.remove(shlex.join(["-A", *rest]))
        return ""


def cls(rate: int, ceil: int = TOTAL, ips: tuple[str, ...] = ()) -> ClassBandwidth:
    return ClassBandwidth(rate, ceil, rate // 2, ceil // 2, ips)


def koordinator_plan(**changes: Any) -> NetQoSPlan:
    """Koordinator's shares: SYSTEM 40 %, LS 30 %, BE 30 % of the total, each ceiling the total."""
    fields: dict[str, Any] = {
        "interface": "eth0", "total_bps": TOTAL,
        "system": cls(40 * MBIT), "ls": cls(30 * MBIT, ips=("10.1.0.2",)), "be": cls(30 * MBIT, ips=("10.1.0.3",)),
    }
    fields.update(changes)
    return NetQoSPlan(**fields)


@pytest.fixture
def host() -> tuple[FakeKernel, FakeTools, TcNetQoS]:
    kernel, tools = FakeKernel(), FakeTools()
    return kernel, tools, TcNetQoS("eth0", netlink=lambda: kernel, run=tools)


def dst_keys(ip: str, offset: int = 16) -> tuple[tuple[int, int, int], ...]:
    return ((0xFFFFFFFF, int.from_bytes(bytes(int(o) for o in ip.split(".")), "big"), offset),)


def test_first_apply_builds_the_koordinator_layout(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, tools, backend = host
    backend.apply(koordinator_plan())
    assert kernel.ops == [
        ("add_htb", "eth0", 2, True),
        ("add_class", "eth0", "0x10001", 100 * MBIT, 100 * MBIT, 0),
        ("add_class", "eth0", "0x10002", 40 * MBIT, 100 * MBIT, 1),
        ("add_class", "eth0", "0x10003", 30 * MBIT, 100 * MBIT, 2),
        ("add_class", "eth0", "0x10004", 30 * MBIT, 100 * MBIT, 3),
        ("add_ifb", "koordlet-ifb"),
        ("set_up", "koordlet-ifb"),
        ("add_htb", "koordlet-ifb", 2, False),
        ("add_class", "koordlet-ifb", "0x10001", 100 * MBIT, 100 * MBIT, 0),
        ("add_class", "koordlet-ifb", "0x10002", 20 * MBIT, 50 * MBIT, 1),
        ("add_class", "koordlet-ifb", "0x10003", 15 * MBIT, 50 * MBIT, 2),
        ("add_class", "koordlet-ifb", "0x10004", 15 * MBIT, 50 * MBIT, 3),
        ("add_u32", "koordlet-ifb", "0x10000", 10, "0x80000001", "0x10003", dst_keys("10.1.0.2"), None),
        ("add_u32", "koordlet-ifb", "0x10000", 10, "0x80000002", "0x10004", dst_keys("10.1.0.3"), None),
        ("add_ingress", "eth0"),
        ("add_u32", "eth0", "0xffff0000", 1, "0x80000001", "0x0", ((0, 0, 0),), 10),
    ]
    chain = "koordlet-netqos"
    assert tools.calls == [
        "ipset restore <<< 'create koordlet-system_class hash:ip family inet\\n'",
        "ipset restore <<< 'create koordlet-ls_class hash:ip family inet\\nadd koordlet-ls_class 10.1.0.2\\n'",
        "ipset restore <<< 'create koordlet-be_class hash:ip family inet\\nadd koordlet-be_class 10.1.0.3\\n'",
        f"iptables -w -t mangle -N {chain}",
        f"iptables -w -t mangle -A {chain} -m set --match-set koordlet-system_class src -j CLASSIFY "
        "--set-class 0001:0002",
        f"iptables -w -t mangle -A {chain} -m set --match-set koordlet-ls_class src -j CLASSIFY --set-class 0001:0003",
        f"iptables -w -t mangle -A {chain} -m set --match-set koordlet-be_class src -j CLASSIFY --set-class 0001:0004",
        f"iptables -w -t mangle -A POSTROUTING -o eth0 -j {chain}",
    ]
    assert tools.rules["iptables"][0] == "-A POSTROUTING -o eth0 -j KUBE-POSTROUTING"


def test_the_same_plan_again_changes_nothing(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, tools, backend = host
    backend.apply(koordinator_plan())
    before = backend.describe()
    kernel.ops.clear()
    tools.calls.clear()
    backend.apply(koordinator_plan())
    assert kernel.ops == [] and tools.calls == []
    assert backend.describe() == before
    assert before["ipsets"] == {"koordlet-be_class": ["10.1.0.3"], "koordlet-ls_class": ["10.1.0.2"],
                                "koordlet-system_class": []}
    assert before["ingress"]["filters"] == [  # type: ignore[index]
        {"class": "ls", "dst": "10.1.0.2"}, {"class": "be", "dst": "10.1.0.3"}]
    assert before["egress"]["classes"]["be"] == {  # type: ignore[index]
        "classid": "1:4", "rate_bps": 30 * MBIT, "ceil_bps": 100 * MBIT, "prio": 3}


def test_a_live_change_touches_only_what_differs(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, tools, backend = host
    backend.apply(koordinator_plan())
    kernel.ops.clear()
    tools.calls.clear()
    backend.apply(koordinator_plan(be=cls(30 * MBIT, 50 * MBIT, ips=("10.1.0.4", "10.1.0.3")),
                                   ls=cls(30 * MBIT)))
    assert kernel.ops == [
        ("change_class", "eth0", "0x10004", 30 * MBIT, 50 * MBIT, 3),
        ("change_class", "koordlet-ifb", "0x10004", 15 * MBIT, 25 * MBIT, 3),
        # the new classifier goes in before the stale one leaves
        ("add_u32", "koordlet-ifb", "0x10000", 10, "0x80000003", "0x10004", dst_keys("10.1.0.4"), None),
        ("del_filter", "koordlet-ifb", "0x10000", 10, "0x80000001"),
    ]
    assert tools.calls == [
        "ipset restore <<< 'create koordlet-ls_class-tmp hash:ip family inet\\nswap koordlet-ls_class-tmp "
        "koordlet-ls_class\\ndestroy koordlet-ls_class-tmp\\n'",
        "ipset restore <<< 'create koordlet-be_class-tmp hash:ip family inet\\nadd koordlet-be_class-tmp 10.1.0.3\\n"
        "add koordlet-be_class-tmp 10.1.0.4\\nswap koordlet-be_class-tmp koordlet-be_class\\n"
        "destroy koordlet-be_class-tmp\\n'",
    ]
    assert tools.sets["koordlet-be_class"] == ("inet", ["10.1.0.3", "10.1.0.4"])
    assert tools.sets["koordlet-ls_class"] == ("inet", [])


def test_a_failed_live_change_restores_the_previous_config(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, tools, backend = host
    backend.apply(koordinator_plan())
    before = backend.describe()
    kernel.ops.clear()
    tools.fail_on = "swap koordlet-be_class-tmp"
    with pytest.raises(KoordletError) as caught:
        backend.apply(koordinator_plan(be=cls(20 * MBIT, 50 * MBIT, ips=("10.1.0.9",))))
    message = str(caught.value)
    assert message.startswith("tc netqos on eth0: refill ipset koordlet-be_class (1 address(es)): ")
    assert "refused; rolled back 4 earlier step(s)" in message
    assert kernel.ops[-4:] == [  # undone in reverse order
        ("add_u32", "koordlet-ifb", "0x10000", 10, "0x80000002", "0x10004", dst_keys("10.1.0.3"), None),
        ("del_filter", "koordlet-ifb", "0x10000", 10, "0x80000003"),
        ("change_class", "koordlet-ifb", "0x10004", 15 * MBIT, 50 * MBIT, 3),
        ("change_class", "eth0", "0x10004", 30 * MBIT, 100 * MBIT, 3),
    ]
    tools.fail_on = None
    assert "koordlet-be_class-tmp" not in tools.sets
    assert backend.describe()["egress"] == before["egress"]
    assert backend.describe()["ipsets"] == before["ipsets"]


def test_a_failed_first_apply_leaves_nothing(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, tools, backend = host
    kernel.fail_on = "add_ingress"
    with pytest.raises(KoordletError, match=r"^tc netqos on eth0: add ingress qdisc ffff:: add_ingress: "
                                            r"Operation not permitted; rolled back 13 earlier step\(s\)$"):
        backend.apply(koordinator_plan())
    assert "koordlet-ifb" not in kernel.links
    assert kernel.qdisc_table[2] == [Qdisc("noqueue", 0, ROOT)]
    assert tools.sets == {"cali40all-hosts": ("inet", ["10.0.0.1"])}


def test_clear_removes_only_our_objects(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, tools, backend = host
    backend.apply(koordinator_plan(be=cls(30 * MBIT, ips=("10.1.0.3", "2001:db8::3"))))
    assert tools.sets["koordlet-be_class6"] == ("inet6", ["2001:db8::3"])
    assert kernel.filter_table[(10, 0x10000)][-1] == U32Filter(
        0x10000, 11, 0x86DD, 0x80000003, 0x10004,
        ((0xFFFFFFFF, 0x20010DB8, 24), (0xFFFFFFFF, 0, 28), (0xFFFFFFFF, 0, 32), (0xFFFFFFFF, 3, 36)))
    kernel.filter_table[(2, 0xFFFF0000)].append(U32Filter(0xFFFF0000, 5, 3, 0x80000002, 0, ((0, 0, 0),)))  # not ours
    kernel.ops.clear()
    tools.calls.clear()
    backend.clear()
    assert tools.calls == [
        "iptables -w -t mangle -D POSTROUTING -o eth0 -j koordlet-netqos",
        "iptables -w -t mangle -F koordlet-netqos",
        "iptables -w -t mangle -X koordlet-netqos",
        "ip6tables -w -t mangle -D POSTROUTING -o eth0 -j koordlet-netqos",
        "ip6tables -w -t mangle -F koordlet-netqos",
        "ip6tables -w -t mangle -X koordlet-netqos",
        *(f"ipset destroy koordlet-{c}_class{v}" for v in ("", "6") for c in ("system", "ls", "be")),
    ]
    assert kernel.ops == [
        ("del_filter", "eth0", "0xffff0000", 1, "0x80000001"),  # the ingress qdisc stays: it is shared
        ("del_qdisc", "eth0", "0x10000"),
        ("del_link", "koordlet-ifb"),
    ]
    assert tools.sets == {"cali40all-hosts": ("inet", ["10.0.0.1"])}
    assert tools.rules == {"iptables": ["-A POSTROUTING -o eth0 -j KUBE-POSTROUTING"], "ip6tables": []}
    kernel.ops.clear()
    tools.calls.clear()
    backend.clear()
    assert kernel.ops == [] and tools.calls == []


def test_disabling_ingress_removes_the_ifb(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, _, backend = host
    backend.apply(koordinator_plan())
    kernel.ops.clear()
    backend.apply(koordinator_plan(shape_ingress=False))
    assert kernel.ops == [
        ("del_filter", "eth0", "0xffff0000", 1, "0x80000001"),
        ("del_qdisc", "eth0", "0xffff0000"),
        ("del_link", "koordlet-ifb"),
    ]


def test_a_foreign_root_qdisc_is_not_replaced(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    kernel, tools, backend = host
    kernel.qdisc_table[2] = [Qdisc("tbf", 0x50000, ROOT)]
    with pytest.raises(KoordletError, match="eth0 has root qdisc tbf 5:0 that koordlet did not make"):
        backend.apply(koordinator_plan())
    assert kernel.ops == [] and tools.calls == []


def test_a_missing_interface_is_named(host: tuple[FakeKernel, FakeTools, TcNetQoS]) -> None:
    _, _, backend = host
    with pytest.raises(KoordletError, match=r"^tc netqos on eth9: interface 'eth9' not found$"):
        backend.apply(koordinator_plan(interface="eth9"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prefix": "a" * 17}, "netqos.tc.prefix: 'aaaaaaaaaaaaaaaaa' must be 1-16 characters"),
        ({"prefix": "bad prefix"}, "netqos.tc.prefix: 'bad prefix' must be"),
        ({"prefix": "koordlet-node-"}, "netqos.tc.ifb_name: 'koordlet-node-ifb' is not a valid interface name"),
    ],
)
def test_bad_names_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TcNetQoS("eth0", **kwargs)


def test_clear_without_an_apply_uses_the_default_route_interface() -> None:
    kernel, tools = FakeKernel(), FakeTools()
    TcNetQoS("", netlink=lambda: kernel, run=tools).apply(koordinator_plan())
    fresh = TcNetQoS("", netlink=lambda: kernel, run=tools)
    assert fresh.resolve_interface() == "eth0"
    fresh.clear()
    assert kernel.qdisc_table[2] == [Qdisc("noqueue", 0, ROOT)] and "koordlet-ifb" not in kernel.links


@pytest.mark.parametrize(("bps", "burst"), [(20 * MBIT, 2500 + 1600), (180 * MBIT, 22500 + 1600), (8, 1600)])
def test_burst_is_one_millisecond_plus_an_mtu(bps: int, burst: int) -> None:
    assert _burst_bytes(bps) == burst
