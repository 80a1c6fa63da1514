"""One side of an A/B benchmark (:mod:`tests.bench.ab`): builds the rig, says ``"ready"``, then answers each
``measure`` line on stdin with one JSON list of samples on stdout, until ``close``.

    python -m tests.bench.abworker tests.bench.bench_qosmanager:QoSRig '{"pods": 500}'
"""

from __future__ import annotations

import importlib
import json
import sys


def main(argv: list[str]) -> int:
    module_name, _, class_name = argv[0].partition(":")
    rig = getattr(importlib.import_module(module_name), class_name)(**json.loads(argv[1]))
    out = sys.stdout
    sys.stdout = sys.stderr  # the rig's prints must not corrupt the protocol
    try:
        out.write(json.dumps("ready") + "\n")
        out.flush()
        for line in sys.stdin:
            command = line.strip()
            if command == "measure":
                out.write(json.dumps(rig.measure()) + "\n")
                out.flush()
            elif command == "close":
                break
    finally:
        rig.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
