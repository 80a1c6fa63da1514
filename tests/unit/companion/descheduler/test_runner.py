"""The Descheduler component: leadership, the one-node guard, node selection, a failing plugin, and the loop's
lifecycle against the fake apiserver."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client

from koordlet.companion.descheduler.cluster import Snapshot
from koordlet.companion.descheduler.config import load_config
from koordlet.companion.descheduler.evictor import Evictor
from koordlet.companion.descheduler.runner import Descheduler
from koordlet.log import record_fields
from tests.fixtures.fakeapiserver import FakeApiServer
from tests.unit.companion.descheduler.scenario import Scenario

CONFIG = """\
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
deschedulingInterval: {interval}
{extra}
profiles:
- name: koord-descheduler
  plugins:
    balance:
      enabled:
      - name: LowNodeLoad
  pluginConfig:
  - name: LowNodeLoad
    args:
      lowThresholds: {{cpu: 20, memory: 30}}
      highThresholds: {{cpu: 50, memory: 60}}
      anomalyCondition: {{consecutiveAbnormalities: 1}}
"""


def config(interval: str = "60s", extra: str = "") -> Any:
    return load_config(CONFIG.format(interval=interval, extra=extra))


def cluster(*, pool_label: bool = False) -> Scenario:
    scenario = Scenario()
    labels = {"pool": "a"} if pool_label else {}
    scenario.node("hot", labels=labels)
    for i in range(6):
        scenario.pod(f"app-{i}", "hot", 2000, 1024)
    scenario.node("cold", labels=labels)
    scenario.node("mid", labels=labels)
    for i in range(4):
        scenario.pod(f"mid-{i}", "mid", 1000, 1024)
    return scenario


@pytest.fixture
def api(kube_api: client.ApiClient) -> client.ApiClient:
    return kube_api



def test_a_follower_does_nothing(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    cluster().seed(fake_apiserver)
    before = len(fake_apiserver.requests)
    report = Descheduler(api, config(), is_leader=lambda: False).run_once()
    assert report.skipped == "not the leader"
    assert len(fake_apiserver.requests) == before


def test_a_round_needs_two_ready_nodes(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    scenario = cluster()
    scenario.seed(fake_apiserver)
    for name in ("cold", "mid"):
        fake_apiserver.modify("nodes", name, lambda n: n["status"]["conditions"][0].update(status="False"))
    report = Descheduler(api, config(), is_leader=lambda: True).run_once()
    assert report.nodes == 1 and "0 or 1 ready nodes" in report.skipped
    assert fake_apiserver.evictions == []


def test_node_selector_limits_the_nodes(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    cluster().seed(fake_apiserver)
    descheduler = Descheduler(api, config(extra="nodeSelector: {matchLabels: {pool: a}}"), is_leader=lambda: True)
    report = descheduler.run_once()
    assert report.nodes == 0 and report.skipped and fake_apiserver.evictions == []
    fake_apiserver.delete("nodes", "hot")
    cluster(pool_label=True).seed(fake_apiserver)
    report = descheduler.run_once()
    # The default evictor (MigrationController) moves at most two pods per node.
    assert report.nodes == 3 and len(report.evicted) == 2
    assert len(fake_apiserver.evictions) == 2


def test_a_failing_plugin_ends_the_round_and_the_loop_goes_on(fake_apiserver: FakeApiServer, api: client.ApiClient,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    cluster().seed(fake_apiserver)
    descheduler = Descheduler(api, config(interval="10ms"), is_leader=lambda: True, dry_run=True)
    calls: list[int] = []
    third = threading.Event()

    def balance(snap: Snapshot, evictor: Evictor) -> None:
        calls.append(len(snap.nodes))
        if len(calls) >= 3:
            third.set()
        raise RuntimeError("plugin bug")

    monkeypatch.setattr(descheduler.plugins()[0], "balance", balance)
    report = descheduler.run_once()
    assert report.errors == ["koord-descheduler/LowNodeLoad: RuntimeError: plugin bug"]
    failed = [r for r in caplog.records if r.getMessage() == "descheduler: plugin failed, the round ends"]
    assert [record_fields(r) for r in failed] == [{"profile": "koord-descheduler", "plugin": "LowNodeLoad"}]
    assert failed[0].exc_info is not None

    descheduler.start()
    try:
        assert descheduler.running
        assert third.wait(30.0), "the loop stopped after a failing round"
    finally:
        descheduler.stop()
    assert not descheduler.running


def test_zero_interval_runs_one_round(fake_apiserver: FakeApiServer, api: client.ApiClient) -> None:
    cluster().seed(fake_apiserver)
    leader = threading.Event()
    descheduler = Descheduler(api, config(interval="0s"), is_leader=leader.is_set)
    descheduler.start()
    try:
        leader.set()
        thread = descheduler._thread
        assert thread is not None
        thread.join(30.0)
        assert not descheduler.running
        assert descheduler.last_report is not None and len(descheduler.last_report.evicted) == 2
    finally:
        descheduler.stop()
