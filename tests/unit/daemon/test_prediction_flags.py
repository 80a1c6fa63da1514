"""Upstream's ``--prediction-*`` flags (``prediction.Config.InitFlags``) reach the predict server the agent builds,
in Go duration syntax, and the defaults are upstream's ``NewDefaultConfig``."""

from __future__ import annotations

import argparse
from pathlib import Path

from koordlet.config import add_flags, flags_from_args, load
from koordlet.prediction import PeakPredictServer, PredictionConfig
from tests.fixtures.fakehost import FakeHost
from tests.unit.daemon.test_gate_wiring import agent_on, component


def test_the_defaults_are_upstreams() -> None:
    flags = load(None).prediction
    assert (flags.cold_start_seconds, flags.safety_margin_percent, flags.memory_half_life_seconds,
            flags.cpu_half_life_seconds, flags.training_interval_seconds, flags.model_expiration_seconds,
            flags.checkpoint_interval_seconds, flags.checkpoint_max_per_step) == (
        24 * 3600, 10, 24 * 3600, 12 * 3600, 60, 30 * 60, 10 * 60, 12)


def test_the_flags_parse_go_durations() -> None:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = parser.parse_args(["--prediction-safety-margin-percent", "25", "--prediction-cpu-histogram-decay-halflife",
                              "6h", "--prediction-cold-start-duration", "90m",
                              "--prediction-checkpoint-filepath", "/var/lib/ckpt"])
    flags = load(None, flags_from_args(args)).prediction
    assert (flags.safety_margin_percent, flags.cpu_half_life_seconds, flags.cold_start_seconds,
            flags.checkpoint_filepath) == (25, 6 * 3600, 90 * 60, "/var/lib/ckpt")


def test_the_agent_builds_the_predict_server_from_them(fake_host: FakeHost, tmp_path: Path) -> None:
    agent = agent_on(fake_host, tmp_path, {}, prediction={
        "safetyMarginPercent": 30, "cpuHalfLifeSeconds": "3h", "checkpointFilepath": str(tmp_path / "ckpt")})
    server = component(agent, PeakPredictServer)
    assert server.config == PredictionConfig(safety_margin_percent=30, cpu_half_life_seconds=3 * 3600)
    assert server.checkpoint_dir == tmp_path / "ckpt"
