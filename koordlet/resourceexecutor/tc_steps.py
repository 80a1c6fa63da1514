"""How the ``tc`` backend runs a change: external commands as argv lists (never a shell) and a transaction of
steps, each with its undo, rolled back in reverse when a later step fails so a failed live change leaves
the previous configuration in force."""

from __future__ import annotations

import errno
import logging
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from koordlet.errors import KoordletError, Unsupported
from koordlet.resourceexecutor.tc_netlink import CommandFailed

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_SECONDS = 30.0

Runner = Callable[[Sequence[str], str | None], str]
"""Runs ``argv`` (with optional stdin text) and returns stdout; raises :class:`CommandFailed`."""


def subprocess_runner(netns: str | None = None, timeout: float = COMMAND_TIMEOUT_SECONDS) -> Runner:
    """A :data:`Runner` executing argv lists (never a shell), inside ``netns`` through ``ip netns exec``."""
    prefix = ["ip", "netns", "exec", netns] if netns else []

    def run(argv: Sequence[str], stdin: str | None = None) -> str:
        full = [*prefix, *argv]
        try:
            done = subprocess.run(full, input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        except FileNotFoundError as err:
            raise Unsupported(errno.ENOENT, f"{full[0]} is not installed") from err
        except subprocess.TimeoutExpired as err:
            raise CommandFailed(f"`{shlex.join(full)}` timed out after {timeout:g} s") from err
        if done.returncode != 0:
            raise CommandFailed(f"`{shlex.join(full)}` failed (exit {done.returncode}): {done.stderr.strip()}")
        return done.stdout

    return run


@dataclass
class Steps:
    """The steps of one change on ``where`` (an interface, named in every error)."""

    where: str
    undo: list[tuple[str, Callable[[], object]]] = field(default_factory=list)
    done: list[str] = field(default_factory=list)

    def run(self, what: str, action: Callable[[], object], undo: Callable[[], object] | None = None) -> None:
        """Runs ``action``; when it fails, undoes the earlier steps and raises :class:`CommandFailed`."""
        try:
            action()
        except KoordletError as err:
            undone = self.rollback()
            raise CommandFailed(f"{self.where}: {what}: {err}; rolled back {undone} earlier step(s)") from err
        self.done.append(what)
        if undo is not None:
            self.undo.append((what, undo))

    def rollback(self) -> int:
        """Undoes the steps so far, newest first; returns how many were undone."""
        count = 0
        for what, undo in reversed(self.undo):
            try:
                undo()
                count += 1
            except KoordletError as err:
                log.error("tc netqos step not undone", extra={"where": self.where, "step": what, "error": str(err)})
        self.undo.clear()
        return count
