"""``python -m tests.image``: build the image offline, report its size, run the smoke test in containerd.

The OCI archive's absolute path is the last line printed. ``--no-smoke`` builds and reports only. Exit codes: 0 all
passed; 1 the build, the size budget or a smoke check failed (the message says which).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tests.image import build, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.image", description=__doc__.splitlines()[0])
    parser.add_argument("--no-smoke", action="store_true", help="build and report the size; run nothing")
    parser.add_argument("--cache-dir", type=Path, default=build.CACHE_DIR,
                        help="base tarball and private buildah storage (default %(default)s)")
    parser.add_argument("--archive-dir", type=Path, default=None,
                        help="where the OCI archive goes (default <repo>/.tox/image-archive)")
    args = parser.parse_args(argv)
    try:
        built = build.build_image(cache=args.cache_dir, archive_dir=args.archive_dir)
        text, total = size.report(built.buildah, built.image, built.archive)
        print(text, flush=True)
        if total > size.RUNTIME_BUDGET_BYTES:
            print(f"[image] FAILED: {total / size.MB:.1f} MB is over the {size.RUNTIME_BUDGET_BYTES / size.MB:.0f} MB "
                  "budget for the runtime image", file=sys.stderr)
            return 1
        if not args.no_smoke:
            # Imported here: the smoke test needs the test extras (grpc, pytest) that a build alone does not.
            from tests.image.smoke import SmokeFailed, smoke

            try:
                smoke(built.archive, built.image, built.version)
            except SmokeFailed as failed:
                print(f"[smoke] FAILED: {failed}", file=sys.stderr)
                return 1
    except build.ImageBuildFailed as failed:
        print(f"[image] FAILED: {failed}", file=sys.stderr)
        return 1
    print(f"[image] built in {built.seconds:.0f}s: {built.image}", flush=True)
    print(built.archive)
    return 0


if __name__ == "__main__":
    sys.exit(main())
