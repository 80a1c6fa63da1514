"""Every test here reads fake trees with files opened per read (no kept fds).

On cgroupfs a kept-open file of a removed cgroup answers ENODEV, which the C core treats as gone; on the
tmpfs/ext4 of a fake tree a kept fd of an unlinked file still reads its old bytes, so a "removed" cgroup
would keep reporting.  Opening per read is the only way a fake tree can show removal as the kernel does;
the fd budget is process-wide, and another test (or the daemon tests) may have raised it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from koordlet import native


@pytest.fixture(autouse=True)
def open_per_read() -> Iterator[None]:
    previous = native.set_fd_budget(0)
    yield
    native.set_fd_budget(previous)
