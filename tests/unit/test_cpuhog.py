"""The one-core CPU hog behind ``--cpu-hog`` and ``python -m tests.hog``: one busy process in a session of its
own, stopped by its PID, and a run that fails when the hog did not run the whole time."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cpuhog import MARKER, CpuHog, HogError
from tests.fixtures.waiting import wait_until

REPO_ROOT = Path(__file__).resolve().parents[2]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_hog_runs_in_its_own_session_until_stopped() -> None:
    hog = CpuHog()
    pid = hog.start()
    try:
        # Popen returns once exec closed the child's close-on-exec pipe, before the new command line is in place.
        wait_until("the hog's command line", lambda: MARKER in Path(f"/proc/{pid}/cmdline").read_text(), 10)
        assert os.getsid(pid) == pid != os.getsid(0)
        # It burns CPU: its CPU time grows (by how much depends on the host, so no figure is asserted).
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[11])
        wait_until("the hog to use CPU", lambda: int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1]
                                                     .split()[11]) > start, 10)
    finally:
        report = hog.stop()
    assert not alive(pid)
    assert re.fullmatch(rf"CPU hog pid {pid} stopped after \d+ s, used \d+ s of CPU \(\d\.\d\d cores\)", report)
    with pytest.raises(HogError, match="never started"):
        hog.stop()


def test_a_hog_that_died_during_the_run_fails_the_stop() -> None:
    hog = CpuHog()
    pid = hog.start()
    os.kill(pid, signal.SIGKILL)
    wait_until("the hog to die", lambda: not alive(pid), 10)
    with pytest.raises(HogError, match=rf"the CPU hog \(pid {pid}\) exited with code -9 during the run"):
        hog.stop()


def test_the_wrapper_passes_the_exit_code_through() -> None:
    done = subprocess.run([sys.executable, "-m", "tests.hog", "--", sys.executable, "-c", "raise SystemExit(7)"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 7, done.stderr
    started = re.search(r"CPU hog running: pid (\d+)", done.stderr)
    assert started is not None and f"CPU hog pid {started.group(1)} stopped" in done.stderr
    assert not alive(int(started.group(1)))


PROBE = """
import os, signal
from pathlib import Path

def test_hog_is_there(request):
    plugin = request.config.pluginmanager.get_plugin("tests.fixtures.cpuhog")
    pid = request.config.stash[plugin._HOG].pid
    assert "koordlet-test-cpu-hog" in Path(f"/proc/{pid}/cmdline").read_text()
    Path(os.environ["HOG_PID_FILE"]).write_text(str(pid))
    if os.environ.get("KILL_HOG"):
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            pass  # dead (a zombie until the plugin reaps it) before the session ends
"""


@pytest.mark.parametrize("kill", [False, True], ids=["stopped", "died"])
def test_the_pytest_option_names_the_hog_and_stops_it(tmp_path: Path, kill: bool) -> None:
    (tmp_path / "test_probe.py").write_text(PROBE)
    pid_file = tmp_path / "pid"
    env = {**os.environ, "HOG_PID_FILE": str(pid_file), "PYTHONPATH": str(REPO_ROOT), "KILL_HOG": "1" if kill else ""}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests.fixtures.cpuhog", "--cpu-hog",
         "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path / "test_probe.py")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env)
    pid = int(pid_file.read_text())
    assert f"CPU hog running: pid {pid}, one busy loop in its own session (--cpu-hog)" in done.stdout
    assert not alive(pid)
    if kill:  # the test passed, but the run was not under load all along: the run fails and says why
        assert done.returncode == 1 and "1 passed" in done.stdout, done.stdout + done.stderr
        assert f"CPU hog FAILED: the CPU hog (pid {pid}) exited with code -9 during the run" in done.stdout
    else:
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"CPU hog pid {pid} stopped after " in done.stdout
