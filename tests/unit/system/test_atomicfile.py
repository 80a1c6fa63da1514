"""The one atomic file replacement: content and mode exact whatever the umask, no temporary file left after
a success or a failure, never a write through a planted symlink, directory fsync failures raised or handed
to the caller."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from koordlet.system import atomicfile


def test_replaces_the_file_with_the_mode_asked_for(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old\n")
    old_umask = os.umask(0o077)
    try:
        atomicfile.write(target, b"new\n", mode=0o644)
    finally:
        os.umask(old_umask)
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    atomicfile.write(target, b"private\n", mode=0o600, sync_dir=False)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_a_failed_rename_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "a-directory"
    (target / "child").mkdir(parents=True)
    with pytest.raises(OSError):
        atomicfile.write(target, b"x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]


def test_a_planted_temporary_name_is_skipped_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / ".f.koordlet-guessed.tmp").symlink_to(victim)
    names = iter(["guessed", "fresh"])
    monkeypatch.setattr(atomicfile, "random_suffix", lambda: next(names))
    atomicfile.write(tmp_path / "f", b"data\n")
    assert victim.read_text() == "precious\n" and (tmp_path / "f").read_text() == "data\n"


def test_directory_sync_failures_are_raised_or_handed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(directory: object) -> None:
        raise OSError(errno.EIO, "fsync failed")

    monkeypatch.setattr(atomicfile, "fsync_directory", broken)
    with pytest.raises(OSError, match="fsync failed"):
        atomicfile.write(tmp_path / "f", b"1")
    seen: list[OSError] = []
    atomicfile.write(tmp_path / "f", b"2", on_dir_sync_error=seen.append)
    assert (tmp_path / "f").read_text() == "2" and [e.errno for e in seen] == [errno.EIO]
