"""The resctrl strategy's per-pod groups keep CLOSIDs for the class groups and the tenant reserve: annotated
pods beyond that stay in their class group (pod annotations are tenant input)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from koordlet.config.gates import RDT_RESCTRL as GATE
from koordlet.config.gates import RESCTRL as POD_GATE
from koordlet.isolation.resctrl.annotation import ANNOTATION_RESCTRL
from koordlet.isolation.resctrl.host import read_num_closids
from koordlet.qosmanager.plugins.resctrl.strategy import ResctrlQoS
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.resctrl.test_strategy import make_env, slo


def closids(host: FakeHost, l3: int, mb: int | None = None) -> None:
    info = Path(host.paths.resctrl_root) / "info"
    for resource, count in (("L3", l3), ("MB", mb)):
        if count is not None:
            (info / resource).mkdir(parents=True, exist_ok=True)
            (info / resource / "num_closids").write_text(f"{count}\n")


def test_read_num_closids_takes_the_smallest(fake_host: FakeHost, tmp_path: Path) -> None:
    make_env(fake_host, tmp_path)
    closids(fake_host, 16, 8)
    assert read_num_closids(fake_host.paths.resctrl_root) == 8
    assert read_num_closids(str(tmp_path / "nowhere")) is None


def test_pod_groups_stop_short_of_the_class_groups_and_the_reserve(fake_host: FakeHost, tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    env = make_env(fake_host, tmp_path, gates={GATE: True, POD_GATE: True})
    env.strategy = ResctrlQoS(dataclasses.replace(env.strategy.options, closid_reserve=2))
    closids(fake_host, 8)
    for i in range(6):
        env.pod(f"p{i}", "LSR", [[100 + i]], annotations={ANNOTATION_RESCTRL: "{}"})
    with caplog.at_level(logging.WARNING, logger="koordlet.qosmanager.plugins.resctrl.strategy"):
        decision = env.run(slo(be={"enable": True}))
        again = env.run(slo(be={"enable": True}))
    # 8 CLOSIDs: root, BE (made this round), LSR and LS kept, 2 in reserve -> 2 pod groups.
    groups = env.kernel.groups()
    assert sorted(g for g in groups if g.startswith("koordlet-")) == ["koordlet-uid-p0", "koordlet-uid-p1"]
    assert "BE" in groups
    assert sum("no per-pod resctrl group" in p for p in decision.numbers["problems"]) == 4
    # The refused pods' threads stay where they are (no group of theirs); the made ones hold their pods'.
    assert env.kernel.tasks("koordlet-uid-p0") == [100]
    # Logged once per pod, not every round.
    assert [r.getMessage() for r in caplog.records].count("per-pod resctrl group refused") == 4
    assert sorted(g for g in env.kernel.groups() if g.startswith("koordlet-")) == ["koordlet-uid-p0",
                                                                                  "koordlet-uid-p1"]
    assert sum("no per-pod resctrl group" in p for p in again.numbers["problems"]) == 4
