"""The v2 guest runner's own logic, without booting anything: junit outcomes, what a guest that did not report
means, the scratch disk's discovery, the accelerator choice and the argument split."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.waiting import wait_until
from tests.vm import guest, host

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="tests.integration.native.test_real_cgroup" name="test_a[v2]" time="0.25"/>
<testcase classname="tests.integration.native.test_real_cgroup" name="test_b[v2]" time="1.5">
  <failure message="AssertionError: assert '50' == '20'&#10;more">trace</failure></testcase>
<testcase classname="tests.integration.x" name="test_c" time="0.1"><skipped message="why"/></testcase>
<testcase classname="tests.integration.x" name="test_d" time="0"><error message="fixture broke"/></testcase>
</testsuite></testsuites>
"""


def test_junit_outcomes_per_test(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    assert host.read_junit(path) == [
        host.Outcome("tests/integration/native/test_real_cgroup.py::test_a[v2]", "passed", 0.25),
        host.Outcome("tests/integration/native/test_real_cgroup.py::test_b[v2]", "failed", 1.5,
                     "AssertionError: assert '50' == '20'"),
        host.Outcome("tests/integration/x.py::test_c", "skipped", 0.1, "why"),
        host.Outcome("tests/integration/x.py::test_d", "error", 0.0, "fixture broke"),
    ]


def test_a_guest_that_never_started_is_an_error_saying_so(tmp_path: Path) -> None:
    with pytest.raises(host.VMError, match=r"never started the suite \(virtme-ng exit 1\)"):
        host.collect(tmp_path, 1)


def test_a_guest_that_could_not_prepare_says_why(tmp_path: Path) -> None:
    (tmp_path / "error").write_text("GuestError: /sys/fs/cgroup is not a cgroup v2 root\n")
    with pytest.raises(host.VMError, match="could not prepare the suite: GuestError: /sys/fs/cgroup is not"):
        host.collect(tmp_path, 0)


def test_a_pytest_that_did_not_finish_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "facts.json").write_text(json.dumps({"kernel": "6.1"}))
    with pytest.raises(host.VMError, match="pytest did not finish"):
        host.collect(tmp_path, 0)


def test_results_carry_the_exit_code_the_outcomes_and_the_summary(tmp_path: Path) -> None:
    (tmp_path / "facts.json").write_text(json.dumps({"kernel": "6.1", "boot_seconds": 16.3}))
    (tmp_path / "exitcode").write_text("1")
    (tmp_path / "junit.xml").write_text(JUNIT)
    (tmp_path / "pytest.log").write_text("collected 4 items\n...\n===== 1 failed, 1 passed in 2.0s =====\n")
    results = host.collect(tmp_path, 0)
    assert (results.exit_code, len(results.outcomes), results.facts["boot_seconds"]) == (1, 4, 16.3)
    assert results.summary == "===== 1 failed, 1 passed in 2.0s ====="


def test_the_scratch_disk_is_found_by_its_size(tmp_path: Path) -> None:
    for name, sectors in (("sr0", 2048), ("loop0", 1 << 20), ("vda", 1 << 20), ("vdb", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "size").write_text(f"{sectors}\n")
    assert guest.find_disk(512 << 20, tmp_path) == "/dev/vda"
    assert guest.find_disk(1024, tmp_path) == "/dev/vdb"
    with pytest.raises(guest.GuestError, match=r"no block device of 4096 bytes .* \(have: loop0=536870912, sr0="):
        guest.find_disk(4096, tmp_path)


def test_controllers_need_a_v2_root(tmp_path: Path) -> None:
    with pytest.raises(guest.GuestError, match="not a cgroup v2 root"):
        guest.enable_controllers(tmp_path)


def test_accelerator_forced_or_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KOORDLET_VM_ACCEL", "TCG")
    assert host.choose_accel("vng", tmp_path) == host.Accel("tcg", "forced by KOORDLET_VM_ACCEL")
    monkeypatch.setenv("KOORDLET_VM_ACCEL", "hvf")
    with pytest.raises(host.VMError, match="must be kvm or tcg, got 'hvf'"):
        host.choose_accel("vng", tmp_path)


def test_kernel_override_must_exist(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KOORDLET_VM_KERNEL", str(tmp_path / "vmlinuz-none"))
    with pytest.raises(host.VMError, match="is not a file"):
        host.find_kernel()


def test_guest_environment_puts_this_venv_first_and_passes_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("KOORDLET_TEST_CACHE", "/cache")
    monkeypatch.setenv("SECRET_TOKEN", "x")
    env = host.guest_env()
    assert env["CI"] == "true" and env["KOORDLET_TEST_CACHE"] == "/cache" and "SECRET_TOKEN" not in env
    assert env["PATH"].split(":")[0] == str(Path(host.sys.executable).parent)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"


def test_shell_quoting_of_pytest_arguments() -> None:
    assert host._quote("tests/integration/native") == "tests/integration/native"
    assert host._quote("v2 and not slow") == "'v2 and not slow'"
    assert host._quote("it's") == "'it'\"'\"'s'"


def test_a_timed_out_guest_leaves_no_process_behind(tmp_path: Path) -> None:
    # vng -> virtme-run -> qemu: a hung KVM probe once left qemu spinning for the rest of a CI run.
    pidfile = tmp_path / "grandchild.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        host.run_group(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], timeout=1.0)
    grandchild = int(pidfile.read_text())

    def gone() -> bool:
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        return state == "Z"  # killed, waiting for its new parent to reap it

    wait_until(f"the grandchild {grandchild} to be killed", gone, timeout=5)


def test_a_silent_run_is_reported_where_it_waits_then_killed(tmp_path: Path) -> None:
    # The guest hung three times under TCG with no word from pytest's own timeout: the watchdog must name the
    # running test (partial lines are copied) and leave every process's state and Python stack behind.
    script = "import time; print('tests/x.py::test_stuck ', end='', flush=True); time.sleep(120)"
    log, report = tmp_path / "pytest.log", tmp_path / "stalled"
    code = guest.run_logged([sys.executable, "-X", "faulthandler", "-c", script], {}, log, stall_seconds=1.0,
                            report=report, sysrq=None)
    assert code == guest.STALLED_EXIT
    text = log.read_text()
    assert text.startswith("tests/x.py::test_stuck ")
    assert "no output for 1 s" in report.read_text()
    assert "--- pid " in report.read_text() and "time.sleep(120)" in report.read_text()  # the child, by cmdline
    assert "wchan=" in report.read_text()
    assert 'File "<string>", line 1 in <module>' in text  # faulthandler's dump after SIGABRT


def test_a_run_that_ends_returns_its_own_code(tmp_path: Path) -> None:
    code = guest.run_logged([sys.executable, "-c", "print('a'); print('b', end=''); raise SystemExit(3)"], {},
                            tmp_path / "pytest.log", stall_seconds=30.0, sysrq=None)
    assert code == 3
    assert (tmp_path / "pytest.log").read_text() == "a\nb"


def test_a_stalled_guest_is_an_error_with_the_report(tmp_path: Path) -> None:
    (tmp_path / "facts.json").write_text(json.dumps({"kernel": "6.1"}))
    (tmp_path / "exitcode").write_text(str(guest.STALLED_EXIT))
    (tmp_path / "stalled").write_text("--- pid 7: pytest\n  task 7 python D (disk sleep) wchan=p9_client_rpc\n")
    with pytest.raises(host.VMError, match=r"stalled and was killed(.|\n)*wchan=p9_client_rpc"):
        host.collect(tmp_path, 0)
