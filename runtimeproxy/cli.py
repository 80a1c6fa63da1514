"""``koord-runtime-proxy``: command line of the CRI proxy (flags as in Koordinator's koord-runtime-proxy).

The proxy itself is not part of this release: the command accepts Koordinator's flags, answers
``--help`` and ``--version``, and otherwise exits non-zero saying so, rather than pretending to serve.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata

EXIT_NOT_AVAILABLE = 1
DISTRIBUTION = "koordlet"


def version() -> str:
    """The installed distribution's version (the proxy must not import koordlet to learn it)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="koord-runtime-proxy",
        description="CRI proxy between kubelet and the container runtime that calls koordlet's runtime hooks "
        "around the calls that shape resources. Not available in this release.",
    )
    parser.add_argument("--version", action="version", version=f"koord-runtime-proxy {version()}")
    parser.add_argument(
        "--koord-runtimeproxy-endpoint",
        metavar="SOCKET",
        default="/var/run/koord-runtimeproxy/runtimeproxy.sock",
        help="unix socket the proxy serves CRI on; point kubelet's --container-runtime-endpoint here",
    )
    parser.add_argument(
        "--remote-runtime-service-endpoint",
        metavar="SOCKET",
        default="/var/run/containerd/containerd.sock",
        help="the real container runtime's CRI socket",
    )
    parser.add_argument(
        "--backend-runtime-mode",
        choices=("Containerd", "Docker"),
        default="Containerd",
        help="kind of the backend runtime",
    )
    parser.add_argument(
        "--runtime-hook-server-key",
        metavar="KEY",
        default="runtimeproxy.koordinator.sh/skip-hookserver",
        help="pod label/annotation key that makes the proxy skip the hook servers for that pod",
    )
    parser.add_argument(
        "--runtime-hook-server-val",
        metavar="VALUE",
        default="true",
        help="value of --runtime-hook-server-key that skips the hook servers",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    print(
        "koord-runtime-proxy: the CRI proxy is not available in this release; only --help and --version work",
        file=sys.stderr,
    )
    return EXIT_NOT_AVAILABLE


if __name__ == "__main__":
    sys.exit(main())
