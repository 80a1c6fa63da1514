"""Import layering of the package, checked on the source (AST), not by importing anything.

Rules (CONVENTIONS #8, #20):

1. ``koordlet.system`` imports only the standard library, ``koordlet.errors``, ``koordlet.native`` and
   itself: it is the host layer everything else stands on.
2. ``koordlet.native`` imports only the standard library, ``koordlet.errors`` and ``koordlet._native``.
3. Nothing but ``koordlet.native`` imports the compiled ``koordlet._native`` (tests and tools included).
4. ``runtimeproxy`` imports nothing of ``koordlet`` except the generated protocol stubs listed in
   :data:`RUNTIMEPROXY_MAY_IMPORT` (the RuntimeHookService stubs).
5. A plugin package never imports a sibling plugin: under each root of :data:`PLUGIN_ROOTS`, modules of
   ``<root>.<a>`` never import ``<root>.<b>``.  Shared code belongs in the subsystem's framework.

Every import form counts: ``import x``, ``from x import y`` (``x.y`` may be a module), relative imports,
imports under ``if TYPE_CHECKING:``, and ``importlib.import_module("x")`` / ``__import__("x")`` with a
literal name.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED_TREES = ("koordlet", "runtimeproxy", "tests")

SYSTEM = "koordlet.system"
NATIVE = "koordlet.native"
COMPILED = "koordlet._native"
ERRORS = "koordlet.errors"
RUNTIMEPROXY = "runtimeproxy"
RUNTIMEPROXY_MAY_IMPORT: tuple[str, ...] = (
    "koordlet.apis.proto.runtime.v1alpha1",
    "koordlet.apis.proto.cri.runtime.v1",
)
PLUGIN_ROOTS = (
    "koordlet.qosmanager.plugins",
    "koordlet.runtimehooks.hooks",
    "koordlet.metricsadvisor.collectors",
)


@dataclass(frozen=True)
class Module:
    name: str
    source: str
    is_package: bool = False
    path: str = "<memory>"


@dataclass(frozen=True)
class Violation:
    module: str
    imported: str
    rule: str
    line: int

    def __str__(self) -> str:
        return f"{self.module}:{self.line} imports {self.imported}: {self.rule}"


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def is_stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names


def allowed_by(name: str, allowed: Iterable[str]) -> bool:
    """``name`` is an allowed module, inside one, or a parent package of one (``koordlet`` for ``koordlet.errors``).

    A bare parent is harmless: ``from koordlet import errors`` records both ``koordlet`` and
    ``koordlet.errors``, and the second one is what the rules judge.
    """
    return any(within(name, a) or within(a, name) for a in allowed)


def _resolve_relative(module: Module, level: int, target: str | None) -> str:
    package_parts = module.name.split(".") if module.is_package else module.name.split(".")[:-1]
    if level > len(package_parts):
        raise ValueError(f"{module.path}: relative import beyond the top-level package")
    base = package_parts[: len(package_parts) - level + 1]
    return ".".join([*base, target] if target else base)


def imports_of(module: Module) -> Iterator[tuple[str, int]]:
    """Every module name ``module`` may import, with the line it happens on."""
    tree = ast.parse(module.source, filename=module.path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, node.level, node.module) if node.level else (node.module or "")
            yield base, node.lineno
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}", node.lineno
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and (
                (isinstance(node.func, ast.Name) and node.func.id in {"__import__", "import_module"})
                or (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            )
        ):
            yield node.args[0].value, node.lineno


def _plugin_of(name: str, root: str) -> str | None:
    if not name.startswith(root + "."):
        return None
    return name[len(root) + 1 :].split(".")[0]


def broken_rules(module: str, imported: str) -> Iterator[str]:
    """The rules that ``module`` importing ``imported`` breaks (see the module docstring)."""
    if within(module, SYSTEM) and not (is_stdlib(imported) or allowed_by(imported, (SYSTEM, ERRORS, NATIVE))):
        yield "koordlet.system may import only the stdlib, koordlet.errors and koordlet.native"
    if module == NATIVE:
        if not (is_stdlib(imported) or allowed_by(imported, (ERRORS, COMPILED))):
            yield "koordlet.native may import only the stdlib, koordlet.errors and koordlet._native"
    elif within(imported, COMPILED):
        yield "only koordlet.native may import the compiled koordlet._native"
    if (
        within(module, RUNTIMEPROXY)
        and within(imported, "koordlet")
        and not any(within(imported, allowed) for allowed in RUNTIMEPROXY_MAY_IMPORT)
    ):
        yield "runtimeproxy may import nothing of koordlet but generated protocol stubs"
    for root in PLUGIN_ROOTS:
        mine, theirs = _plugin_of(module, root), _plugin_of(imported, root)
        if mine is not None and theirs is not None and mine != theirs:
            yield f"plugin {root}.{mine} imports sibling plugin {root}.{theirs}"


def check(modules: Iterable[Module]) -> list[Violation]:
    """All layering violations among ``modules``."""
    return [
        Violation(module.name, imported, rule, line)
        for module in modules
        for imported, line in imports_of(module)
        for rule in broken_rules(module.name, imported)
    ]


def tree_modules(root: Path, top_levels: Iterable[str] = SCANNED_TREES) -> Iterator[Module]:
    """The Python sources of the repository's packages, named as Python would import them."""
    for top in top_levels:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = rel.parts
            is_package = parts[-1] == "__init__"
            name = ".".join(parts[:-1] if is_package else parts)
            yield Module(name, path.read_text(encoding="utf-8"), is_package, str(path))


def sources(mapping: Mapping[str, str]) -> list[Module]:
    """Synthetic modules; a name ending in ``.__init__`` is a package."""
    result = []
    for name, source in mapping.items():
        is_package = name.endswith(".__init__")
        result.append(Module(name.removesuffix(".__init__"), source, is_package))
    return result


# ---------------------------------------------------------------------------------------------- the tree


def test_repository_respects_layering() -> None:
    modules = list(tree_modules(REPO_ROOT))
    names = {m.name for m in modules}
    # Guard against a scan that silently finds nothing (moved tree, wrong root).
    assert {"koordlet.errors", "koordlet.cli.koordlet", "runtimeproxy.cli"} <= names
    violations = check(modules)
    assert not violations, "layering violations:\n" + "\n".join(map(str, violations))


# ---------------------------------------------------------------------------------------------- the checker


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("koordlet.system.cgroups", "import os\nimport json\nfrom koordlet import errors, native\n"),
        ("koordlet.system.probes", "from koordlet.errors import Unsupported\nfrom . import hostpaths\n"),
        ("koordlet.system.__init__", "from .hostpaths import HostPaths\n"),
        (
            "koordlet.native",
            "import os\nfrom koordlet.errors import from_errno\nfrom koordlet._native import ffi, lib\n",
        ),
        ("koordlet.qosmanager.plugins.cpuburst.strategy", "from koordlet.qosmanager import framework\n"),
        ("koordlet.qosmanager.plugins.cpuburst.strategy", "from . import tokenbucket\n"),
        ("koordlet.qosmanager.plugins.__init__", "from . import cpuburst, cpusuppress\n"),
        ("runtimeproxy.server", "import grpc\nfrom runtimeproxy import dispatcher\n"),
        ("koordlet.metricsadvisor.collectors.psi", "from koordlet import native\n"),
    ],
)
def test_checker_accepts_allowed_imports(name: str, source: str) -> None:
    assert check(sources({name: source})) == []


@pytest.mark.parametrize(
    ("name", "source", "imported"),
    [
        ("koordlet.system.cgroups", "import psutil\n", "psutil"),
        ("koordlet.system.cgroups", "from koordlet.config import Config\n", "koordlet.config"),
        ("koordlet.system.cgroups", "from koordlet import metriccache\n", "koordlet.metriccache"),
        ("koordlet.system.probes", "from ..qosmanager import framework\n", "koordlet.qosmanager"),
        (
            "koordlet.system.probes",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from koordlet.apis import qos\n",
            "koordlet.apis",
        ),
        ("koordlet.native", "import yaml\n", "yaml"),
        ("koordlet.native", "from koordlet.system import hostpaths\n", "koordlet.system"),
        ("koordlet.metricsadvisor.collectors.psi", "from koordlet._native import lib\n", "koordlet._native"),
        ("koordlet.cli.koordctl", "from koordlet import _native\n", "koordlet._native"),
        ("koordlet.metriccache.store", "from .. import _native\n", "koordlet._native"),
        ("tests.bench.run", "import importlib\nimportlib.import_module('koordlet._native')\n", "koordlet._native"),
        ("runtimeproxy.cli", "from koordlet.version import __version__\n", "koordlet.version"),
        ("runtimeproxy.dispatcher", "import koordlet.runtimehooks\n", "koordlet.runtimehooks"),
        (
            "koordlet.qosmanager.plugins.cpuburst.strategy",
            "from koordlet.qosmanager.plugins.cpusuppress import util\n",
            "koordlet.qosmanager.plugins.cpusuppress",
        ),
        (
            "koordlet.qosmanager.plugins.cpuburst.strategy",
            "from ..cpuevict import policy\n",
            "koordlet.qosmanager.plugins.cpuevict",
        ),
        (
            "koordlet.qosmanager.plugins.cpuburst.__init__",
            "from koordlet.qosmanager.plugins import memoryevict\n",
            "koordlet.qosmanager.plugins.memoryevict",
        ),
        (
            "koordlet.runtimehooks.hooks.cpuset.hook",
            "from koordlet.runtimehooks.hooks.groupidentity import bvt\n",
            "koordlet.runtimehooks.hooks.groupidentity",
        ),
    ],
)
def test_checker_catches_violations(name: str, source: str, imported: str) -> None:
    violations = check(sources({name: source}))
    assert violations, f"{name} importing {imported} was not flagged"
    assert any(within(v.imported, imported) for v in violations), violations
    assert all(v.module == name.removesuffix(".__init__") for v in violations)


def test_violation_names_line_and_rule() -> None:
    (violation,) = check(sources({"koordlet.system.probes": "import os\n\nimport psutil\n"}))
    assert violation.line == 3
    assert str(violation) == (
        "koordlet.system.probes:3 imports psutil: "
        "koordlet.system may import only the stdlib, koordlet.errors and koordlet.native"
    )


def test_checker_scans_files_from_disk(tmp_path: Path) -> None:
    plugin = tmp_path / "koordlet" / "qosmanager" / "plugins" / "cpuburst"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("from ..cpusuppress import x\n")
    (tmp_path / "koordlet" / "system").mkdir()
    (tmp_path / "koordlet" / "system" / "node.py").write_text("import requests\n")
    modules = list(tree_modules(tmp_path, ["koordlet"]))
    assert {(m.name, m.is_package) for m in modules} == {
        ("koordlet.qosmanager.plugins.cpuburst", True),
        ("koordlet.system.node", False),
    }
    assert {(v.module, v.imported) for v in check(modules)} == {
        ("koordlet.qosmanager.plugins.cpuburst", "koordlet.qosmanager.plugins.cpusuppress"),
        ("koordlet.qosmanager.plugins.cpuburst", "koordlet.qosmanager.plugins.cpusuppress.x"),
        ("koordlet.system.node", "requests"),
    }
