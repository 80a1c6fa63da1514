"""``koord-companion``: command line of the cluster-side controller.

The controller is not part of this release: the command answers ``--help`` and ``--version`` and
otherwise exits non-zero saying so, rather than pretending to run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from koordlet.cli.common import add_version_flag

EXIT_NOT_AVAILABLE = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="koord-companion",
        description="Cluster-side controller for koordlet: NodeSLO from slo-controller-config, batch "
        "resources, load-aware scheduler extender. Not available in this release.",
    )
    add_version_flag(parser, "koord-companion")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    build_parser().parse_args(argv)
    print(
        "koord-companion: the controller is not available in this release; only --help and --version work",
        file=sys.stderr,
    )
    return EXIT_NOT_AVAILABLE


if __name__ == "__main__":
    sys.exit(main())
