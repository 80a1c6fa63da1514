"""The assembled agent's peak prediction on this host: trained from measured usage, checkpointed in the state
dir, restored by the next process, and read by the NodeMetric report as prodReclaimableMetric."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from koordlet.prediction import CHECKPOINT_DIR, PeakPredictServer
from koordlet.prediction.server import NODE_UID
from tests.fixtures.agentrun import running
from tests.integration.daemon.test_agent import build, collect_for


def predict_server(agent: Any) -> PeakPredictServer:
    found = [c for c in agent.components if isinstance(c, PeakPredictServer)]
    assert len(found) == 1, "the daemon runs one predict server"
    return found[0]


def test_prediction_is_checkpointed_and_restored_across_a_restart(tmp_path: Path) -> None:
    with running(build(tmp_path)) as first:
        collect_for(first, 2.0)
        server = predict_server(first)
        server.run_once(time.time())  # a training round now, rather than after the first minute
        trained = server.prediction(NODE_UID)
        assert trained["p95"][0] > 0 and trained["p98"][1] > 0, "the node's measured usage was learnt"
        assert (tmp_path / "state" / CHECKPOINT_DIR / NODE_UID).is_file()
        reporter = next(c for c in first.components if c.name == "nodemetric")
        status = reporter.run_once()
        assert status.prod_reclaimable_metric is not None
        assert "prodReclaimableMetric" in status.to_json()
    with running(build(tmp_path)) as second:
        restored = predict_server(second)
        assert restored.restore() >= 1
        assert restored.prediction(NODE_UID) == trained
