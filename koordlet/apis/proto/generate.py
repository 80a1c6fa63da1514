"""Regenerate the committed protocol stubs from ``proto/``, or check that they are current.

Usage::

    python -m koordlet.apis.proto.generate           # rewrite the stubs in place
    python -m koordlet.apis.proto.generate --check   # exit 1 and print a diff if they drift

Needs ``grpcio-tools`` at the version matching the installed ``grpcio`` (the generated ``*_pb2_grpc``
modules refuse to load under an older grpcio). Runs from a source checkout: ``proto/`` is not installed.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PACKAGE = "koordlet.apis.proto"
PROTO_ROOT = PACKAGE_DIR.parents[2] / "proto"

# Proto source (relative to PROTO_ROOT) -> whether it gets a gRPC service module. The NRI services run
# over ttrpc, where gRPC stubs would only mislead. CRI (package runtime.v1) lives under cri/ so that its
# module path cannot collide with koordinator's runtime/v1alpha1.
SOURCES: dict[str, bool] = {
    "runtime/v1alpha1/api.proto": True,
    "cri/runtime/v1/api.proto": True,
    "nri/v1alpha1/api.proto": False,
    "ttrpc/request.proto": False,
    "companion/v1/companion.proto": True,
}

# Files in PACKAGE_DIR that are written by hand, not generated.
HAND_WRITTEN = frozenset({"__init__.py", "generate.py"})

_TOP_LEVEL = sorted({source.split("/")[0] for source in SOURCES})
_IMPORT = re.compile(rf"^(\s*)(from|import) ({'|'.join(_TOP_LEVEL)})(\.|\s)", re.MULTILINE)


def _absolute_imports(text: str) -> str:
    return _IMPORT.sub(lambda m: f"{m[1]}{m[2]} {PACKAGE}.{m[3]}{m[4]}", text)


def generate(out_dir: Path) -> None:
    """Write every generated file (stubs and sub-package ``__init__.py``) under ``out_dir``."""
    # grpcio-tools is a development dependency only (the gen-check env); it ships no type information.
    import grpc_tools  # type: ignore[import-untyped]
    from grpc_tools import protoc

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    for source, with_grpc in SOURCES.items():
        args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{include}"]
        args += [f"--python_out={out_dir}", f"--pyi_out={out_dir}"]
        if with_grpc:
            args.append(f"--grpc_python_out={out_dir}")
        args.append(str(PROTO_ROOT / source))
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {source}")
    for path in sorted(out_dir.rglob("*")):
        if path.suffix in (".py", ".pyi"):
            path.write_text(_absolute_imports(path.read_text()))
    for directory in sorted({p.parent for p in out_dir.rglob("*.py")}):
        while directory != out_dir:
            (directory / "__init__.py").touch()
            directory = directory.parent


def _generated_files(root: Path) -> dict[str, Path]:
    return {
        path.relative_to(root).as_posix(): path
        for path in sorted(root.rglob("*"))
        if path.is_file()
        and path.suffix in (".py", ".pyi")
        and "__pycache__" not in path.parts
        and path.relative_to(root).as_posix() not in HAND_WRITTEN
    }


def diff(generated: Path, committed: Path) -> list[str]:
    """Unified diff lines between a fresh generation and the committed stubs (empty when equal)."""
    fresh, current = _generated_files(generated), _generated_files(committed)
    lines: list[str] = []
    for name in sorted(fresh.keys() | current.keys()):
        if name not in fresh:
            lines.append(f"stale: committed/{name} is not generated from proto/\n")
        elif name not in current:
            lines.append(f"missing: generated/{name} is not committed\n")
        a = current[name].read_text().splitlines(keepends=True) if name in current else []
        b = fresh[name].read_text().splitlines(keepends=True) if name in fresh else []
        lines.extend(difflib.unified_diff(a, b, f"committed/{name}", f"generated/{name}"))
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {PACKAGE}.generate", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare with the committed stubs; exit 1 on drift")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="koordlet-proto-") as tmp:
        out_dir = Path(tmp)
        generate(out_dir)
        drift = diff(out_dir, PACKAGE_DIR)
        if args.check:
            if drift:
                sys.stdout.writelines(drift)
                hint = f"run `python -m {PACKAGE}.generate`"
                print(f"\ngenerated stubs differ from {PROTO_ROOT}: {hint}", file=sys.stderr)
                return 1
            return 0
        for path in _generated_files(PACKAGE_DIR).values():
            path.unlink()
        for name, path in _generated_files(out_dir).items():
            target = PACKAGE_DIR / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
