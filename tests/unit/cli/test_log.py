"""koordlet.log: text and JSON line formats, levels, handler replacement."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from koordlet.log import parse_level, setup_logging


def emit(fmt: str, *, level: str = "info") -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    setup_logging(level, fmt, stream)  # type: ignore[arg-type]
    return logging.getLogger("koordlet.test"), stream


def test_text_line_has_timestamp_level_logger_message_and_fields() -> None:
    log, stream = emit("text")
    log.info("host capability", extra={"probe": "psi", "supported": True, "reason": "two words", "n": 3})
    line = stream.getvalue().rstrip("\n")
    assert re.fullmatch(
        r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO koordlet\.test host capability "
        r'probe=psi supported=true reason="two words" n=3',
        line,
    ), line


def test_json_line_is_one_object_with_fields() -> None:
    log, stream = emit("json")
    log.warning("node info", extra={"cpus": [0, 1], "msg_id": None, "level": "field named like a key"})
    (line,) = stream.getvalue().splitlines()
    obj = json.loads(line)
    assert obj["level"] == "warning"
    assert obj["logger"] == "koordlet.test"
    assert obj["msg"] == "node info"
    assert obj["cpus"] == [0, 1]
    assert obj["msg_id"] is None
    assert obj["field.level"] == "field named like a key"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", obj["ts"])


def test_json_carries_exceptions() -> None:
    log, stream = emit("json")
    try:
        raise OSError(2, "gone")
    except OSError:
        log.exception("read failed")
    obj = json.loads(stream.getvalue())
    assert obj["exc"].endswith("FileNotFoundError: [Errno 2] gone")


def test_level_filters_and_setup_replaces_its_own_handler_only() -> None:
    other = logging.NullHandler()
    logging.getLogger().addHandler(other)
    try:
        log, first = emit("text", level="warning")
        log.info("hidden")
        log.warning("shown")
        _, second = emit("json")
        log.info("to the second stream")
        assert "hidden" not in first.getvalue()
        assert "shown" in first.getvalue()
        assert "to the second stream" not in first.getvalue()
        assert json.loads(second.getvalue())["msg"] == "to the second stream"
        assert other in logging.getLogger().handlers
    finally:
        logging.getLogger().removeHandler(other)


@pytest.mark.parametrize(("name", "level"), [("debug", 10), ("INFO", 20), (" Warning ", 30), (40, 40)])
def test_parse_level(name: str | int, level: int) -> None:
    assert parse_level(name) == level


def test_bad_level_and_format_are_rejected() -> None:
    with pytest.raises(ValueError, match="log level 'loud' is not one of debug, info"):
        parse_level("loud")
    with pytest.raises(ValueError, match="log format 'xml'"):
        setup_logging("info", "xml", io.StringIO())  # type: ignore[arg-type]


def test_text_renders_containers_as_compact_json() -> None:
    log, stream = emit("text")
    log.info("node info", extra={"numa_nodes": {"0": "0-1"}, "components": [], "spaced": ["a b"], "none": None})
    assert (
        stream.getvalue()
        .rstrip("\n")
        .endswith(' node info numa_nodes={"0":"0-1"} components=[] spaced="[\\"a b\\"]" none=null')
    )
