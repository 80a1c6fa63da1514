"""ResctrlExecutor on a fake resctrl tree: exact schemata text, validation against info/ limits (nothing
half-written), skip-unchanged with forced rewrite, EINVAL backoff, task moves, group removal and the
host without resctrl."""

from __future__ import annotations

import errno
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from koordlet.errors import ConfigError, Unsupported
from koordlet.metrics.executor import RESOURCE_UPDATE_DURATION, ResourceExecutorMetrics
from koordlet.resourceexecutor import Outcome
from koordlet.resourceexecutor.resctrl import MB_MAX_AMD, ResctrlExecutor, ResctrlFileWriter, parse_schemata
from tests.fixtures.fakehost import FakeHost
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit

LOGGER = "koordlet.resourceexecutor.resctrl"
ROOT_SCHEMATA = "    L3:0=7ff;1=7ff\n    MB:0=100;1=100\n"


@dataclass
class FakeKernel:
    """Stands in for resctrl's kernel side on a plain tree: ``mkdir`` fills the group with schemata
    (a copy of the root's) and tasks, a write to ``tasks`` appends the task like the kernel lists it,
    ``rmdir`` removes a non-empty group.  ``fail`` maps a path, or (path, text), to an errno."""

    root: str
    fail: dict[object, int] = field(default_factory=dict)
    writes: list[tuple[str, str]] = field(default_factory=list)
    attempts: list[tuple[str, str]] = field(default_factory=list)
    dirs: list[tuple[str, str]] = field(default_factory=list)
    real: ResctrlFileWriter = field(default_factory=ResctrlFileWriter)

    def read(self, path: str) -> str:
        return self.real.read(path)

    def write(self, path: str, text: str) -> None:
        self.attempts.append((path, text))
        code = self.fail.get((path, text), self.fail.get(path))
        if code is not None:
            raise OSError(code, os.strerror(code), path)
        if os.path.basename(path) == "tasks":
            if not os.path.exists(path):
                raise OSError(errno.ENOENT, "No such file or directory", path)
            with open(path, "a", encoding="ascii") as f:
                f.write(text)
        else:
            self.real.write(path, text)
        self.writes.append((path, text))

    def mkdir(self, path: str) -> None:
        self.dirs.append(("mkdir", path))
        code = self.fail.get(("mkdir", path))
        if code is not None:
            raise OSError(code, os.strerror(code), path)
        os.mkdir(path)
        shutil.copy(os.path.join(self.root, "schemata"), os.path.join(path, "schemata"))
        Path(path, "tasks").write_text("")

    def rmdir(self, path: str) -> None:
        self.dirs.append(("rmdir", path))
        shutil.rmtree(path)


@dataclass
class Rig:
    host: FakeHost
    executor: ResctrlExecutor
    kernel: FakeKernel
    clock: FakeClock
    audit: MemoryAudit
    registry: CollectorRegistry

    @property
    def root(self) -> Path:
        return Path(self.host.paths.resctrl_root)

    def schemata(self, group: str = "") -> str:
        return (self.root / group / "schemata").read_text()

    def metric(self, kind: str, status: str) -> float:
        value = self.registry.get_sample_value(
            RESOURCE_UPDATE_DURATION + "_count", {"type": kind, "status": status}
        )
        return value or 0.0


def write_info(root: Path, rel: str, content: str) -> None:
    path = root / "info" / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)


def make_rig(
    host: FakeHost,
    *,
    schemata: str = ROOT_SCHEMATA,
    cbm_mask: str | None = "7ff",
    min_cbm_bits: str | None = "1",
    min_bandwidth: str | None = "10",
    bandwidth_gran: str | None = "10",
    mb_max: int = 100,
) -> Rig:
    host.mount_resctrl(schemata)
    root = Path(host.paths.resctrl_root)
    (root / "info").mkdir(exist_ok=True)
    for rel, value in (
        ("L3/cbm_mask", cbm_mask),
        ("L3/min_cbm_bits", min_cbm_bits),
        ("MB/min_bandwidth", min_bandwidth),
        ("MB/bandwidth_gran", bandwidth_gran),
    ):
        if value is not None:
            write_info(root, rel, value + "\n")
    write_info(root, "last_cmd_status", "ok\n")
    clock, audit, registry = FakeClock(), MemoryAudit(), CollectorRegistry()
    kernel = FakeKernel(str(root))
    executor = ResctrlExecutor(
        str(root), clock, audit, ResourceExecutorMetrics(registry), 60.0, writer=kernel, mb_max=mb_max
    )
    return Rig(host, executor, kernel, clock, audit, registry)


@pytest.fixture
def rig(fake_host: FakeHost) -> Rig:
    return make_rig(fake_host)


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


# ------------------------------------------------------------------------------------------ schemata


@pytest.mark.parametrize(
    ("group", "lines", "text"),
    [
        ("BE", ["L3:0=7ff;1=7ff", "MB:0=100;1=100"], "L3:0=7ff;1=7ff\nMB:0=100;1=100\n"),
        # Koordinator's trailing ';', upper case, zero padding and domain order are normalised.
        ("BE", ["L3:1=0F0;0=00f;"], "L3:0=f;1=f0\n"),
        ("LS", ["  MB:0=50; 1 = 30 "], "MB:0=50;1=30\n"),
        ("koordlet-6f1c2a2e-uid", ["MB:1=20", "L3:0=3"], "MB:1=20\nL3:0=3\n"),
        ("", ["L3:0=7ff;1=7ff"], "L3:0=7ff;1=7ff\n"),
    ],
)
def test_writes_the_exact_schemata_text_in_one_write(rig: Rig, group: str, lines: list[str], text: str) -> None:
    result = rig.executor.apply_schemata(group, lines, "resctrl: be llc")
    path = str(rig.root / group / "schemata") if group else str(rig.root / "schemata")
    assert result.outcome is Outcome.WRITTEN, result.error
    assert result.ok
    assert (result.path, result.text) == (path, text)
    assert rig.kernel.writes == [(path, text)]
    assert rig.schemata(group) == text
    assert rig.kernel.dirs == ([("mkdir", str(rig.root / group))] if group else [])
    written = [e for e in rig.audit.entries if e.resource == "resctrl_schemata"]
    assert [(e.path, e.new, e.owner, e.outcome) for e in written] == [(path, text, "resctrl: be llc", "written")]
    # old: what the new group's file held (the kernel copies the defaults), or the root's.
    assert written[0].old == ROOT_SCHEMATA.strip()
    assert rig.metric("resctrl_schemata", "success") == 1


def test_existing_group_is_not_recreated(rig: Rig) -> None:
    rig.executor.apply_schemata("BE", ["L3:0=f"], "t")
    rig.executor.apply_schemata("BE", ["L3:0=ff"], "t")
    assert rig.kernel.dirs == [("mkdir", str(rig.root / "BE"))]
    assert [e.new for e in rig.audit.entries if e.resource == "resctrl_group"] == ["mkdir"]
    assert rig.schemata("BE") == "L3:0=ff\n"


@pytest.mark.parametrize(
    ("lines", "fragments"),
    [
        (["L3:0=7f7;1=7ff"], ["'L3:0=7f7;1=7ff'", "mask '7f7' on domain 0 is not contiguous"]),
        (["L3:0=7ff;1=fff"], ["mask 'fff' on domain 1 outside info/L3/cbm_mask 7ff"]),
        (["L3:0=800"], ["mask '800' on domain 0 outside info/L3/cbm_mask 7ff"]),
        (["L3:0=0;1=7ff"], ["mask '0' on domain 0 is empty"]),
        (["L3:0=xyz"], ["mask 'xyz' on domain 0 is not hexadecimal"]),
        (["L3:0=0x7f"], ["mask '0x7f' on domain 0 is not hexadecimal"]),
        (["MB:0=55;1=100"], ["MB value 55 on domain 0 is not a multiple of info/MB/bandwidth_gran 10",
                             "round it up to 60"]),
        (["MB:0=0"], ["MB value 0 on domain 0 outside 10..100"]),
        (["MB:1=110"], ["MB value 110 on domain 1 outside 10..100"]),
        (["MB:0=1.5"], ["MB value '1.5' on domain 0 is not a decimal number"]),
        (["L2:0=f"], ["resource 'L2' unknown"]),
        (["L3 0=f"], ["resource 'L3 0=f' unknown"]),
        (["L3:0"], ["'0' is not <domain id>=<value>"]),
        (["L3:a=f"], ["'a=f' is not <domain id>=<value>"]),
        (["L3:0=f;0=f"], ["domain 0 given twice"]),
        (["L3:0=f", "L3:1=f"], ["resource L3 given twice"]),
        (["L3:2=f"], ["domain 2 unknown (this host's L3 domains: 0, 1)"]),
        (["L3:0=f\nMB:0=10"], ["one schemata line per entry"]),
        ([], ["no schemata lines"]),
        ("L3:0=f", ["one string"]),
        # One bad line of two: nothing is written, not even the good one.
        (["L3:0=7ff;1=7ff", "MB:0=55;1=100"], ["line 'MB:0=55;1=100'", "not a multiple"]),
    ],
)
def test_invalid_schemata_names_group_line_and_value_and_writes_nothing(
    rig: Rig, lines: list[str], fragments: list[str]
) -> None:
    result = rig.executor.apply_schemata("BE", lines, "t")
    assert result.outcome is Outcome.INVALID
    assert result.error is not None
    assert result.error.startswith("resctrl group 'BE': ")
    for fragment in fragments:
        assert fragment in result.error
    assert rig.kernel.attempts == []
    assert not (rig.root / "BE").exists()
    assert rig.audit.entries == []


@pytest.mark.parametrize(
    ("info", "lines", "outcome", "fragment"),
    [
        ({"min_cbm_bits": "2"}, ["L3:0=1"], Outcome.INVALID,
         "mask '1' on domain 0 has 1 bits, info/L3/min_cbm_bits is 2"),
        ({"min_cbm_bits": "2"}, ["L3:0=3"], Outcome.WRITTEN, None),
        # Kernel 6.7+ CPUs with sparse_masks=1 accept non-contiguous masks.
        ({"sparse_masks": "1"}, ["L3:0=7f7"], Outcome.WRITTEN, None),
        ({"sparse_masks": "0"}, ["L3:0=7f7"], Outcome.INVALID, "not contiguous"),
        ({"cbm_mask": "garbage"}, ["L3:0=1"], Outcome.FAILED, "cannot parse 'garbage'"),
    ],
)
def test_info_limits(rig: Rig, info: dict[str, str], lines: list[str], outcome: Outcome, fragment: str | None) -> None:
    for name, value in info.items():
        write_info(rig.root, f"L3/{name}", value + "\n")
    result = rig.executor.apply_schemata("BE", lines, "t")
    assert result.outcome is outcome, result.error
    if fragment is not None:
        assert result.error is not None and fragment in result.error


def test_without_info_files_only_the_format_is_checked(fake_host: FakeHost) -> None:
    rig = make_rig(fake_host, cbm_mask=None, min_cbm_bits=None, min_bandwidth=None, bandwidth_gran=None)
    shutil.rmtree(rig.root / "info")
    assert rig.executor.apply_schemata("BE", ["L3:0=fffff", "MB:0=55"], "t").outcome is Outcome.WRITTEN
    assert rig.executor.apply_schemata("LS", ["L3:0=f0f"], "t").outcome is Outcome.INVALID
    assert rig.executor.apply_schemata("LS", ["MB:0=101"], "t").outcome is Outcome.INVALID


def test_amd_mb_takes_absolute_units_up_to_2048(fake_host: FakeHost) -> None:
    rig = make_rig(
        fake_host, schemata="L3:0=ffff\nMB:0=2048\n", cbm_mask="ffff", min_bandwidth="0", bandwidth_gran="1",
        mb_max=MB_MAX_AMD,
    )
    assert rig.executor.apply_schemata("BE", ["MB:0=2048"], "t").outcome is Outcome.WRITTEN
    assert rig.executor.apply_schemata("LS", ["MB:0=163"], "t").text == "MB:0=163\n"
    result = rig.executor.apply_schemata("LSR", ["MB:0=2049"], "t")
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and "outside 0..2048" in result.error


def test_a_resource_the_host_lacks_is_unsupported(fake_host: FakeHost) -> None:
    rig = make_rig(fake_host, schemata="L3:0=7ff\n")
    result = rig.executor.apply_schemata("BE", ["L3:0=f", "MB:0=50"], "t")
    assert result.outcome is Outcome.UNSUPPORTED
    assert result.error == "resctrl group 'BE': line 'MB:0=50': this host's resctrl has no MB (schemata lists L3)"
    assert rig.kernel.attempts == []


def test_cdp_resources_use_their_own_info(fake_host: FakeHost) -> None:
    rig = make_rig(fake_host, schemata="L3CODE:0=fff\nL3DATA:0=fff\n", cbm_mask=None)
    write_info(rig.root, "L3CODE/cbm_mask", "fff\n")
    write_info(rig.root, "L3DATA/cbm_mask", "ff\n")
    ok = rig.executor.apply_schemata("BE", ["L3CODE:0=f00", "L3DATA:0=0f"], "t")
    assert (ok.outcome, ok.text) == (Outcome.WRITTEN, "L3CODE:0=f00\nL3DATA:0=f\n")
    bad = rig.executor.apply_schemata("LS", ["L3DATA:0=f00"], "t")
    assert bad.error is not None and "outside info/L3DATA/cbm_mask ff" in bad.error


@pytest.mark.parametrize(
    "group",
    ["../x", "..", ".", "a/b", "/BE", ".hidden", "info", "mon_data", "mon_groups", " BE", "BE\n", "x" * 256, "BE*"],
)
def test_bad_group_names_are_refused(rig: Rig, group: str) -> None:
    for result in (
        rig.executor.apply_schemata(group, ["L3:0=f"], "t"),
        rig.executor.remove_group(group, "t"),
    ):
        assert result.outcome is Outcome.INVALID
        assert result.error is not None and repr(group) in result.error
    tasks = rig.executor.assign_tasks(group, [10], "t")
    assert tasks.outcome is Outcome.INVALID
    assert rig.kernel.attempts == [] and rig.kernel.dirs == []
    assert sorted(os.listdir(rig.root)) == ["info", "schemata", "tasks"]


def test_owner_is_required(rig: Rig) -> None:
    with pytest.raises(ConfigError, match="needs an owner"):
        rig.executor.apply_schemata("BE", ["L3:0=f"], "")


# ------------------------------------------------------------------------------- cache and backoff


def test_unchanged_text_is_skipped_until_the_forced_rewrite(rig: Rig) -> None:
    apply = rig.executor.apply_schemata
    assert apply("BE", ["L3:0=f"], "t").outcome is Outcome.WRITTEN
    rig.clock.advance(59)
    # The same schemata in another spelling is the same text.
    again = apply("BE", ["L3:0=00F;"], "t")
    assert (again.outcome, again.ok) == (Outcome.SKIPPED_UNCHANGED, True)
    assert len(rig.kernel.writes) == 1
    rig.clock.advance(1)
    assert apply("BE", ["L3:0=f"], "t").outcome is Outcome.WRITTEN
    assert apply("BE", ["L3:0=ff"], "t").outcome is Outcome.WRITTEN
    assert [t for _, t in rig.kernel.writes] == ["L3:0=f\n", "L3:0=f\n", "L3:0=ff\n"]
    assert rig.metric("resctrl_schemata", "success") == 3


def test_einval_marks_the_text_unsupported_with_backoff(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    path = str(rig.root / "BE" / "schemata")
    rig.kernel.fail[(path, "L3:0=7ff;1=7ff\n")] = errno.EINVAL
    write_info(rig.root, "last_cmd_status", "Mask out of range\n")
    first = rig.executor.apply_schemata("BE", ["L3:0=7ff;1=7ff"], "t")
    assert first.outcome is Outcome.UNSUPPORTED
    assert first.error is not None and "(info/last_cmd_status: Mask out of range)" in first.error
    second = rig.executor.apply_schemata("BE", ["L3:0=7ff;1=7ff"], "t")
    assert second.outcome is Outcome.UNSUPPORTED
    assert second.error is not None and "not retried for 600 s unless the value changes" in second.error
    assert rig.kernel.attempts == [(path, "L3:0=7ff;1=7ff\n")]
    assert len(warnings(caplog)) == 1
    # Another value is tried at once.
    assert rig.executor.apply_schemata("BE", ["L3:0=7f;1=7f"], "t").outcome is Outcome.WRITTEN
    rig.clock.advance(600)
    rig.executor.apply_schemata("BE", ["L3:0=7ff;1=7ff"], "t")
    assert len(rig.kernel.attempts) == 3
    # A success in between re-arms the warning, as in the cgroup executor.
    assert len(warnings(caplog)) == 2
    assert rig.metric("resctrl_schemata", "failed") == 2
    assert [e.outcome for e in rig.audit.entries if e.resource == "resctrl_schemata"] == [
        "unsupported", "written", "unsupported"
    ]


@pytest.mark.parametrize(
    ("code", "outcome"),
    [(errno.EACCES, Outcome.FAILED), (errno.ENOSPC, Outcome.FAILED), (errno.ENODEV, Outcome.GONE)],
)
def test_other_write_errors(rig: Rig, code: int, outcome: Outcome) -> None:
    rig.executor.apply_schemata("BE", ["L3:0=f"], "t")
    rig.kernel.fail[str(rig.root / "BE" / "schemata")] = code
    rig.clock.advance(60)
    result = rig.executor.apply_schemata("BE", ["L3:0=f"], "t")
    assert result.outcome is outcome
    assert result.error is not None and os.strerror(code) in result.error
    # The file's content is unknown now: the next apply tries again.
    rig.executor.apply_schemata("BE", ["L3:0=f"], "t")
    assert len(rig.kernel.attempts) == 3


def test_mkdir_out_of_closids_fails_with_a_hint(rig: Rig) -> None:
    rig.kernel.fail[("mkdir", str(rig.root / "koordlet-pod"))] = errno.ENOSPC
    result = rig.executor.apply_schemata("koordlet-pod", ["L3:0=f"], "t")
    assert result.outcome is Outcome.FAILED
    assert result.error is not None and "every CLOSID is in use" in result.error
    assert rig.kernel.attempts == []
    assert [(e.resource, e.new, e.outcome) for e in rig.audit.entries] == [("resctrl_group", "mkdir", "failed")]


# --------------------------------------------------------------------------------------- no resctrl


@pytest.mark.parametrize("state", ["missing", "unmounted"])
def test_host_without_resctrl_is_unsupported_and_logged_once(
    fake_host: FakeHost, caplog: pytest.LogCaptureFixture, state: str
) -> None:
    root = Path(fake_host.paths.resctrl_root)
    if state == "unmounted":
        root.mkdir(parents=True)
    kernel = FakeKernel(str(root))
    executor = ResctrlExecutor(str(root), FakeClock(), MemoryAudit(), writer=kernel)
    reason = executor.unsupported_reason()
    expected = "does not exist" if state == "missing" else "resctrl not mounted at"
    assert reason is not None and expected in reason and str(root) in reason
    for _ in range(3):
        result = executor.apply_schemata("BE", ["L3:0=f"], "t")
        assert (result.outcome, result.error) == (Outcome.UNSUPPORTED, reason)
        assert executor.assign_tasks("BE", [1], "t").outcome is Outcome.UNSUPPORTED
        assert executor.remove_group("BE", "t").outcome is Outcome.UNSUPPORTED
    with pytest.raises(Unsupported, match="resctrl"):
        executor.groups()
    assert kernel.attempts == [] and kernel.dirs == []
    assert len(warnings(caplog)) == 1


def test_a_mount_is_looked_up_once_a_second(fake_host: FakeHost) -> None:
    root = Path(fake_host.paths.resctrl_root)
    now = [100.0]
    executor = ResctrlExecutor(str(root), FakeClock(), MemoryAudit(), writer=FakeKernel(str(root)),
                               mount_clock=lambda: now[0])
    assert executor.unsupported_reason() is not None
    root.mkdir(parents=True)
    (root / "schemata").write_text("L3:0=fff\n")
    now[0] += 0.5
    assert executor.unsupported_reason() is not None  # the answer of the last second stands
    now[0] += 0.5
    assert executor.unsupported_reason() is None
    (root / "schemata").unlink()
    now[0] += 1.0
    reason = executor.unsupported_reason()
    assert reason is not None and "not mounted" in reason


def test_this_host_answers_without_raising() -> None:
    executor = ResctrlExecutor("/sys/fs/resctrl", FakeClock(), None)
    reason = executor.unsupported_reason()
    if os.path.isfile("/sys/fs/resctrl/schemata"):
        assert reason is None
        return
    assert reason is not None and "/sys/fs/resctrl" in reason
    assert executor.apply_schemata("BE", ["L3:0=1"], "t").outcome is Outcome.UNSUPPORTED


# -------------------------------------------------------------------------------------------- tasks


def test_assign_tasks_writes_one_pid_per_write_and_skips_listed_ones(rig: Rig) -> None:
    rig.executor.apply_schemata("BE", ["L3:0=f"], "t")
    tasks = rig.root / "BE" / "tasks"
    tasks.write_text("10\n")
    rig.kernel.fail[(str(tasks), "12\n")] = errno.ESRCH
    result = rig.executor.assign_tasks("BE", [10, 11, 12, 13, 11], "resctrl: be tasks")
    assert result.outcome is Outcome.WRITTEN and result.ok
    assert (result.applied, result.already, result.gone, result.failed) == ((11, 13), (10,), (12,), ())
    assert [t for p, t in rig.kernel.attempts if p == str(tasks)] == ["11\n", "12\n", "13\n"]
    assert tasks.read_text() == "10\n11\n13\n"
    entries = [(e.path, e.new, e.outcome) for e in rig.audit.entries if e.resource == "resctrl_tasks"]
    assert entries == [(str(tasks), "11", "written"), (str(tasks), "12", "gone"), (str(tasks), "13", "written")]
    assert rig.metric("resctrl_tasks", "success") == 2
    again = rig.executor.assign_tasks("BE", [10, 11, 13], "t")
    assert (again.outcome, again.already) == (Outcome.SKIPPED_UNCHANGED, (10, 11, 13))


def test_assign_tasks_to_the_root_group(rig: Rig) -> None:
    result = rig.executor.assign_tasks("", [7], "t")
    assert result.applied == (7,)
    assert (rig.root / "tasks").read_text() == "7\n"


def test_assign_tasks_failures(rig: Rig) -> None:
    rig.executor.apply_schemata("BE", ["L3:0=f"], "t")
    tasks = str(rig.root / "BE" / "tasks")
    rig.kernel.fail[(tasks, "21\n")] = errno.EPERM
    result = rig.executor.assign_tasks("BE", [20, 21], "t")
    assert result.outcome is Outcome.FAILED and not result.ok
    assert result.applied == (20,)
    assert [pid for pid, _ in result.failed] == [21]
    assert result.error is not None and "move task 21" in result.error


@pytest.mark.parametrize("pids", [[0], [-1], [1, 0], [True]])
def test_assign_tasks_refuses_bad_pids_before_writing(rig: Rig, pids: list[int]) -> None:
    rig.executor.apply_schemata("BE", ["L3:0=f"], "t")
    result = rig.executor.assign_tasks("BE", pids, "t")
    assert result.outcome is Outcome.INVALID
    assert result.error is not None and "task ids must be positive ints" in result.error
    assert len(rig.kernel.attempts) == 1


def test_assign_tasks_to_a_missing_group_is_gone(rig: Rig) -> None:
    result = rig.executor.assign_tasks("LS", [5], "t")
    assert result.outcome is Outcome.GONE
    assert result.error is not None and "apply_schemata creates it" in result.error


# ------------------------------------------------------------------------------------ groups, removal


def test_groups_lists_control_groups_only(rig: Rig) -> None:
    for group in ("LS", "BE", "koordlet-abc"):
        rig.executor.apply_schemata(group, ["L3:0=f"], "t")
    (rig.root / "mon_groups").mkdir()
    (rig.root / "mon_data").mkdir()
    assert rig.executor.groups() == ["BE", "LS", "koordlet-abc"]


def test_remove_group(rig: Rig) -> None:
    rig.executor.apply_schemata("koordlet-abc", ["L3:0=f"], "t")
    removed = rig.executor.remove_group("koordlet-abc", "resctrl: pod gone")
    assert removed.outcome is Outcome.WRITTEN
    assert not (rig.root / "koordlet-abc").exists()
    assert rig.executor.remove_group("koordlet-abc", "t").outcome is Outcome.GONE
    # What the executor remembered went with the group: the same schemata is written again.
    assert rig.executor.apply_schemata("koordlet-abc", ["L3:0=f"], "t").outcome is Outcome.WRITTEN
    assert [(e.resource, e.new, e.owner) for e in rig.audit.entries if e.resource == "resctrl_group"][:2] == [
        ("resctrl_group", "mkdir", "t"), ("resctrl_group", "rmdir", "resctrl: pod gone")
    ]
    assert rig.executor.remove_group("", "t").outcome is Outcome.INVALID
    assert os.path.isfile(rig.root / "schemata")


def test_parse_schemata_reads_the_kernels_padding() -> None:
    assert parse_schemata("    L3:0=007ff;1=7ff\n    MB:0=100;1= 90\nbogus\n") == {
        "L3": {0: "007ff", 1: "7ff"},
        "MB": {0: "100", 1: "90"},
    }
