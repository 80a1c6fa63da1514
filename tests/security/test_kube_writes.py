"""Abuse of the companion's single writer: objects kube-apiserver refuses for good must not stall the others.

The companion writes every node's NodeSLO, NodeMetric and batch resources from one thread.  At HEAD a write that
failed for any reason put the node back in the queue and paused the whole thread for a second, forever: a
NodeMetric that an admission policy (403) or the CRD schema (422) refuses - a node whose reports are too large,
say, or an operator's policy - cost one second of every turn, so twenty such nodes held every other node's
writes back by twenty seconds, and each was retried every turn without end.  Now such an object backs off alone
(koordlet/companion/kube/backoff.py ``WriteBackoff``): the others are written at once and the refused one costs no
request until its pause ends.

The reports enter through the callback the companion's gRPC server calls (``Companion._on_metric``): who may
report for which node is the identity suite's subject, the writer is this one's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from koordlet.apis.nodemetric import NodeMetricInfo, NodeMetricStatus, ResourceMap
from koordlet.companion.app import Companion
from tests.fixtures.fakeapiserver import FakeApiServer, Fault, RecordedRequest
from tests.fixtures.waiting import wait_until
from tests.security.rig import leading_companion

REFUSED = [f"bad-{i:02d}" for i in range(20)]
"""Sorted before ``good``: the writer takes its queue in name order, so at HEAD each of them paused it first."""
GOOD = "good"
HEAD_PAUSE_SECONDS = 1.0
"""What one failed write paused the whole writer for at HEAD (koordlet/companion/app.py ``_writer``)."""
DEADLINE_SECONDS = len(REFUSED) * HEAD_PAUSE_SECONDS
"""HEAD needed at least this long in pauses alone before ``good``'s turn, on top of the requests themselves;
now only the requests stand before it (a few seconds for the 80-odd requests on a loaded two-core machine)."""


def status(update_time: float) -> NodeMetricStatus:
    return NodeMetricStatus(update_time=update_time,
                            node_metric=NodeMetricInfo(node_usage=ResourceMap(2_000, 4 * 10**9)))


def writes_of(request: RecordedRequest, names: set[str]) -> bool:
    # A create names the object in its body, an update in its path.
    named = request.name or ((request.body or {}).get("metadata") or {}).get("name")
    return request.resource == "nodemetrics" and request.verb in ("create", "update") and named in names


def metric_time(cluster: FakeApiServer, node: str) -> str:
    return str(((cluster.get("nodemetrics", node) or {}).get("status") or {}).get("updateTime") or "")


@pytest.fixture
def companion(fake_apiserver: FakeApiServer) -> Iterator[Companion]:
    with leading_companion(fake_apiserver, [*REFUSED, GOOD]) as instance:
        yield instance


def test_refused_nodemetrics_do_not_stall_another_nodes_writes(
    fake_apiserver: FakeApiServer, companion: Companion, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    # Half refused by an admission policy, half by the schema; every write of theirs, for the whole test.
    for index, name in enumerate(REFUSED):
        fake_apiserver.fail_next(1000, Fault.STATUS, status=403 if index % 2 else 422,
                                 when=lambda r, name=name: writes_of(r, {name}))
    wait_until("the companion's node watch", lambda: all(companion.controller.spec_for(n) for n in [*REFUSED, GOOD]))

    rounds = 2
    started_at = time.monotonic()
    for round_ in range(rounds):
        now = time.time()
        for node in [*REFUSED, GOOD]:
            companion._on_metric(node, status(now))
        wanted = status(now).to_json()["updateTime"]
        started = time.monotonic()
        wait_until(f"round {round_}: {GOOD}'s NodeMetric", lambda w=wanted: metric_time(fake_apiserver, GOOD) == w,
                   timeout=DEADLINE_SECONDS)
        print(f"round {round_}: {GOOD} written {time.monotonic() - started:.2f} s after the reports")
    # A refused object is tried once per report or when its pause ends (2 s, then 4, 8...), never once per writer
    # turn as at HEAD; and its refusals are logged once, not at every try.
    elapsed = time.monotonic() - started_at
    pauses_over = sum(1 for k in range(1, 12) if 2.0 * (2**k - 1) <= elapsed)
    for name in REFUSED:
        attempts = sum(1 for r in fake_apiserver.requests if writes_of(r, {name}))
        assert 1 <= attempts <= rounds + pauses_over, (name, attempts, elapsed)
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING
                    and name in (r.__dict__.get("object"), r.__dict__.get("node"))]
        assert len(warnings) == 1, (name, [(w.getMessage(), w.__dict__) for w in warnings])
    assert all(fake_apiserver.get("nodemetrics", n) is None for n in REFUSED)


def test_a_refused_object_is_written_once_the_cluster_accepts_it(
    fake_apiserver: FakeApiServer, companion: Companion
) -> None:
    # The operator fixes the cause (the policy, the CRD): the object is written at its next try, without a restart.
    name = REFUSED[0]
    fake_apiserver.fail_next(1, Fault.STATUS, status=422, when=lambda r: writes_of(r, {name}))
    wait_until("the companion's node watch", lambda: companion.controller.spec_for(name))
    writer: Any = companion._metric_writer
    companion._on_metric(name, status(time.time()))
    wait_until("the refusal", lambda: writer.backoff.retry_in(name) > 0)
    assert fake_apiserver.get("nodemetrics", name) is None
    retry_in = writer.backoff.retry_in(name)
    wait_until("the pause to end", lambda: writer.backoff.retry_in(name) == 0, timeout=retry_in + 5)
    later = status(time.time() + 1)
    companion._on_metric(name, later)
    wait_until("the write after the pause",
               lambda: metric_time(fake_apiserver, name) == later.to_json()["updateTime"])
