"""``oom_score_adj`` of a container's running processes, on real processes in a real cgroup."""

from __future__ import annotations

from pathlib import Path

from koordlet.qosmanager.reader import CgroupReader
from koordlet.resourceexecutor import oomscore
from koordlet.system.hostpaths import HostPaths
from koordlet.system.layout import detect_layout
from tests.fixtures.realcgroup import RealCgroups

SLEEPER = "import signal; signal.pause()"


class Entries:
    def __init__(self) -> None:
        self.entries: list[object] = []

    def record(self, entry: object) -> None:
        self.entries.append(entry)


def test_running_processes_get_the_value_once(real_cgroups: RealCgroups) -> None:
    real_cgroups.mkdir("ctr")
    pids = [real_cgroups.spawn("ctr", SLEEPER) for _ in range(2)]
    reader = CgroupReader(detect_layout(HostPaths()))
    audit = Entries()
    apply = oomscore.for_cgroups(lambda rel: reader.read("cgroup_procs", rel),
                                 oomscore.OomScoreWriter("/proc", audit))
    rel_dir = f"{real_cgroups.name}/ctr"

    assert apply(rel_dir, 500, "test") == []
    assert [Path(f"/proc/{pid}/oom_score_adj").read_text().strip() for pid in pids] == ["500", "500"]
    assert len(audit.entries) == 2
    assert apply(rel_dir, 500, "test") == []
    assert len(audit.entries) == 2, "an unchanged value is not rewritten"

    real_cgroups.kill(pids[0])  # exited between listing and writing: not a problem
    assert apply(rel_dir, 600, "test") == []
    assert Path(f"/proc/{pids[1]}/oom_score_adj").read_text().strip() == "600"
    assert apply(f"{real_cgroups.name}/gone", 600, "test") == []


def test_a_refused_value_is_reported(real_cgroups: RealCgroups) -> None:
    real_cgroups.mkdir("ctr")
    pid = real_cgroups.spawn("ctr", SLEEPER)
    writer = oomscore.OomScoreWriter("/proc", None)
    # Lowering needs CAP_SYS_RESOURCE (not granted on the test host); with it the write succeeds.
    result = writer.apply([pid], -500, "test")
    value = Path(f"/proc/{pid}/oom_score_adj").read_text().strip()
    if result.failed:
        assert result.failed == ((pid, f"pid {pid}: Permission denied"),) and value == "0"
        assert result.error == f"pid {pid}: Permission denied" and not result.ok
    else:
        assert value == "-500" and result.applied == (pid,) and result.ok
