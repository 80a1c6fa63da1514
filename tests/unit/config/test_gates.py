"""Feature gates: a gate this koordlet has no code for cannot be turned on, and every other gate is read.

Koordinator's gate table is kept whole (names, defaults, stages) so a Koordinator configuration loads, but a gate
that is accepted and then read by nothing would claim a feature that does not exist."""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from koordlet.config import add_flags, flags_from_args, gates, load
from koordlet.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parents[3]

# Gates other parts of this project implement (their own tests prove each one's code reads it).
IMPLEMENTED_ELSEWHERE = ("NodeTopologyReport", "CPUAllocatableEvict", "MemoryAllocatableEvict", "SystemConfig",
                         "CPUNormalization")


def parse(argv: list[str]) -> dict[str, object]:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return flags_from_args(parser.parse_args(argv))


def message(name: str) -> str:
    return f"feature gate {name} is not implemented by this koordlet"


@pytest.mark.parametrize("name", sorted(gates.NOT_IMPLEMENTED))
def test_turning_on_a_gate_without_code_fails_the_start(name: str) -> None:
    with pytest.raises(ConfigError, match=message(name)):
        load(None, parse(["--feature-gates", f"{name}=true"]))
    with pytest.raises(ConfigError, match=message(name)):
        gates.resolve({name: True})
    # Saying it is off is what a Koordinator configuration does by default: accepted.
    assert not gates.resolve({name: False})[name]


def test_the_config_file_is_checked_too(tmp_path: Path) -> None:
    path = tmp_path / "koordlet.yaml"
    path.write_text("featureGates: {Accelerators: true, AuditEvents: true, PSICollector: true}\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    text = str(info.value)
    assert str(path) in text and message("Accelerators") in text and message("AuditEvents") in text


def test_all_alpha_turns_on_only_gates_with_code() -> None:
    effective = gates.resolve({"AllAlpha": True})
    assert effective["PSICollector"] and effective["CoreSched"]
    assert not any(effective[name] for name in gates.NOT_IMPLEMENTED)
    assert gates.resolve({"AllAlpha": False, "AllBeta": True})["NodeTopologyReport"]


def test_every_not_implemented_gate_is_off_by_default() -> None:
    assert all(not gates.GATES[name].default for name in gates.NOT_IMPLEMENTED)
    assert set(gates.GATES) >= gates.NOT_IMPLEMENTED
    assert {name for name in gates.GATES if not gates.implemented(name)} == gates.NOT_IMPLEMENTED


@pytest.mark.parametrize("name", IMPLEMENTED_ELSEWHERE)
def test_gates_implemented_in_this_project_are_not_refused(name: str) -> None:
    assert gates.implemented(name)
    assert gates.resolve({name: True})[name]


def _gate_readers() -> dict[str, set[str]]:
    """Gate name -> modules under koordlet/ (other than the table) that name it: ``gates.CONST`` or the string."""
    constants = {const: getattr(gates, const) for const in dir(gates)
                 if const.isupper() and isinstance(getattr(gates, const), str) and getattr(gates, const) in gates.GATES}
    readers: dict[str, set[str]] = {name: set() for name in gates.GATES}
    table = REPO_ROOT / "koordlet" / "config" / "gates.py"
    for path in (REPO_ROOT / "koordlet").rglob("*.py"):
        if path == table or "proto" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in constants:
                name = constants[node.attr]
            elif isinstance(node, ast.Name) and node.id in constants:
                name = constants[node.id]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in gates.GATES:
                name = node.value
            if name is not None:
                readers[name].add(str(path.relative_to(REPO_ROOT)))
    return readers


def test_every_gate_with_code_is_read_by_some_module() -> None:
    """The inventory: a gate left implemented must be named by the code it switches (a gate nobody reads is
    the silent gate this table must not have); a refused one must not be (its code would be unreachable)."""
    readers = _gate_readers()
    unread = sorted(name for name in gates.GATES if gates.implemented(name) and not readers[name])
    assert not unread, f"gates accepted but read by no code: {unread}; implement them or add to NOT_IMPLEMENTED"
    read_but_refused = sorted(name for name in gates.NOT_IMPLEMENTED if readers[name])
    assert not read_but_refused, f"refused gates read by {[(n, sorted(readers[n])) for n in read_but_refused]}"


def test_the_koordlet_command_exits_non_zero_naming_the_gate(tmp_path: Path) -> None:
    script = Path(sys.executable).parent / "koordlet"
    assert script.exists(), f"console script {script} missing: install the package (pip install -e .)"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([str(script), "run", "--standalone", "--state-dir", str(tmp_path / "state"),
                           "--feature-gates", "Libpfm4=true"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, cwd=REPO_ROOT,
                          timeout=120, check=False)
    assert done.returncode != 0
    assert message("Libpfm4") in done.stderr
    assert not (tmp_path / "state").exists()  # refused before anything was set up
