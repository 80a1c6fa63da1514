"""Import rules that the import-linter contracts (pyproject.toml ``[tool.importlinter]``, run by ``lint-imports``
in the lint env) cannot express, checked on the source (AST), not by importing anything.

The contracts cover the layers, the independence of each subsystem's plugins, the frameworks that never
import their plugins, the node agent that imports nothing of the companion or the Kubernetes client, and
``runtimeproxy`` that imports nothing of koordlet but protocol stubs.  What they cannot see is checked here:

1. ``koordlet.system`` imports only the standard library, ``koordlet.errors`` and itself: the host layer
   stands on nothing installed beside the package (a contract can forbid named packages, not allow the
   standard library alone), and code of it that reads through the C core is handed ``koordlet.native``.
2. ``koordlet.native`` imports only the standard library, ``koordlet.errors`` and ``koordlet._native``.
3. Nothing but ``koordlet.native`` imports the compiled ``koordlet._native``, tests and tools included
   (the contracts read koordlet/ and runtimeproxy/ only, and an extension module is not in their graph).
4. An import by literal name (``importlib.import_module("x")``, ``__import__("x")``) in koordlet/ or
   runtimeproxy/ keeps the contracts too: lint-imports reads only import statements, so such a call would
   hide an edge from it.  The layers are read from pyproject.toml, so both checks follow one declaration.

Every import form counts for rules 1-3: ``import x``, ``from x import y`` (``x.y`` may be a module),
relative imports, imports under ``if TYPE_CHECKING:``, and the literal-name calls of rule 4.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED_TREES = ("koordlet", "runtimeproxy", "tests")
CONTRACT_TREES = ("koordlet", "runtimeproxy")
"""The trees lint-imports reads (its root packages); rule 4 applies to them."""

SYSTEM = "koordlet.system"
NATIVE = "koordlet.native"
COMPILED = "koordlet._native"
ERRORS = "koordlet.errors"
RUNTIMEPROXY = "runtimeproxy"
COMPANION = "koordlet.companion"
KUBERNETES = "kubernetes"
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


@dataclass(frozen=True)
class Layers:
    """The node agent's layers contract: each top-level package of ``container``, its layer (0 = top) and
    whether its siblings in that layer are independent of it."""

    container: str
    index: Mapping[str, int]
    independent: Mapping[str, bool]

    @classmethod
    def from_pyproject(cls, pyproject: Path = REPO_ROOT / "pyproject.toml") -> Layers:
        config: dict[str, Any] = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        (contract,) = [c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
        (container,) = contract["containers"]
        index: dict[str, int] = {}
        independent: dict[str, bool] = {}
        for number, layer in enumerate(contract["layers"]):
            separator = "|" if "|" in layer else ":"
            for name in (part.strip() for part in layer.split(separator)):
                index[name] = number
                independent[name] = separator == "|"
        return cls(container, index, independent)

    def top(self, name: str) -> str | None:
        parts = name.split(".")
        return parts[1] if len(parts) > 1 and parts[0] == self.container else None

    def breaks(self, module: str, imported: str) -> str | None:
        """Why ``module`` may not import ``imported`` under this contract (None: it may)."""
        mine, theirs = self.top(module), self.top(imported)
        if mine is None or theirs is None or mine == theirs or mine not in self.index or theirs not in self.index:
            return None
        if self.index[theirs] < self.index[mine]:
            return f"layer {mine} may not import the higher layer {theirs}"
        if self.index[theirs] == self.index[mine] and self.independent[mine]:
            return f"{mine} and {theirs} are independent siblings"
        return None


LAYERS = Layers.from_pyproject()


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


def imports_of(module: Module) -> Iterator[tuple[str, int, bool]]:
    """Every module name ``module`` may import, with the line it happens on and whether it is imported by
    literal name (a call lint-imports does not see)."""
    tree = ast.parse(module.source, filename=module.path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, False
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_relative(module, node.level, node.module) if node.level else (node.module or "")
            yield base, node.lineno, False
            for alias in node.names:
                if alias.name != "*":
                    yield f"{base}.{alias.name}", node.lineno, False
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
            yield node.args[0].value, node.lineno, True


def _plugin_of(name: str, root: str) -> str | None:
    if not name.startswith(root + "."):
        return None
    return name[len(root) + 1 :].split(".")[0]


def contract_breaks(module: str, imported: str) -> Iterator[str]:
    """The import-linter contracts that ``module`` importing ``imported`` would break (rule 4)."""
    layer_rule = LAYERS.breaks(module, imported)
    if layer_rule is not None:
        yield layer_rule
    for root in PLUGIN_ROOTS:
        mine, theirs = _plugin_of(module, root), _plugin_of(imported, root)
        if mine is not None and theirs is not None and mine != theirs:
            yield f"plugin {root}.{mine} imports sibling plugin {root}.{theirs}"
    if (
        within(module, "koordlet")
        and not within(module, COMPANION)
        and (within(imported, COMPANION) or within(imported, KUBERNETES))
    ):
        yield "the node agent imports nothing of the companion or the Kubernetes client"
    if (
        within(module, RUNTIMEPROXY)
        and within(imported, "koordlet")
        and not any(within(imported, allowed) for allowed in RUNTIMEPROXY_MAY_IMPORT)
    ):
        yield "runtimeproxy may import nothing of koordlet but generated protocol stubs"


def broken_rules(module: str, imported: str, by_name: bool = False) -> Iterator[str]:
    """The rules that ``module`` importing ``imported`` breaks (see the module docstring)."""
    if within(module, SYSTEM) and not (is_stdlib(imported) or allowed_by(imported, (SYSTEM, ERRORS))):
        yield "koordlet.system may import only the stdlib and koordlet.errors"
    if within(module, NATIVE):
        if not (is_stdlib(imported) or allowed_by(imported, (ERRORS, COMPILED, NATIVE))):
            yield "koordlet.native may import only the stdlib, koordlet.errors and koordlet._native"
    elif within(imported, COMPILED):
        yield "only koordlet.native may import the compiled koordlet._native"
    if by_name and any(within(module, tree) for tree in CONTRACT_TREES):
        for rule in contract_breaks(module, imported):
            yield f"{rule} (imported by literal name, where lint-imports does not see it)"


def check(modules: Iterable[Module]) -> list[Violation]:
    """All violations among ``modules``."""
    return [
        Violation(module.name, imported, rule, line)
        for module in modules
        for imported, line, by_name in imports_of(module)
        for rule in broken_rules(module.name, imported, by_name)
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


def test_layers_contract_places_every_package() -> None:
    """The layers read from pyproject.toml name every top-level package of koordlet but the companion (its
    own program) and the compiled core, so rule 4 judges every literal-name import between them."""
    packages = {p.stem for p in (REPO_ROOT / "koordlet").iterdir()
                if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.stem != "__init__"}
    assert packages - set(LAYERS.index) == {"companion"}
    assert LAYERS.index["cli"] < LAYERS.index["daemon"] < LAYERS.index["qosmanager"] < LAYERS.index["native"]
    assert LAYERS.index["native"] < LAYERS.index["system"] == LAYERS.index["apis"] == LAYERS.index["config"]
    assert LAYERS.independent["qosmanager"] and LAYERS.index["qosmanager"] == LAYERS.index["runtimehooks"]


# ---------------------------------------------------------------------------------------------- the checker


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("koordlet.system.cgroups", "import os\nimport json\nfrom koordlet import errors\n"),
        ("koordlet.system.probes", "from koordlet.errors import Unsupported\nfrom . import hostpaths\n"),
        ("koordlet.system.__init__", "from .hostpaths import HostPaths\n"),
        (
            "koordlet.native",
            "import os\nfrom koordlet.errors import from_errno\nfrom koordlet._native import ffi, lib\n",
        ),
        ("koordlet.native.core", "from koordlet._native import ffi\nfrom koordlet.native import files\n"),
        ("koordlet.qosmanager.plugins.cpuburst.strategy", "from koordlet.qosmanager import framework\n"),
        ("koordlet.qosmanager.plugins.cpuburst.strategy", "from . import tokenbucket\n"),
        ("koordlet.qosmanager.plugins.__init__", "from . import cpuburst, cpusuppress\n"),
        ("runtimeproxy.server", "import grpc\nfrom runtimeproxy import dispatcher\n"),
        ("koordlet.metricsadvisor.collectors.psi", "from koordlet import native\n"),
        ("koordlet.daemon.agent", "import importlib\nimportlib.import_module('koordlet.qosmanager.registry')\n"),
        ("runtimeproxy.cli", "__import__('koordlet.apis.proto.runtime.v1alpha1.api_pb2')\n"),
        ("tests.integration.manifests", "import importlib\nimportlib.import_module('koordlet.companion.x')\n"),
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
        ("koordlet.system.node", "from koordlet import native\n", "koordlet.native"),
        ("koordlet.system.node", "import importlib\nimportlib.import_module('koordlet.native')\n", "koordlet.native"),
        ("koordlet.native", "import yaml\n", "yaml"),
        ("koordlet.native.files", "from koordlet.system import hostpaths\n", "koordlet.system"),
        ("koordlet.metricsadvisor.collectors.psi", "from koordlet._native import lib\n", "koordlet._native"),
        ("koordlet.cli.koordctl", "from koordlet import _native\n", "koordlet._native"),
        ("koordlet.metriccache.store", "from .. import _native\n", "koordlet._native"),
        ("tests.bench.run", "import importlib\nimportlib.import_module('koordlet._native')\n", "koordlet._native"),
        # Literal-name imports lint-imports would not see.
        (
            "koordlet.statesinformer.framework",
            "import importlib\nimportlib.import_module('koordlet.qosmanager')\n",
            "koordlet.qosmanager",
        ),
        (
            "koordlet.runtimehooks.hooks.tc",
            "from importlib import import_module\nimport_module('koordlet.qosmanager.plugins.netqos')\n",
            "koordlet.qosmanager.plugins.netqos",
        ),
        (
            "koordlet.qosmanager.plugins.cpuburst.strategy",
            "__import__('koordlet.qosmanager.plugins.cpusuppress')\n",
            "koordlet.qosmanager.plugins.cpusuppress",
        ),
        ("koordlet.daemon.agent", "__import__('koordlet.companion.app')\n", "koordlet.companion"),
        ("koordlet.statesinformer.kubelet", "__import__('kubernetes.client')\n", "kubernetes"),
        ("runtimeproxy.cli", "__import__('koordlet.version')\n", "koordlet.version"),
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
        "koordlet.system may import only the stdlib and koordlet.errors"
    )


def test_checker_scans_files_from_disk(tmp_path: Path) -> None:
    plugin = tmp_path / "koordlet" / "qosmanager" / "plugins" / "cpuburst"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text("import importlib\nimportlib.import_module('koordlet.cli')\n")
    (tmp_path / "koordlet" / "system").mkdir()
    (tmp_path / "koordlet" / "system" / "node.py").write_text("import requests\n")
    modules = list(tree_modules(tmp_path, ["koordlet"]))
    assert {(m.name, m.is_package) for m in modules} == {
        ("koordlet.qosmanager.plugins.cpuburst", True),
        ("koordlet.system.node", False),
    }
    assert {(v.module, v.imported) for v in check(modules)} == {
        ("koordlet.qosmanager.plugins.cpuburst", "koordlet.cli"),
        ("koordlet.system.node", "requests"),
    }
