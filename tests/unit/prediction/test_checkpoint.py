"""Prediction models survive a restart through their checkpoints (upstream ``checkpoint.go`` and
``predict_server.go``: ``doCheckpoint``, ``restoreModels``), and bad or stale files do not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from koordlet.metriccache import names
from koordlet.metriccache.cache import labels_of
from koordlet.prediction import PeakPredictServer, PredictionConfig
from koordlet.prediction.checkpoint import FileCheckpointer
from koordlet.prediction.histogram import DecayingHistogram, ExponentialOptions
from koordlet.prediction.server import NODE_UID, node_item_uid
from tests.unit.prediction.test_prod_reclaimable import START, Pods, ScriptedCache, pod

G = 1 << 30


def trained(tmp_path: Path, rounds: int = 30) -> tuple[PeakPredictServer, ScriptedCache, Pods]:
    series = {
        (names.NODE_CPU_USAGE, labels_of()): lambda t: 6.0 + ((t - START) // 60) % 4,
        (names.NODE_MEMORY_USAGE, labels_of()): lambda t: 20.0 * G,
        (names.POD_CPU_USAGE, labels_of(pod="web")): lambda t: 1.0 + 0.5 * (((t - START) // 60) % 3),
        (names.POD_MEMORY_USAGE, labels_of(pod="web")): lambda t: 4.0 * G + ((t - START) // 60) * 2**24,
    }
    cache = ScriptedCache(series)
    informer = Pods([pod("web", "LS", 9500, 8000, 12 * G, created=START - 86400 * 3)])
    server = PeakPredictServer(cache, informer, tmp_path / "prediction-checkpoints")
    for i in range(rounds):
        server.run_once(START + i * 60)
    return server, cache, informer


def test_models_are_restored_after_a_restart(tmp_path: Path) -> None:
    first, cache, informer = trained(tmp_path)
    uids = first.model_uids()
    assert {"web", NODE_UID, node_item_uid("sys"), node_item_uid("koord-prod"), node_item_uid("")} <= set(uids)
    # Every model was saved at the first round; a save is due again 10 minutes after the last.
    now = START + 29 * 60 + 600
    assert first.checkpoint(now) == len(uids)
    assert first.checkpoint(now + 60) == 0, "nothing is due a minute later"

    restarted = PeakPredictServer(cache, informer, tmp_path / "prediction-checkpoints")
    assert restarted.restore() == len(uids)
    for uid in uids:
        assert restarted.prediction(uid) == first.prediction(uid), uid
    # The restored model goes on learning from where the old process stopped.
    restarted.run_once(now + 120)
    assert restarted.prediction("web")["p95"][0] > 0


def test_checkpoint_file_is_upstreams_model_checkpoint(tmp_path: Path) -> None:
    trained(tmp_path, rounds=3)
    data = json.loads((tmp_path / "prediction-checkpoints" / "web").read_text())
    assert set(data) == {"UID", "CPU", "Memory", "LastUpdated"}
    assert data["UID"] == "web"
    assert set(data["CPU"]) == {"referenceTimestamp", "bucketWeights", "totalWeight"}
    assert max(data["CPU"]["bucketWeights"].values()) == 10000  # MaxCheckpointWeight
    assert data["CPU"]["referenceTimestamp"].endswith("Z")


def test_unknown_corrupt_and_temporary_files_are_removed(tmp_path: Path) -> None:
    _, cache, informer = trained(tmp_path, rounds=2)
    directory = tmp_path / "prediction-checkpoints"
    (directory / "gone-pod").write_text((directory / "web").read_text())
    (directory / "__node__").write_text("{not json")
    (directory / ".web.koordlet-1234.tmp").write_text("half")
    restarted = PeakPredictServer(cache, informer, directory)
    restarted.restore()
    assert not (directory / "gone-pod").exists(), "a pod no longer on the node"
    assert not (directory / "__node__").exists(), "a file that does not decode"
    assert not (directory / ".web.koordlet-1234.tmp").exists()
    assert "web" in restarted.model_uids()
    assert NODE_UID not in restarted.model_uids()


def test_a_checkpoint_outside_the_buckets_is_refused_and_the_model_starts_empty(tmp_path: Path) -> None:
    _, cache, informer = trained(tmp_path, rounds=2)
    path = tmp_path / "prediction-checkpoints" / "web"
    data = json.loads(path.read_text())
    data["CPU"]["bucketWeights"] = {"100000": 5}
    path.write_text(json.dumps(data))
    restarted = PeakPredictServer(cache, informer, path.parent)
    restarted.restore()
    assert "web" not in restarted.model_uids()
    assert not path.exists()


def test_expired_models_are_dropped_with_their_checkpoint(tmp_path: Path) -> None:
    server, _, informer = trained(tmp_path, rounds=2)
    informer.metas.clear()  # the pod left the node
    server.run_once(START + 31 * 60 + 60)
    assert "web" not in server.model_uids()
    assert not (tmp_path / "prediction-checkpoints" / "web").exists()


def test_histogram_checkpoint_round_trip_keeps_percentiles() -> None:
    options = ExponentialOptions(1024, 0.025, 1.05, 0.0001)
    hist = DecayingHistogram(options, PredictionConfig().cpu_half_life_seconds)
    for i in range(200):
        hist.add_sample(0.1 * (i % 37), 1.0, START + 60 * i)
    copy = DecayingHistogram(options, PredictionConfig().cpu_half_life_seconds)
    copy.load(hist.save())
    for p in (0.5, 0.9, 0.95, 0.98, 1.0):
        assert copy.percentile(p) == hist.percentile(p)
    assert copy.reference == hist.reference


@pytest.mark.parametrize("bad", [
    "[1, 2]", '{"CPU": {"bucketWeights": {"x": 1}}}', '{"CPU": {"bucketWeights": {"1": -1}}}',
    '{"CPU": [], "Memory": 3}', '{"CPU": {"totalWeight": NaN}}', '{"CPU": {"referenceTimestamp": "nonsense"}}',
])
def test_a_bad_checkpoint_names_what_is_wrong_and_is_removed(bad: str, tmp_path: Path) -> None:
    _, cache, informer = trained(tmp_path, rounds=1)
    path = tmp_path / "prediction-checkpoints" / "web"
    path.write_text(bad)
    restored = FileCheckpointer(path.parent).restore()
    (web,) = [c for c in restored if c.uid == "web"]
    assert web.error and "checkpoint web" in web.error
    PeakPredictServer(cache, informer, path.parent).restore()
    assert not path.exists()
