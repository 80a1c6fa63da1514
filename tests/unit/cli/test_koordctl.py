"""``koordctl``: version, help, and ``doctor`` as a table and as JSON (fake probes, then the real ones)."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import pytest

from koordlet.cli.koordctl import main
from koordlet.system.hostpaths import HostPaths
from koordlet.system.probes import PROBE_NAMES
from koordlet.version import __version__


@dataclass(frozen=True)
class FakeProbe:
    name: str
    supported: bool
    reason: str


FAKE_PROBES = [
    FakeProbe("psi", True, "/proc/pressure/{cpu,memory,io} readable"),
    FakeProbe("core_sched", False, "prctl(PR_SCHED_CORE): EINVAL"),
    FakeProbe("cpu_cfs_burst", True, "cpu.cfs_burst_us present"),
]


class Recorder:
    def __init__(self, probes: list[FakeProbe]) -> None:
        self.probes = probes
        self.paths: list[HostPaths] = []

    def __call__(self, paths: Any) -> list[FakeProbe]:
        self.paths.append(paths)
        return self.probes


def doctor(*argv: str, probes: list[FakeProbe] = FAKE_PROBES) -> tuple[int, str, Recorder]:
    out = io.StringIO()
    recorder = Recorder(probes)
    code = main(["doctor", *argv], out=out, probe_all=recorder)
    return code, out.getvalue(), recorder


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"koordctl {__version__}\n"


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "doctor" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    out = capsys.readouterr().out
    assert "--json" in out
    assert "--cgroup-root-dir" in out


def test_doctor_json_structure() -> None:
    code, out, _ = doctor("--json")
    assert code == 0
    assert json.loads(out) == {
        "version": __version__,
        "probes": [
            {"name": "psi", "supported": True, "reason": "/proc/pressure/{cpu,memory,io} readable"},
            {"name": "core_sched", "supported": False, "reason": "prctl(PR_SCHED_CORE): EINVAL"},
            {"name": "cpu_cfs_burst", "supported": True, "reason": "cpu.cfs_burst_us present"},
        ],
        "summary": {"supported": 2, "unsupported": 1},
    }


def test_doctor_table() -> None:
    code, out, _ = doctor()
    assert code == 0
    assert out.splitlines() == [
        "PROBE          STATUS       REASON",
        "psi            supported    /proc/pressure/{cpu,memory,io} readable",
        "core_sched     unsupported  prctl(PR_SCHED_CORE): EINVAL",
        "cpu_cfs_burst  supported    cpu.cfs_burst_us present",
        "",
        "2 supported, 1 unsupported",
    ]


def test_doctor_with_no_probes() -> None:
    code, out, _ = doctor("--json", probes=[])
    assert code == 0
    assert json.loads(out)["summary"] == {"supported": 0, "unsupported": 0}
    code, out, _ = doctor(probes=[])
    assert out.splitlines()[0].split() == ["PROBE", "STATUS", "REASON"]


def test_doctor_probes_the_roots_given(tmp_path: Any) -> None:
    _, _, recorder = doctor("--cgroup-root-dir", "/host/cgroup", "--proc-root-dir", str(tmp_path))
    (paths,) = recorder.paths
    assert paths == HostPaths(cgroup_root="/host/cgroup", proc_root=str(tmp_path))
    _, _, recorder = doctor()
    assert recorder.paths == [HostPaths()]


def test_doctor_reports_a_probe_crash_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    def broken(paths: Any) -> list[FakeProbe]:
        raise PermissionError(13, "Permission denied", "/sys/fs/cgroup")

    assert main(["doctor"], out=io.StringIO(), probe_all=broken) == 1
    assert capsys.readouterr().err == "koordctl: error: [Errno 13] Permission denied: '/sys/fs/cgroup'\n"


@pytest.mark.integration
def test_doctor_on_this_host_lists_every_probe() -> None:
    out = io.StringIO()
    assert main(["doctor", "--json"], out=out) == 0
    document = json.loads(out.getvalue())
    assert [p["name"] for p in document["probes"]] == list(PROBE_NAMES)
    assert all(isinstance(p["supported"], bool) and p["reason"] for p in document["probes"])
    total = document["summary"]["supported"] + document["summary"]["unsupported"]
    assert total == len(PROBE_NAMES)
