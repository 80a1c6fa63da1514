"""sysreconcile against a real kernel's ``/proc/sys/vm`` and debugfs' scheduler features: the values land in
the knobs the kernel serves, and switching the strategy off hands back the values found at start.

``/proc/sys/vm`` is node-wide: on a shared host these writes would change every tenant's memory
reclaim.  So the test runs only in the v2 guest (``python -m tests.vm tests/integration/qosmanager/
test_sysreconcile_kernel.py``), whose kernel is its own; elsewhere it is deselected (cgroupv2 marker) or,
on a pure v2 host outside the guest, skipped without touching anything.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from koordlet import native
from koordlet.apis.nodeslo import NodeSLOSpec, merge_over_defaults
from koordlet.config import gates
from koordlet.qosmanager.framework import Action
from koordlet.qosmanager.plugins.sysreconcile import SystemConfig, calc
from koordlet.qosmanager.shadow import Shadow
from koordlet.resourceexecutor import AuditLog, ResourceExecutor
from koordlet.resourceexecutor.sysctl import ORIGINALS_FILE, SysctlExecutor
from koordlet.shadowmodes import ShadowModes
from koordlet.system.hostpaths import HostPaths
from koordlet.system.node import read_node_info
from koordlet.system.sysfiles import (
    MEMCG_REAP_BACKGROUND,
    MIN_FREE_KBYTES,
    WATERMARK_SCALE_FACTOR,
    parse_sched_features,
    sched_features_path,
)
from tests.fixtures.fakehost import FakeHost
from tests.fixtures.realcgroup import SCRATCH_DISK
from tests.unit.qosmanager.fakes import FakeInformer, make_options

pytestmark = [pytest.mark.integration, pytest.mark.cgroupv2]

HOST = HostPaths()
KNOBS = (MIN_FREE_KBYTES, WATERMARK_SCALE_FACTOR)


def _read(path: str) -> str:
    return Path(path).read_text().strip()


@pytest.fixture
def guest_knobs() -> Iterator[dict[str, str]]:
    """The knobs' values before the test; whatever happens they are put back (the strategy's own restore is
    what the test checks, this only keeps a failing test from leaving the guest changed)."""
    if not os.environ.get(SCRATCH_DISK):
        pytest.skip("writes the kernel's /proc/sys/vm: runs only in the v2 guest (python -m tests.vm)")
    before = {k.key: _read(k.path(HOST)) for k in KNOBS}
    yield before
    for knob in KNOBS:
        if _read(knob.path(HOST)) != before[knob.key]:
            Path(knob.path(HOST)).write_text(before[knob.key])


def test_real_knobs_set_then_restored_when_switched_off(guest_knobs: dict[str, str], tmp_path: Path) -> None:
    node = read_node_info(HOST, native)
    factor = 100
    while str(calc.min_free_kbytes(factor, node.memory_total_bytes)) == guest_knobs["min_free_kbytes"]:
        factor += 1  # make the write a real change
    wanted_min_free = calc.min_free_kbytes(factor, node.memory_total_bytes)
    wanted_scale = 200 if guest_knobs["watermark_scale_factor"] == "150" else 150

    options = make_options(FakeHost(tmp_path / "fake"), tmp_path, FakeInformer(node_info=node),
                           gates={gates.SYSTEM_CONFIG: True})
    audit = AuditLog(tmp_path / "audit")
    options = dataclasses.replace(options, sysctl=SysctlExecutor(
        HOST, options.clock, audit, originals_path=str(tmp_path / "state" / ORIGINALS_FILE)))
    strategy = SystemConfig(options)
    spec = merge_over_defaults(NodeSLOSpec.from_json({"systemStrategy": {
        "minFreeKbytesFactor": factor, "watermarkScaleFactor": wanted_scale, "memcgReapBackGround": 1}}, "spec"))

    decision = strategy.run_once(spec)
    # The kernel serves what was written: min_free_kbytes is recomputed into the zone watermarks on write
    # (mm/page_alloc.c min_free_kbytes_sysctl_handler) and read back as stored.
    assert _read(MIN_FREE_KBYTES.path(HOST)) == str(wanted_min_free)
    assert _read(WATERMARK_SCALE_FACTOR.path(HOST)) == str(wanted_scale)
    assert decision.numbers["written"] == {"min_free_kbytes": str(wanted_min_free),
                                           "watermark_scale_factor": str(wanted_scale)}
    if not os.path.exists(MEMCG_REAP_BACKGROUND.path(HOST)):  # Debian's kernel: an Alibaba Cloud Linux knob
        assert decision.action is Action.UNSUPPORTED
        assert list(decision.numbers["unsupported"]) == ["memcg_reap_background"]
    assert strategy.run_once(spec).action is Action.NONE  # read back equal: nothing written again

    off = strategy.run_once(spec, enabled=False)
    assert off.action is Action.RECOVER
    assert {k.key: _read(k.path(HOST)) for k in KNOBS} == guest_knobs
    assert off.numbers["restored"] == guest_knobs


@pytest.fixture
def guest_debugfs() -> Iterator[None]:
    """debugfs on /sys/kernel/debug in the guest (mounted here when the guest's init did not, unmounted after)."""
    if not os.environ.get(SCRATCH_DISK):
        pytest.skip("changes the kernel's scheduler features: runs only in the v2 guest (python -m tests.vm)")
    debug = "/sys/kernel/debug"
    mounted = False
    if not os.path.ismount(debug):
        subprocess.run(["mount", "-t", "debugfs", "debugfs", debug], check=True)
        mounted = True
    try:
        yield
    finally:
        if mounted:
            subprocess.run(["umount", debug], check=True)


def test_real_sched_feature_flipped_then_restored(guest_debugfs: None, tmp_path: Path) -> None:
    path = sched_features_path(HOST)
    # Debian's kernel has CONFIG_SCHED_DEBUG, and since 5.13 the file is debugfs' sched/features.
    assert path == "/sys/kernel/debug/sched/features", f"no sched features file in {HOST.sys_root}/kernel/debug"
    before = parse_sched_features(_read(path))
    # HRTICK only changes how the scheduler arms its tick timer: harmless either way in the guest.
    wanted = not before["HRTICK"]
    options = make_options(FakeHost(tmp_path / "fake"), tmp_path, FakeInformer(node_info=read_node_info(HOST, native)),
                           gates={gates.SYSTEM_CONFIG: True})
    options = dataclasses.replace(options, sysctl=SysctlExecutor(HOST, options.clock))
    strategy = SystemConfig(options)
    spec = merge_over_defaults(NodeSLOSpec.from_json({"systemStrategy": {"schedFeatures": {"HRTICK": wanted}}},
                                                     "spec"))
    try:
        decision = strategy.run_once(spec)
        assert decision.action is Action.APPLY, decision.summary
        after = parse_sched_features(_read(path))
        assert after == {**before, "HRTICK": wanted}  # that one feature, nothing else
        off = strategy.run_once(spec, enabled=False)
        assert off.numbers["restored"] == {"sched_features:HRTICK": "1" if before["HRTICK"] else "0"}
        assert parse_sched_features(_read(path)) == before
    finally:
        if parse_sched_features(_read(path))["HRTICK"] != before["HRTICK"]:
            Path(path).write_text("HRTICK" if before["HRTICK"] else "NO_HRTICK")


def test_in_shadow_mode_real_knobs_are_decided_as_in_active_mode_and_left_alone(guest_knobs: dict[str, str],
                                                                             tmp_path: Path) -> None:
    """The same rounds in shadow mode, then in active mode, on the guest kernel: equal decisions; the knobs keep
    their values through every shadow round, and the audit holds only intentions."""
    node = read_node_info(HOST, native)
    wanted_scale = 200 if guest_knobs["watermark_scale_factor"] == "150" else 150
    spec = merge_over_defaults(NodeSLOSpec.from_json({"systemStrategy": {"watermarkScaleFactor": wanted_scale}},
                                                     "spec"))
    steps = [(spec, True), (spec, True), (spec, False)]

    def options_for(run: str) -> Any:
        options = make_options(FakeHost(tmp_path / run / "fake"), tmp_path / run, FakeInformer(node_info=node),
                               gates={gates.SYSTEM_CONFIG: True})
        return dataclasses.replace(options, sysctl=SysctlExecutor(HOST, options.clock, AuditLog(tmp_path / run / "a")))

    options = options_for("shadow")
    shadow = Shadow(ShadowModes(default=True), ResourceExecutor(options.layout, options.clock, None), options.evictor,
                    sysctl=options.sysctl)
    shadowed = SystemConfig(shadow.options_for("sysreconcile", options))
    decided = []
    for step_spec, enabled in steps:
        shadow.writers["sysreconcile"].begin_round(True)
        decided.append(shadowed.run_once(step_spec, enabled))
        assert {k.key: _read(k.path(HOST)) for k in KNOBS} == guest_knobs
    active = SystemConfig(options_for("active"))
    assert [(d.action, d.summary) for d in decided] == [
        (d.action, d.summary) for d in (active.run_once(s, e) for s, e in steps)]
    assert decided[0].numbers["written"] == {"watermark_scale_factor": str(wanted_scale)}
    outcomes = {json.loads(line)["outcome"] for path in (tmp_path / "shadow" / "a").glob("*")
                for line in path.read_text().splitlines()}
    assert outcomes == {"intended"}
