"""Structured logging for every koordlet process: logfmt-like text or JSON lines, on stderr.

Callers log a short constant message and put the variable parts in ``extra``::

    log.info("host capability", extra={"probe": "psi", "supported": True, "reason": "..."})

Every ``extra`` key becomes a field: ``key=value`` after the message in text, a member of the object in
JSON.  Keeping messages constant makes lines greppable and lets log pipelines index the fields.
Under systemd, stderr goes to the journal; in a DaemonSet, to the container log.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal, TextIO

LogFormat = Literal["text", "json"]

FORMATS: Final[tuple[LogFormat, ...]] = ("text", "json")
LEVELS: Final[tuple[str, ...]] = ("debug", "info", "warning", "error", "critical")
_HANDLER_NAME: Final = "koordlet"

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is a field.
_BLANK_RECORD: Final = logging.LogRecord("", logging.INFO, "", 0, "", None, None)
_RECORD_ATTRS: Final = frozenset(vars(_BLANK_RECORD)) | {"message", "asctime", "taskName"}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record carries (its ``extra=`` keys), in insertion order."""
    return {key: value for key, value in vars(record).items() if key not in _RECORD_ATTRS}


def _timestamp(record: logging.LogRecord) -> str:
    when = datetime.fromtimestamp(record.created, tz=UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _text_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Mapping | list | tuple):
        # Compact JSON is already unambiguous unless a string inside it holds whitespace.
        text = json.dumps(value, default=str, separators=(",", ":"))
        return text if not any(ch.isspace() for ch in text) else json.dumps(text)
    text = str(value)
    if text and not any(ch.isspace() or ch in '"=\\' for ch in text):
        return text
    return json.dumps(text)


class TextFormatter(logging.Formatter):
    """``2026-01-02T03:04:05.678Z INFO koordlet.cli message key=value key2="two words"``."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.name, record.getMessage()]
        parts.extend(f"{key}={_text_value(value)}" for key, value in record_fields(record).items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``msg``, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        obj: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record_fields(record).items():
            # A field named like a standard key must not overwrite it.
            obj[key if key not in obj else f"field.{key}"] = value
        if record.exc_info:
            obj["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            obj["stack"] = self.formatStack(record.stack_info)
        return json.dumps(obj, default=str, ensure_ascii=False, separators=(",", ":"))


def parse_level(level: str | int) -> int:
    """A logging level from a name (any case) or number; ``ValueError`` names the accepted values."""
    if isinstance(level, int):
        return level
    name = level.strip().lower()
    if name not in LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LEVELS)}")
    return int(logging.getLevelName(name.upper()))


def setup_logging(level: str | int = "info", fmt: LogFormat = "text", stream: TextIO | None = None) -> None:
    """Route all logging (root logger and Python warnings) to one stream handler in ``fmt``.

    Replaces the handler an earlier call installed (and only that one: handlers others attached, such
    as a test runner's capture, stay), so calling it again does not duplicate lines.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    handler.set_name(_HANDLER_NAME)
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == _HANDLER_NAME:
            root.removeHandler(old)
            old.close()
    root.addHandler(handler)
    root.setLevel(parse_level(level))
    logging.captureWarnings(True)
