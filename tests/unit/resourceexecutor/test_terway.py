"""The terway-qos backend on tmp_path: the exact ``global_bps_config`` lines (bytes per second, Koordinator's
key order) and ``pod.json`` array the agent parses, atomic replacement, and clear() removing only what it
wrote."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
from pathlib import Path

import pytest

from koordlet.errors import ConfigError, KoordletError
from koordlet.resourceexecutor import terway
from koordlet.resourceexecutor.netqos import ClassBandwidth, NetQoSPlan
from koordlet.resourceexecutor.terway import NODE_FILE, POD_FILE, TerwayNetQoS, node_config
from koordlet.statesinformer.framework import PodMeta
from koordlet.system import atomicfile
from tests.unit.qosmanager.fakes import make_pod

M = 1_000_000
G = 1000 * M


def plan(ls: ClassBandwidth, be: ClassBandwidth, total: int = G, system: ClassBandwidth | None = None) -> NetQoSPlan:
    system = system or ClassBandwidth(0, total, 0, total)
    return NetQoSPlan(interface="eth0", total_bps=total, system=system, ls=ls, be=be)


KOORDINATOR_CASE = plan(  # Koordinator terwayqos_test.go TestParseNetQoS: total 100M, LS 10M, BE 20M
    ls=ClassBandwidth(10 * M, 10 * M, 10 * M, 10 * M), be=ClassBandwidth(20 * M, 20 * M, 20 * M, 20 * M),
    total=100 * M)
BE_ONLY = plan(ls=ClassBandwidth(0, G, 0, G, ("10.0.0.2", "10.0.0.3", "fd00::3")),
               be=ClassBandwidth(100 * M, 500 * M, 0, G, ("10.0.0.4",)),
               system=ClassBandwidth(900 * M, G, G, G, ("10.0.0.5",)))


@pytest.mark.parametrize(("the_plan", "text"), [
    (KOORDINATOR_CASE,
     "hw_tx_bps_max 12500000\nhw_rx_bps_max 12500000\n"
     "offline_l1_tx_bps_min 1250000\noffline_l1_tx_bps_max 1250000\n"
     "offline_l1_rx_bps_min 1250000\noffline_l1_rx_bps_max 1250000\n"
     "offline_l2_tx_bps_min 2500000\noffline_l2_tx_bps_max 2500000\n"
     "offline_l2_rx_bps_min 2500000\noffline_l2_rx_bps_max 2500000\n"),
    (BE_ONLY,  # LS off (0, total) and BE ingress unlimited are written as Koordinator's 0 lines
     "hw_tx_bps_max 125000000\nhw_rx_bps_max 125000000\n"
     "offline_l1_tx_bps_min 0\noffline_l1_tx_bps_max 0\noffline_l1_rx_bps_min 0\noffline_l1_rx_bps_max 0\n"
     "offline_l2_tx_bps_min 12500000\noffline_l2_tx_bps_max 62500000\n"
     "offline_l2_rx_bps_min 0\noffline_l2_rx_bps_max 0\n"),
    (plan(ls=ClassBandwidth(300 * M, G, 0, G), be=ClassBandwidth(0, 7, 0, G), total=G),  # 7 bits -> 0 bytes
     "hw_tx_bps_max 125000000\nhw_rx_bps_max 125000000\n"
     "offline_l1_tx_bps_min 37500000\noffline_l1_tx_bps_max 125000000\n"
     "offline_l1_rx_bps_min 0\noffline_l1_rx_bps_max 0\n"
     "offline_l2_tx_bps_min 0\noffline_l2_tx_bps_max 0\n"
     "offline_l2_rx_bps_min 0\noffline_l2_rx_bps_max 0\n"),
])
def test_node_file_exact_text(tmp_path: Path, the_plan: NetQoSPlan, text: str) -> None:
    TerwayNetQoS(str(tmp_path)).apply(the_plan)
    assert (tmp_path / NODE_FILE).read_text() == text
    assert not (tmp_path / POD_FILE).exists()  # no pod source: pod.json is left alone


def test_ceilings_the_agent_would_reject_write_nothing(tmp_path: Path) -> None:
    backend = TerwayNetQoS(str(tmp_path))
    backend.apply(BE_ONLY)
    before = (tmp_path / NODE_FILE).read_text()
    bad = plan(ls=ClassBandwidth(0, 600 * M, 0, G), be=ClassBandwidth(0, 500 * M, 0, G))
    with pytest.raises(ConfigError, match=r"^netqos.\{ls,be\}.egress_ceil_bps: the Terway QoS agent needs the LS and "
                                          r"BE ceilings to fit in the total together, got 75000000 \+ 62500000 > "
                                          r"125000000 bytes/s$"):
        backend.apply(bad)
    assert (tmp_path / NODE_FILE).read_text() == before
    with pytest.raises(ConfigError, match="ingress_ceil_bps"):
        node_config(plan(ls=ClassBandwidth(0, G, 10, 600 * M), be=ClassBandwidth(0, G, 10, 500 * M)))


def pods() -> list[PodMeta]:
    def ips(meta: PodMeta, *addrs: str) -> PodMeta:
        return dataclasses.replace(meta, pod=dataclasses.replace(meta.pod, ips=addrs))
    return [ips(make_pod("web", "LS"), "10.0.0.2"), ips(make_pod("db", "LSR"), "10.0.0.3", "fd00::3"),
            ips(make_pod("batch", "BE"), "10.0.0.4"), ips(make_pod("agent", "SYSTEM"), "10.0.0.5"),
            ips(make_pod("elsewhere", "BE"), "10.9.9.9"), make_pod("hostnet", "BE")]


def test_pod_file_is_the_array_terway_parses(tmp_path: Path) -> None:
    TerwayNetQoS(str(tmp_path), pods=pods).apply(BE_ONLY)
    text = (tmp_path / POD_FILE).read_text()
    assert json.loads(text) == [
        {"podName": "agent", "podNamespace": "default", "podUID": "uid-agent", "prio": 0, "ipv4": "10.0.0.5",
         "ipv6": "", "hostNetwork": False, "cgroupDir": "/sys/fs/cgroup/net_cls/kubepods/burstable/poduid-agent"},
        {"podName": "batch", "podNamespace": "default", "podUID": "uid-batch", "prio": 2, "ipv4": "10.0.0.4",
         "ipv6": "", "hostNetwork": False, "cgroupDir": "/sys/fs/cgroup/net_cls/kubepods/besteffort/poduid-batch"},
        {"podName": "db", "podNamespace": "default", "podUID": "uid-db", "prio": 1, "ipv4": "10.0.0.3",
         "ipv6": "fd00::3", "hostNetwork": False, "cgroupDir": "/sys/fs/cgroup/net_cls/kubepods/poduid-db"},
        {"podName": "web", "podNamespace": "default", "podUID": "uid-web", "prio": 1, "ipv4": "10.0.0.2",
         "ipv6": "", "hostNetwork": False, "cgroupDir": "/sys/fs/cgroup/net_cls/kubepods/burstable/poduid-web"},
    ]
    assert text.endswith("}\n]\n")


def test_replace_is_atomic_and_skips_unchanged(tmp_path: Path) -> None:
    backend = TerwayNetQoS(str(tmp_path / "qos"))  # the directory is created
    backend.apply(BE_ONLY)
    node = tmp_path / "qos" / NODE_FILE
    first = os.stat(node)
    backend.apply(BE_ONLY)
    assert os.stat(node).st_ino == first.st_ino  # unchanged: not rewritten (no agent resync)
    backend.apply(KOORDINATOR_CASE)
    assert os.stat(node).st_ino != first.st_ino  # a new file renamed over the old, never written in place
    assert sorted(os.listdir(tmp_path / "qos")) == [NODE_FILE]  # no temporary left
    node.write_text("hw_tx_bps_max 1\n")  # edited behind our back: the next apply repairs it
    backend.apply(KOORDINATOR_CASE)
    assert node.read_text().startswith("hw_tx_bps_max 12500000\n")


def test_failed_rename_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    backend = TerwayNetQoS(str(tmp_path))
    backend.apply(BE_ONLY)
    before = (tmp_path / NODE_FILE).read_text()

    def no_space(src: str, dst: str) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(KoordletError, match=f"write {tmp_path / NODE_FILE}: No space left on device"):
        backend.apply(KOORDINATOR_CASE)
    assert (tmp_path / NODE_FILE).read_text() == before
    assert sorted(os.listdir(tmp_path)) == [NODE_FILE]


def test_clear_removes_only_what_it_wrote(tmp_path: Path) -> None:
    (tmp_path / "node.json").write_text("{}")  # the agent's v2 file, not ours
    backend = TerwayNetQoS(str(tmp_path), pods=pods)
    backend.apply(BE_ONLY)
    assert backend.describe()["written_by_koordlet"] == [NODE_FILE, POD_FILE]
    backend.clear()
    assert sorted(os.listdir(tmp_path)) == ["node.json"]
    backend.clear()  # nothing left: a no-op
    (tmp_path / NODE_FILE).write_text("hw_tx_bps_max 5\n")
    TerwayNetQoS(str(tmp_path)).clear()  # a fresh backend wrote nothing, so removes nothing
    assert sorted(os.listdir(tmp_path)) == [NODE_FILE, "node.json"]


def test_directory_must_be_absolute() -> None:
    with pytest.raises(ConfigError, match="terway_qos_dir: must be an absolute path, got 'var/lib'"):
        TerwayNetQoS("var/lib")


def test_koordinator_release_example_file(tmp_path: Path) -> None:
    # 600M total, LS 50M/100M, BE 10M/200M (bits/s), as the netqos strategy plans the v1.5.0 example
    the_plan = plan(ls=ClassBandwidth(50 * M, 100 * M, 50 * M, 100 * M),
                    be=ClassBandwidth(10 * M, 200 * M, 10 * M, 200 * M), total=600 * M,
                    system=ClassBandwidth(540 * M, 600 * M, 540 * M, 600 * M))
    TerwayNetQoS(str(tmp_path)).apply(the_plan)
    assert (tmp_path / NODE_FILE).read_text() == (
        "hw_tx_bps_max 75000000\nhw_rx_bps_max 75000000\n"
        "offline_l1_tx_bps_min 6250000\noffline_l1_tx_bps_max 12500000\n"
        "offline_l1_rx_bps_min 6250000\noffline_l1_rx_bps_max 12500000\n"
        "offline_l2_tx_bps_min 1250000\noffline_l2_tx_bps_max 25000000\n"
        "offline_l2_rx_bps_min 1250000\noffline_l2_rx_bps_max 25000000\n")


def planted_suffixes(monkeypatch: pytest.MonkeyPatch, *suffixes: str) -> None:
    """The temporary names the backend will try, in order (the real ones are random)."""
    names = iter(suffixes)
    monkeypatch.setattr(atomicfile, "random_suffix", lambda: next(names))


def test_temporary_names_are_unpredictable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    real_open = os.open

    def spy(path: str, flags: int, mode: int = 0o777) -> int:
        if ".tmp" in str(path):
            created.append(str(path))
            assert flags & os.O_EXCL and flags & os.O_NOFOLLOW and flags & os.O_CREAT
        return real_open(path, flags, mode)

    monkeypatch.setattr(terway.os, "open", spy)
    backend = TerwayNetQoS(str(tmp_path))
    backend.apply(BE_ONLY)
    backend.apply(KOORDINATOR_CASE)
    assert len(created) == 2 and created[0] != created[1]
    assert str(os.getpid()) not in created[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == [NODE_FILE]  # no temporary file left


def test_a_planted_symlink_is_never_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qos, victim = tmp_path / "qos", tmp_path / "victim"
    qos.mkdir()
    victim.write_text("precious\n")
    planted = qos / f".{NODE_FILE}.koordlet-guessed.tmp"
    planted.symlink_to(victim)
    planted_suffixes(monkeypatch, "guessed", "fresh")
    TerwayNetQoS(str(qos)).apply(BE_ONLY)
    assert victim.read_text() == "precious\n"
    assert planted.is_symlink()  # skipped, not removed or written through
    assert (qos / NODE_FILE).read_text().startswith("hw_tx_bps_max 125000000\n")


def test_no_free_temporary_name_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / f".{NODE_FILE}.koordlet-taken.tmp").symlink_to(tmp_path / "elsewhere")
    monkeypatch.setattr(atomicfile, "random_suffix", lambda: "taken")
    with pytest.raises(KoordletError, match=f"write .*{NODE_FILE}: File exists"):
        TerwayNetQoS(str(tmp_path)).apply(BE_ONLY)
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / NODE_FILE).exists()
