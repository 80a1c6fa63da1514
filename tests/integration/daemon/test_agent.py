"""The assembled agent on this host: history survives a restart; kubelet trouble keeps the last pods."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from koordlet import native
from koordlet.config import load
from koordlet.daemon.agent import build_agent, kubelet_observer
from koordlet.metriccache import names
from koordlet.metriccache.cache import CacheSettings, MetricCache
from koordlet.metrics import KoordletMetrics
from koordlet.statesinformer.kubelet import KubeletClient
from koordlet.statesinformer.podsource import KubeletPodSource
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from tests.fixtures.agentrun import running
from tests.fixtures.fakekubelet import Fault, make_pod
from tests.fixtures.isolation import private_settings, write_config


def build(tmp_path: Path) -> Any:
    # A kube parent of its own that does not exist: no pods, and none of the host's.
    config_file = write_config(tmp_path / "koordlet.yaml", private_settings(
        tmp_path, f"koordlet-test-{os.getpid()}-absent", standalone=True, discoverKubepods=False,
        runtimeHooks={"enableServer": False, "enableNri": False}))
    return build_agent(load(config_file), tmp_path / "state", read_node_info(HostPaths(), native))


def collect_for(agent: Any, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        agent.advisor.run_once(force=True)
        time.sleep(0.25)


def test_ten_minute_aggregates_span_a_restart(tmp_path: Path) -> None:
    with running(build(tmp_path)) as first:
        collect_for(first, 2.0)
    # the stop flushed what is new to disk
    restarted_at = time.time()
    with running(build(tmp_path)) as second:
        collect_for(second, 1.5)
        cache: MetricCache = second.cache
        aggregate = cache.aggregate(names.NODE_CPU_USAGE, (), 600)
        times, _ = cache.window(names.NODE_CPU_USAGE, (), restarted_at - 600, time.time())
    before = [t for t in times if t < restarted_at]
    after = [t for t in times if t >= restarted_at]
    assert len(before) >= 4 and len(after) >= 3, (len(before), len(after))
    assert aggregate is not None and aggregate.count == len(times)


class NoPods:
    def pods(self) -> tuple[()]:
        return ()


def test_kubelet_garbage_errors_and_timeouts_keep_the_pods(fake_kubelet: Any, tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    cache = MetricCache(CacheSettings(path=tmp_path / "metrics.db"), time.time)
    metrics = KoordletMetrics(node_name="node-1", cache=cache, pods=NoPods(), process_metrics=False)
    received: list[list[Any]] = []
    client = KubeletClient(fake_kubelet.options(timeout_seconds=0.3), observe=kubelet_observer(metrics))
    source = KubeletPodSource(client, 3600, received.append)
    fake_kubelet.set_pods([make_pod("web"), make_pod("batch", qos_class="BestEffort")])
    assert source.sync_once()
    good = source.pods()
    fake_kubelet.fail_next(1, Fault.GARBAGE)
    fake_kubelet.fail_next(1, Fault.HTTP_500)
    fake_kubelet.fail_next(1, Fault.DELAY, delay_seconds=1.0)
    with caplog.at_level(logging.INFO, logger="koordlet.statesinformer.podsource"):
        for _ in range(3):
            assert not source.sync_once()
            assert source.pods() == good
        fake_kubelet.set_pods([make_pod("web")])
        assert source.sync_once()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert len(received) == 2 and len(received[-1]) == 1
    text = generate_latest(metrics.internal).decode()  # type: ignore[arg-type]
    for reason in ("decode", "status", "transport"):
        assert f'koordlet_kubelet_request_failures_total{{path="/pods/",reason="{reason}"}} 1.0' in text, text
    assert 'koordlet_kubelet_request_duration_seconds_count{code="500",path="/pods/",verb="get"} 1.0' in text
