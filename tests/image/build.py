"""Build the Containerfile's image without a registry: a Debian base from the host's mirror, buildah, an OCI archive.

Steps (shared/reference/test-host.md, "Container images without a registry"):

1. The base: ``mmdebstrap --variant=minbase --include=python3 <suite>`` from the machine's own apt sources
   (:mod:`tests.image.aptsources`), documentation, manual pages, locales and info excluded, merged-/usr set up by
   mmdebstrap's hook rather than the usrmerge package (which would pull in perl, about 50 MB). The rootfs tarball is
   cached under ``~/.cache/koordlet-image`` keyed by suite, sources, packages and options.
2. The base tarball becomes ``localhost/koordlet-base:<suite>-<key>`` in a private buildah storage (vfs driver,
   ``--root``/``--runroot`` under the cache directory: the host's own container storage is never touched).
3. ``buildah bud --isolation chroot --pull=never --layers --build-arg BASE=<base>`` of the repository's Containerfile,
   tagged ``localhost/koordlet:<version>``; the host's pip settings are lent to the RUN steps
   (:mod:`tests.image.pipconfig`).
4. ``buildah push`` to ``oci-archive:<repo>/.tox/image-archive/koordlet-<version>.oci.tar`` (beside the tox env
   ``image``, not inside it: tox may recreate that directory).

Runs as root (mmdebstrap and buildah's chroot isolation need it); buildah and mmdebstrap (and containerd and runc,
for the smoke test) are installed with apt-get when missing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tests.image import aptsources, pipconfig

REPO = Path(__file__).resolve().parents[2]
CONTAINERFILE = REPO / "Containerfile"
CACHE_DIR = Path(os.environ.get("KOORDLET_IMAGE_CACHE", "~/.cache/koordlet-image")).expanduser()
IMAGE_NAME = "localhost/koordlet"
BASE_NAME = "localhost/koordlet-base"
BASE_PACKAGES = ("python3",)
# command -> Debian package: the build's tools, and the runtime the smoke test imports the image into.
TOOLS = {"buildah": "buildah", "mmdebstrap": "mmdebstrap", "containerd": "containerd", "runc": "runc"}
# dpkg never unpacks these into the base: documentation (but each package's copyright), manual pages, translations
# (but locale.alias, which glibc reads), info pages, lintian overrides. Nothing in the image reads them.
DPKG_OPTIONS = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/lintian/*",
    # glibc's iconv converters (8 MB): Python's codecs are its own and nothing here calls iconv(3).
    "path-exclude=/usr/lib/*/gconv/*",
    "path-include=/usr/lib/*/gconv/gconv-modules*",
)
MERGED_USR_HOOK = Path("/usr/share/mmdebstrap/hooks/merged-usr")
# vfs stores every layer as a full copy; past this size the layer cache is dropped before a build, so repeated
# builds of changing sources cannot fill the disk.
STORAGE_PRUNE_BYTES = 12 * 1024**3


class ImageBuildFailed(RuntimeError):
    """A step of the offline image build failed; the message names the step and the command's output tail."""


def package_version(repo: Path = REPO) -> str:
    """``__version__`` of koordlet/version.py, loaded as a lone file: the koordlet package is never imported."""
    spec = importlib.util.spec_from_file_location("_koordlet_version", repo / "koordlet" / "version.py")
    if spec is None or spec.loader is None:
        raise ImageBuildFailed(f"cannot load {repo / 'koordlet' / 'version.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.__version__)


def log(message: str) -> None:
    print(f"[image] {message}", flush=True)


def run(argv: Sequence[str], step: str, *, capture: bool = False, timeout: float = 3600) -> str:
    """Run one command, its output streamed (or captured and returned); raise naming ``step`` when it fails."""
    log(f"{step}: {' '.join(argv)}")
    result = subprocess.run(
        list(argv),
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        tail = (result.stderr or "")[-3000:] if capture else "(output above)"
        raise ImageBuildFailed(f"{step} failed with exit code {result.returncode}: {' '.join(argv)}\n{tail}")
    return result.stdout or ""


def ensure_tools() -> None:
    """:data:`TOOLS`, installed with apt-get when missing (root only)."""
    missing = [package for command, package in TOOLS.items() if shutil.which(command) is None]
    if not missing:
        return
    if os.geteuid() != 0:
        raise ImageBuildFailed(
            f"{', '.join(missing)} missing and not root: run `apt-get install -y --no-install-recommends "
            f"{' '.join(missing)}` as root, or build with docker/podman from the Containerfile"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], env=env, check=False, timeout=600)
    result = subprocess.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *missing], env=env, check=False, timeout=1200
    )
    if result.returncode != 0 or any(shutil.which(command) is None for command in TOOLS):
        raise ImageBuildFailed(f"apt-get install {' '.join(missing)} failed (exit {result.returncode})")


@dataclass
class Buildah:
    """buildah on a private vfs storage under ``root`` (never the host's default storage)."""

    root: Path
    runroot: Path
    global_flags: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.global_flags = ["--root", str(self.root), "--runroot", str(self.runroot), "--storage-driver", "vfs"]

    def __call__(self, *args: str, step: str, capture: bool = False, timeout: float = 3600) -> str:
        return run(["buildah", *self.global_flags, *args], step, capture=capture, timeout=timeout)

    def has_image(self, name: str) -> bool:
        result = subprocess.run(
            ["buildah", *self.global_flags, "inspect", "--type", "image", name],
            capture_output=True, text=True, timeout=120, check=False,
        )
        return result.returncode == 0


@dataclass(frozen=True)
class BaseRecipe:
    suite: str
    mirrors: tuple[str, ...]
    apt_options: tuple[str, ...]
    packages: tuple[str, ...] = BASE_PACKAGES
    dpkg_options: tuple[str, ...] = DPKG_OPTIONS

    @classmethod
    def from_host(cls) -> BaseRecipe:
        sources = aptsources.host_sources()
        return cls(
            suite=aptsources.release_suite(sources),
            mirrors=tuple(dict.fromkeys(source.one_line() for source in sources)),
            apt_options=tuple(aptsources.forwarded_apt_options()),
        )

    @property
    def key(self) -> str:
        """Changes whenever anything that shapes the base does (suite, mirrors, packages, options)."""
        text = json.dumps([self.suite, self.mirrors, self.apt_options, self.packages, self.dpkg_options, "merged-usr"])
        return f"{self.suite}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    def mmdebstrap_argv(self, target: Path) -> list[str]:
        argv = ["mmdebstrap", "--variant=minbase", f"--include={','.join(self.packages)}"]
        if MERGED_USR_HOOK.is_dir():
            argv.append(f"--hook-dir={MERGED_USR_HOOK}")
        argv += [f"--aptopt={option}" for option in self.apt_options]
        argv += [f"--dpkgopt={option}" for option in self.dpkg_options]
        return [*argv, self.suite, str(target), *self.mirrors]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Serialise builds sharing one cache directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def base_tarball(recipe: BaseRecipe, cache: Path) -> Path:
    """The base's rootfs tarball, made by mmdebstrap once per recipe key."""
    tarball = cache / f"base-{recipe.key}.tar"
    if tarball.is_file():
        log(f"base rootfs cached: {tarball}")
        return tarball
    partial = tarball.with_suffix(".partial.tar")
    run(recipe.mmdebstrap_argv(partial), "mmdebstrap (the Debian base)", timeout=1800)
    partial.rename(tarball)  # only a complete tarball ever has the cached name
    return tarball


def base_image(buildah: Buildah, recipe: BaseRecipe, cache: Path) -> str:
    """``localhost/koordlet-base:<key>`` in the private storage, imported from the tarball once."""
    name = f"{BASE_NAME}:{recipe.key}"
    if buildah.has_image(name):
        log(f"base image cached: {name}")
        return name
    tarball = base_tarball(recipe, cache)
    container = buildah("from", "scratch", step="buildah from scratch", capture=True).strip()
    try:
        buildah("add", container, str(tarball), "/", step="buildah add (base rootfs)")
        buildah(
            "config", "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--env", "LANG=C.UTF-8", "--cmd", "/bin/bash", container, step="buildah config (base)",
        )
        buildah("commit", "--rm", container, name, step="buildah commit (base)")
    except BaseException:
        subprocess.run(["buildah", *buildah.global_flags, "rm", container], capture_output=True, check=False)
        raise
    return name


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files below ``root`` (symlinks not followed)."""
    total = 0
    for directory, _dirs, files in os.walk(root):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(directory, name)).st_size
    return total


@dataclass(frozen=True)
class Built:
    image: str
    version: str
    archive: Path
    buildah: Buildah
    seconds: float


def build_image(repo: Path = REPO, cache: Path = CACHE_DIR, archive_dir: Path | None = None) -> Built:
    """Build the image offline and export it to an OCI archive (an absolute path)."""
    if os.geteuid() != 0:
        raise ImageBuildFailed("the offline image build needs root (mmdebstrap, buildah's chroot isolation)")
    ensure_tools()
    version = package_version(repo)
    image = f"{IMAGE_NAME}:{version}"
    archive = ((archive_dir or repo / ".tox" / "image-archive") / f"koordlet-{version}.oci.tar").resolve()
    buildah = Buildah(cache / "storage", cache / "runroot")
    with locked(cache / "build.lock"), tempfile.TemporaryDirectory(prefix="kimg-") as private:
        started = time.monotonic()
        recipe = BaseRecipe.from_host()
        base = base_image(buildah, recipe, cache)
        log(f"base ready in {time.monotonic() - started:.0f}s: {base}")
        if buildah.root.exists() and tree_bytes(buildah.root) > STORAGE_PRUNE_BYTES:
            buildah("rmi", "--prune", step="prune the layer cache (storage over its bound)")
        volumes = pipconfig.build_volumes(Path(private))
        bud = ["bud", "--isolation", "chroot", "--pull=never", "--layers", "--build-arg", f"BASE={base}"]
        bud += [f"--volume={volume}" for volume in volumes]
        bud += ["-f", str(repo / "Containerfile"), "-t", image, str(repo)]
        building = time.monotonic()
        buildah(*bud, step="buildah bud (the Containerfile)")
        log(f"image built in {time.monotonic() - building:.0f}s: {image}")
        archive.parent.mkdir(parents=True, exist_ok=True)
        archive.unlink(missing_ok=True)
        buildah("push", image, f"oci-archive:{archive}:{image}", step="buildah push (OCI archive)")
        seconds = time.monotonic() - started
        log(f"total {seconds:.0f}s")
    return Built(image, version, archive, buildah, seconds)


if __name__ == "__main__":
    print(build_image().archive)
