"""Every log call carries a constant message and puts its values in ``extra`` fields.

A constant message is what log searches, alerts and the JSON formatter's ``msg`` key rely on: the same
event reads the same on every node, and its values stay separate, typed fields (``koordlet.log``'s JSON
formatter writes each ``extra`` key as its own field).  ``log.warning("write of %s failed", path)`` or an
f-string mixes the two, so this test reads the source (AST, nothing imported) of ``koordlet`` and
``runtimeproxy`` and refuses, in any call on a logger:

- a message that is not a plain string constant (an f-string, ``"..." % x``, ``"...".format(x)``, ``+``);
- positional arguments after the message (``%s`` style formatting).

Logger calls are ``<logger>.debug/info/warning/error/exception/critical(message, ...)`` and
``<logger>.log(level, message, ...)`` where ``<logger>`` is one of :data:`LOGGER_NAMES`, bare or as an
attribute (``self._log``).  :class:`koordlet.streaklog.Streak` logs for its callers, so its calls follow the
same rule: ``<streak>.fail(kind, message, ...)`` and ``<streak>.ok(message, ...)``, where the message may also
be a name or attribute holding a constant chosen elsewhere (the write ledger's configured messages).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED_TREES = ("koordlet", "runtimeproxy")
GENERATED = ("koordlet/apis/proto",)
"""Generated protocol stubs: not ours to edit."""

LOGGER_NAMES = frozenset({"log", "logger", "LOG", "_log", "_logger", "logging"})
LEVEL_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
FORWARDERS = frozenset({"koordlet/streaklog.py"})
"""Modules that log a message their caller chose (the caller's call is checked instead)."""


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.problem}"


def _receiver_name(func: ast.Attribute) -> str | None:
    value = func.value
    if isinstance(value, ast.Name):
        return value.id
    if isinstance(value, ast.Attribute):
        return value.attr
    return None


def _message_position(call: ast.Call) -> tuple[int, bool] | None:
    """Where the message is among the positional arguments of a log call, and whether a name or
    attribute may stand for it; None when the call is not a log call."""
    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    receiver = _receiver_name(func)
    if receiver in LOGGER_NAMES:
        if func.attr in LEVEL_METHODS:
            return 0, False
        if func.attr == "log":
            return 1, False
        return None
    if func.attr == "fail" and len(call.args) >= 2:
        return 1, True
    if func.attr == "ok" and receiver is not None and ("streak" in receiver.lower() or _is_streak_call(call)):
        return 0, True
    return None


def _is_streak_call(call: ast.Call) -> bool:
    """``self._failed.ok(...)``, ``slot.errors.ok(...)``: any ``.ok`` with a string or message-like argument
    or the Streak keywords (``level``, ``extra``)."""
    if any(k.arg in {"level", "extra"} for k in call.keywords):
        return True
    return bool(call.args) and isinstance(call.args[0], (ast.Constant, ast.JoinedStr, ast.BinOp))


def _describe(node: ast.expr) -> str | None:
    """Why ``node`` is not a constant message (None when it is one)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return None
    if isinstance(node, ast.JoinedStr):
        return "f-string message"
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return "%-formatted message"
    if isinstance(node, ast.BinOp):
        return "message built with an operator"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return ".format() message"
    return "message is not a string constant"


def violations_in(source: str, path: str) -> Iterator[Violation]:
    tree = ast.parse(source, filename=path)
    forwarder = path in FORWARDERS
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        position = _message_position(node)
        if position is None:
            continue
        index, names_allowed = position
        if len(node.args) <= index:
            if not any(k.arg == "msg" for k in node.keywords):
                yield Violation(path, node.lineno, "log call without a message")
            continue
        message = node.args[index]
        names_allowed = names_allowed or forwarder
        problem = None if names_allowed and isinstance(message, (ast.Name, ast.Attribute)) else _describe(message)
        if problem is not None:
            yield Violation(path, node.lineno, problem)
        if node.args[index + 1 :]:
            yield Violation(path, node.lineno, "positional arguments after the message (put values in extra=)")


def tree_sources(root: Path) -> Iterator[tuple[str, str]]:
    for top in SCANNED_TREES:
        for file in sorted((root / top).rglob("*.py")):
            rel = file.relative_to(root).as_posix()
            if rel.startswith(GENERATED):
                continue
            yield rel, file.read_text(encoding="utf-8")


def test_log_calls_use_constant_messages_and_fields() -> None:
    files = list(tree_sources(REPO_ROOT))
    # A scan that finds nothing (moved tree, wrong root) must not pass silently.
    assert any(path == "koordlet/log.py" for path, _ in files)
    found = [v for path, source in files for v in violations_in(source, path)]
    assert not found, "log calls with formatted messages:\n" + "\n".join(map(str, found))


# ---------------------------------------------------------------------------------------------- the checker


@pytest.mark.parametrize(
    "source",
    [
        'log.info("pod added", extra={"pod": key})\n',
        'self._log.warning("write failed", extra={"path": p}, exc_info=True)\n',
        'logger.exception("request failed")\n',
        'log.log(logging.INFO, "tick")\n',
        'streak.fail(kind, "collector failed", level=logging.ERROR, extra={"c": name})\n',
        'streak.ok(self._recovery_message, extra={"path": p})\n',
        'self._failed.ok("evictions no longer failing", extra=fields)\n',
        'parser.error(f"bad flag {flag}")\n',  # argparse, not a logger
        'result.ok()\n',
    ],
)
def test_checker_accepts(source: str) -> None:
    assert list(violations_in(source, "koordlet/x.py")) == []


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ('log.info("pod %s added", key)\n', "positional arguments after the message"),
        ('log.info(f"pod {key} added")\n', "f-string message"),
        ('log.warning("pod %s" % key)\n', "%-formatted message"),
        ('log.error("pod {}".format(key))\n', ".format() message"),
        ('log.debug("debug API: " + text)\n', "message built with an operator"),
        ('self._log.info(message)\n', "message is not a string constant"),
        ('log.log(logging.INFO, "pod %s", key)\n', "positional arguments after the message"),
        ('streak.fail(kind, "store %s failed", path)\n', "positional arguments after the message"),
        ('slot.errors.ok("strategy %s runs again", name)\n', "positional arguments after the message"),
        ('streak.ok(f"store {path} works again")\n', "f-string message"),
    ],
)
def test_checker_refuses(source: str, problem: str) -> None:
    found = list(violations_in(source, "koordlet/x.py"))
    assert found and any(problem in v.problem for v in found), found


def test_forwarder_may_pass_its_callers_message() -> None:
    source = "self._log.log(level, message, extra=fields)\n"
    assert list(violations_in(source, "koordlet/streaklog.py")) == []
    assert list(violations_in(source, "koordlet/other.py"))
