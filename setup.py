"""Build and package koordlet: the Python daemon, its CLIs and the C core compiled through cffi.

Package metadata lives here; pyproject.toml holds only the build-system table and tool settings.
The C core (csrc/) is compiled in cffi's out-of-line API mode into ``koordlet._native``, which only
``koordlet/native/core.py`` imports.
"""

from __future__ import annotations

import ast
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent


def read_version() -> str:
    """Return ``__version__`` from koordlet/version.py without importing the package (no build deps yet)."""
    tree = ast.parse((HERE / "koordlet" / "version.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise RuntimeError("koordlet/version.py does not define __version__")


setup(
    name="koordlet",
    version=read_version(),
    description=(
        "Koordinator-compatible node agent for co-locating latency-sensitive services and "
        "best-effort batch work, in Python around a small C core"
    ),
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Environment :: No Input/Output (Daemon)",
        "Intended Audience :: System Administrators",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: C",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Topic :: System :: Monitoring",
    ],
    python_requires=">=3.11",
    packages=find_packages(include=["koordlet", "koordlet.*", "runtimeproxy", "runtimeproxy.*"]),
    include_package_data=True,
    zip_safe=False,
    cffi_modules=["csrc/build_native.py:ffibuilder"],
    setup_requires=["cffi>=1.16"],
    install_requires=[
        "cffi>=1.16",
        "pyroute2>=0.9.0",
        "psutil>=5.9.5",
        "grpcio>=1.85.1",
        "protobuf>=7.35.1,<8",
        "prometheus-client>=0.20.0",
        "tenacity>=8.2.3",
        "PyYAML>=6.0.1",
        # koord-companion's Kubernetes adapters; the node agent itself never talks to kube-apiserver.
        "kubernetes>=29.0.0",
        # koord-companion's self-signed serving certificate (--tls-secret, koordlet/companion/certs.py).
        "cryptography>=42.0",
        # koord-companion decodes every node's NodeMetric report with it (koordlet/companion/metricdecode.py).
        "msgspec>=0.18",
        # koord-companion's gRPC API runs on it: a tenth less CPU per NodeMetric report than asyncio's own loop
        # (tests/bench/bench_companion_ingest.py).
        "uvloop>=0.19",
    ],
    extras_require={
        "test": [
            "pytest>=8.0",
            "hypothesis>=6.98",
            "pytest-timeout>=2.3.1",
            # The committed protocol stubs are checked against proto/ (tests/unit/apis/test_proto.py).
            "grpcio-tools==1.85.1",
            "kubernetes-validate>=1.30",
            # Boots the pure cgroup v2 guest of tests/vm (console script vng, with qemu and a Debian kernel).
            "virtme-ng>=1.30",
        ],
        "lint": [
            "ruff>=0.5.0",
            "mypy>=1.10",
            "types-PyYAML>=6.0.12",
            "types-psutil>=5.9.5",
            # lint-imports: the layering contracts of pyproject.toml ([tool.importlinter]).
            "import-linter>=2.1",
        ],
        # The benchmarks (tests/bench, `tox -e bench`) need the package and, for bench_runtimeproxy, which
        # starts containerd through the test fixtures, pytest; bench_pressure runs a test in the v2 guest
        # (virtme-ng, and the guest's pytest flags: pytest-timeout; the suite's conftest: hypothesis).
        "bench": ["pytest>=8.0", "pytest-timeout>=2.3.1", "hypothesis>=6.98", "virtme-ng>=1.30"],
    },
    entry_points={
        "console_scripts": [
            "koordlet=koordlet.cli.koordlet:main",
            "koordctl=koordlet.cli.koordctl:main",
            "koord-runtime-proxy=runtimeproxy.cli:main",
            "koord-companion=koordlet.companion.cli:main",
        ],
    },
)
