"""The persisted NodeSLO (``CompanionNodeSLOSource.persist_path``) under file faults: content cut short or
garbage, a file that cannot be read, writes that fail in a streak and then succeed again.  The companion
is never reached here (its address is a socket that does not exist): only the file matters.  A full disk
(tmpfs) is in tests/integration/test_state_faults.py."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from koordlet.apis.proto.companion.v1 import companion_pb2
from koordlet.statesinformer.companion import CompanionClient
from koordlet.statesinformer.companionslo import PERSIST_FORMAT, CompanionNodeSLOSource
from koordlet.statesinformer.nodeslo import NodeSLOHolder

LOGGER = "koordlet.statesinformer.companionslo"
SPEC = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 61}}
GOOD = json.dumps({"format": PERSIST_FORMAT, "generation": 4, "instance": "i-1", "origin": "file:/etc/slo.yaml",
                   "spec": SPEC}, sort_keys=True).encode() + b"\n"


@pytest.fixture
def client(tmp_path: Path) -> Iterator[CompanionClient]:
    made = CompanionClient(f"unix:{tmp_path / 'absent.sock'}", "token", "node-1")
    yield made
    made.close()


def records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno == level]


def update(generation: int, threshold: int) -> companion_pb2.NodeSLOUpdate:
    spec = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": threshold}}
    return companion_pb2.NodeSLOUpdate(generation=generation, spec_json=json.dumps(spec).encode(),
                                       origin="file:/etc/slo.yaml", instance="i-1")


def test_the_good_copy_these_tests_damage_is_loaded(tmp_path: Path, client: CompanionClient) -> None:
    (tmp_path / "nodeslo.json").write_bytes(GOOD)
    holder = NodeSLOHolder()
    assert CompanionNodeSLOSource(client, holder, tmp_path / "nodeslo.json").load_persisted()
    assert holder.current().origin == "companion:file:/etc/slo.yaml (persisted)"


@pytest.mark.parametrize(("content", "reason"), [
    (b"", "not valid JSON: Expecting value"),
    (GOOD[:len(GOOD) // 2], "not valid JSON"),
    (GOOD[:-3], "not valid JSON"),
    (b"\xff\xfe\x00garbage", "not valid JSON"),
    (b"[1, 2]", "must hold a JSON object, got list"),
    (GOOD.replace(b'"format": 1', b'"format": 2'), "format: expected 1, got 2"),
    (GOOD.replace(b'"generation": 4', b'"generation": "4"'), "generation: must be an integer, got '4'"),
    (json.dumps({"format": PERSIST_FORMAT, "generation": 4, "spec": []}).encode(), "spec: must be an object, got list"),
], ids=["empty", "half", "tail-missing", "binary", "list", "format", "generation", "spec"])
def test_an_unusable_copy_is_dropped_with_one_line_naming_the_file_and_why(
        tmp_path: Path, client: CompanionClient, caplog: pytest.LogCaptureFixture, content: bytes,
        reason: str) -> None:
    path = tmp_path / "nodeslo.json"
    path.write_bytes(content)
    holder = NodeSLOHolder()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not CompanionNodeSLOSource(client, holder, path).load_persisted()
    assert holder.current().origin == "defaults"
    (line,) = records(caplog, logging.WARNING)
    fields = line.__dict__
    assert line.getMessage() == "persisted NodeSLO unusable, dropped until the companion sends one"
    assert fields["path"] == str(path) and reason in fields["error"] and fields["bytes"] == len(content), fields
    assert fields["moved_to"] == f"{path}.bad"
    assert Path(f"{path}.bad").read_bytes() == content and not path.exists()


def test_a_copy_that_cannot_be_read_is_ignored_and_left_alone(
        tmp_path: Path, client: CompanionClient, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "nodeslo.json"
    path.mkdir()
    holder = NodeSLOHolder()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert not CompanionNodeSLOSource(client, holder, path).load_persisted()
    (line,) = records(caplog, logging.WARNING)
    assert line.getMessage() == "persisted NodeSLO unreadable, ignored until the companion sends one"
    assert line.__dict__["path"] == str(path) and line.__dict__["error"] == "Is a directory"
    assert path.is_dir() and holder.current().origin == "defaults"


def test_failing_writes_are_logged_once_per_streak_and_once_when_they_work_again(
        tmp_path: Path, client: CompanionClient, caplog: pytest.LogCaptureFixture) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("a file where the state directory should be")
    path = blocker / "nodeslo.json"
    holder = NodeSLOHolder()
    source = CompanionNodeSLOSource(client, holder, path)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for generation, threshold in ((1, 51), (2, 52), (3, 53)):
            assert source.apply(update(generation, threshold))  # in force although it cannot be persisted
        (warning,) = records(caplog, logging.WARNING)
        assert warning.getMessage().startswith("cannot persist NodeSLO") and warning.__dict__["path"] == str(path)

        blocker.unlink()
        assert source.apply(update(4, 54))
        (info,) = [r for r in records(caplog, logging.INFO) if r.getMessage() == "NodeSLO persisted again"]
        assert info.__dict__["generation"] == 4
        assert len(records(caplog, logging.WARNING)) == 1
    holder_after_restart = NodeSLOHolder()
    assert CompanionNodeSLOSource(client, holder_after_restart, path).load_persisted()
    strategy = holder_after_restart.current().spec.resource_used_threshold_with_be
    assert strategy is not None and strategy.cpu_suppress_threshold_percent == 54
