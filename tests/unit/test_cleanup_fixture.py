"""tests/fixtures/cleanup.py: every removal is tried whatever the others did, and what is left fails the test.

The failing removals are real: rmdir of a directory that is not empty, a tree with a mount point inside.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.cleanup import Cleanup, CleanupFailed, kill_process, remove_tree


def test_every_removal_runs_last_in_first_out_and_the_failure_is_named(tmp_path: Path) -> None:
    first, busy, last = tmp_path / "first", tmp_path / "busy", tmp_path / "last"
    for directory in (first, busy, last):
        directory.mkdir()
    (busy / "still-here").write_text("")
    ran: list[str] = []
    cleanup = Cleanup("three directories")
    for directory in (first, busy, last):
        cleanup.push(f"directory {directory.name}", lambda d=directory: (ran.append(d.name), d.rmdir()))
    with pytest.raises(CleanupFailed) as failed:
        cleanup.close()
    assert ran == ["last", "busy", "first"], "pushed last, removed first; a failure stops nothing"
    assert not first.exists() and not last.exists() and busy.exists()
    assert failed.value.leftovers == [f"directory busy: OSError: [Errno 39] Directory not empty: '{busy}'"]
    assert str(failed.value).startswith("three directories: cleanup left 1 thing(s) behind:\n  - directory busy")


def test_attempts_and_found_leftovers_are_reported_together_at_close(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    cleanup = Cleanup("harness")
    assert cleanup.attempt("remove a missing file", lambda: (tmp_path / "absent").unlink(missing_ok=True))
    assert not cleanup.attempt("remove a non-empty directory", lambda: tmp_path.rmdir())
    cleanup.left("process 4242 still runs")
    with pytest.raises(CleanupFailed) as failed:
        cleanup.close()
    assert [item.split(":")[0] for item in failed.value.leftovers] == ["remove a non-empty directory",
                                                                         "process 4242 still runs"]
    cleanup.close()  # reported once: closing again has nothing left to say


def test_a_clean_teardown_raises_nothing(tmp_path: Path) -> None:
    with Cleanup("one directory") as cleanup:
        (tmp_path / "d").mkdir()
        cleanup.push("directory d", (tmp_path / "d").rmdir)
    assert not (tmp_path / "d").exists()


def test_the_bodys_error_stays_the_one_raised_with_the_leftovers_noted(tmp_path: Path) -> None:
    with pytest.raises(KeyError) as raised, Cleanup("rig") as cleanup:
        cleanup.push("the test directory", tmp_path.rmdir)  # not empty by then
        (tmp_path / "file").write_text("")
        raise KeyError("the test's own failure")
    assert raised.value.__notes__ == [f"rig: cleanup left 1 thing(s) behind:\n  - the test directory: OSError: "
                                      f"[Errno 39] Directory not empty: '{tmp_path}'"]


def test_remove_tree_removes_a_tree_and_accepts_an_absent_one(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "a" / "b").mkdir(parents=True)
    (tree / "a" / "b" / "f").write_text("x")
    os.symlink("/", tree / "link-out")  # removed as a link, never followed
    remove_tree(tree)
    assert not tree.exists()
    remove_tree(tree)


@pytest.mark.integration  # mounts a tmpfs: root
def test_remove_tree_removes_what_it_can_and_names_what_stays(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    mount_point = tree / "mounted"
    mount_point.mkdir(parents=True)
    (tree / "beside").write_text("x")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "koordlet-test", str(mount_point)], check=True)
    try:
        (mount_point / "inside").write_text("x")
        with pytest.raises(OSError, match=f"could not remove {tree}: .*{mount_point}.*busy"):
            remove_tree(tree)
        # Everything but the mount point itself went, its contents included.
        assert not (tree / "beside").exists() and list(mount_point.iterdir()) == []
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
    remove_tree(tree)
    assert not tree.exists()


def test_kill_process_kills_and_reaps_and_accepts_one_that_exited() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    kill_process(sleeper)
    assert sleeper.returncode == -9
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait(30)
    kill_process(done)
    assert done.returncode == 0
