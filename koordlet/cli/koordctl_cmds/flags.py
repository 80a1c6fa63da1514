"""Flags shared by every ``koordctl`` command that talks to the daemon (``koordctl top`` uses them too)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Final

from koordlet.cli.koordctl_cmds.render import OUTPUT_FORMATS
from koordlet.config.flags import default_state_dir
from koordlet.debugapi import contract

SOCKET_ENV: Final = "KOORDCTL_SOCKET"
"""Environment variable that replaces :data:`contract.DEFAULT_SOCKET` as the ``--socket`` default."""


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", choices=OUTPUT_FORMATS, default="table",
                        help="table for people; json or yaml print the daemon's document as is (default table)")


def add_socket_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--socket", metavar="PATH", default=None,
                        help=f"koordlet's debug socket (default ${SOCKET_ENV}, else {contract.DEFAULT_SOCKET})")


def add_daemon_flags(parser: argparse.ArgumentParser) -> None:
    """``-o/--output`` and ``--socket``; ``koordctl`` resolves ``args.socket`` before running the command."""
    add_output_flag(parser)
    add_socket_flag(parser)


def resolve_socket(given: str | None, environ: Mapping[str, str]) -> str:
    """``--socket`` if given, else ``$KOORDCTL_SOCKET`` if set and not empty, else where a koordlet of this user
    puts it by default (root: the contract's default; another user: under its state directory)."""
    if given or environ.get(SOCKET_ENV):
        return given or environ[SOCKET_ENV]
    euid = os.geteuid()
    return contract.default_socket(euid, str(default_state_dir(euid, environ))) or contract.DEFAULT_SOCKET
