"""How big the image is and what takes the space: its layers (from the OCI archive) and its largest directories,
Python distributions and Debian packages (from the image's filesystem, mounted in the private buildah storage)."""

from __future__ import annotations

import contextlib
import gzip
import json
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.image.build import Buildah, tree_bytes

MB = 1024 * 1024
RUNTIME_BUDGET_BYTES = 250 * MB


@dataclass(frozen=True)
class Layer:
    digest: str
    stored_bytes: int
    uncompressed_bytes: int
    created_by: str


def _blob(archive: tarfile.TarFile, digest: str) -> bytes:
    member = archive.extractfile(f"blobs/{digest.replace(':', '/')}")
    if member is None:
        raise FileNotFoundError(f"blob {digest} missing from the OCI archive")
    return member.read()


def _uncompressed_size(archive: tarfile.TarFile, digest: str, media_type: str) -> int:
    member = archive.extractfile(f"blobs/{digest.replace(':', '/')}")
    assert member is not None
    stream = gzip.GzipFile(fileobj=member) if media_type.endswith("gzip") else member
    total = 0
    while chunk := stream.read(1 << 20):
        total += len(chunk)
    return total


def archive_layers(path: Path) -> list[Layer]:
    """The image's layers, bottom first, with the build step that made each (the config's history)."""
    with tarfile.open(path) as archive:
        index = json.loads(archive.extractfile("index.json").read())  # type: ignore[union-attr]
        manifest = json.loads(_blob(archive, index["manifests"][0]["digest"]))
        config = json.loads(_blob(archive, manifest["config"]["digest"]))
        steps = [h.get("created_by", "") for h in config.get("history", []) if not h.get("empty_layer")]
        layers = []
        for position, entry in enumerate(manifest["layers"]):
            created_by = steps[position] if position < len(steps) else ""
            layers.append(Layer(
                entry["digest"], entry["size"], _uncompressed_size(archive, entry["digest"], entry["mediaType"]),
                " ".join(created_by.split())[:100],
            ))
    return layers


@contextlib.contextmanager
def mounted(buildah: Buildah, image: str) -> Iterator[Path]:
    container = buildah("from", "--pull=never", image, step="buildah from (size report)", capture=True).strip()
    try:
        yield Path(buildah("mount", container, step="buildah mount", capture=True).strip())
    finally:
        subprocess.run(["buildah", *buildah.global_flags, "rm", container], capture_output=True, check=False)


def largest_directories(root: Path, parents: list[str], count: int) -> list[tuple[int, str]]:
    sizes = []
    for parent in parents:
        base = root / parent.lstrip("/")
        if base.is_dir() and not base.is_symlink():
            for child in base.iterdir():
                if child.is_dir() and not child.is_symlink():
                    sizes.append((tree_bytes(child), "/" + str(child.relative_to(root))))
    return sorted(sizes, reverse=True)[:count]


def largest_packages(root: Path, count: int) -> list[tuple[int, str]]:
    """Debian packages by Installed-Size (KiB, as dpkg records it), read from the image's dpkg database."""
    result = subprocess.run(
        ["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${Installed-Size} ${Package}\n"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    rows = []
    for line in result.stdout.splitlines():
        size, _, name = line.partition(" ")
        if size.isdigit():
            rows.append((int(size) * 1024, name))
    return sorted(rows, reverse=True)[:count]


def report(buildah: Buildah, image: str, archive: Path) -> tuple[str, int]:
    """A text report and the image's uncompressed size (the sum of its layers' uncompressed sizes)."""
    layers = archive_layers(archive)
    total = sum(layer.uncompressed_bytes for layer in layers)
    lines = [f"image {image}: {total / MB:.1f} MB uncompressed in {len(layers)} layers "
             f"(budget {RUNTIME_BUDGET_BYTES / MB:.0f} MB); archive {archive.stat().st_size / MB:.1f} MB"]
    lines += [f"  layer {layer.uncompressed_bytes / MB:7.1f} MB  {layer.created_by or layer.digest[:19]}"
              for layer in layers]
    with mounted(buildah, image) as root:
        site = sorted((root / "opt/koordlet/lib").glob("python3*/site-packages"))
        lines.append("largest directories:")
        parents = ["/usr/lib", "/usr/share", "/usr", "/var/lib", "/opt/koordlet"]
        for size, name in largest_directories(root, parents, 12):
            lines.append(f"  {size / MB:7.1f} MB  {name}")
        if site:
            lines.append("largest Python packages in the venv:")
            for size, name in largest_directories(root, ["/" + str(site[0].relative_to(root))], 12):
                lines.append(f"  {size / MB:7.1f} MB  {name}")
        lines.append("largest Debian packages (dpkg Installed-Size):")
        for size, name in largest_packages(root, 12):
            lines.append(f"  {size / MB:7.1f} MB  {name}")
    return "\n".join(lines), total
