"""A resctrl tree on tmp_path and a fake kernel behind the executor's writer: ``mkdir`` fills a group with
the root's schemata and an empty ``tasks``; a task written to a group leaves every other group (resctrl puts a
task in exactly one); ``rmdir`` hands the group's tasks back to the root; tasks in ``exited`` answer ESRCH.
Every schemata write is recorded as (group, text)."""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from koordlet.resourceexecutor.resctrl import ResctrlExecutor, ResctrlFileWriter
from tests.unit.resourceexecutor.fakes import FakeClock, MemoryAudit

INTEL = "GenuineIntel"
AMD = "AuthenticAMD"


def root_schemata(cbm_mask: str, domains: tuple[int, ...], mb: str | None, cat: tuple[str, ...] = ("L3",)) -> str:
    # The kernel right-aligns the resource names.
    lines = [f"    {res}:" + ";".join(f"{d}={cbm_mask}" for d in domains) for res in cat]
    if mb is not None:
        lines.append("    MB:" + ";".join(f"{d}={mb}" for d in domains))
    return "\n".join(lines) + "\n"


def build_tree(root: Path, *, cbm_mask: str = "7ff", domains: tuple[int, ...] = (0, 1), vendor: str = INTEL,
               min_cbm_bits: str = "1", cat: tuple[str, ...] = ("L3",), mba: bool = True) -> None:
    """info/<cat>/{cbm_mask,min_cbm_bits}, info/MB/{min_bandwidth,bandwidth_gran} (Intel 10/10, AMD 0/1) and
    a root schemata listing ``domains``."""
    amd = vendor == AMD
    root.mkdir(parents=True, exist_ok=True)
    mb = ("2048" if amd else "100") if mba else None
    (root / "schemata").write_text(root_schemata(cbm_mask, domains, mb, cat))
    (root / "tasks").write_text("")
    for res in cat:
        (root / "info" / res).mkdir(parents=True, exist_ok=True)
        (root / "info" / res / "cbm_mask").write_text(cbm_mask + "\n")
        (root / "info" / res / "min_cbm_bits").write_text(min_cbm_bits + "\n")
    if mba:
        (root / "info" / "MB").mkdir(parents=True, exist_ok=True)
        (root / "info" / "MB" / "min_bandwidth").write_text("0\n" if amd else "10\n")
        (root / "info" / "MB" / "bandwidth_gran").write_text("1\n" if amd else "10\n")
    (root / "info" / "last_cmd_status").write_text("ok\n")


@dataclass
class FakeKernel:
    root: str
    exited: set[int] = field(default_factory=set)
    schemata_writes: list[tuple[str, str]] = field(default_factory=list)
    dirs: list[tuple[str, str]] = field(default_factory=list)
    real: ResctrlFileWriter = field(default_factory=ResctrlFileWriter)

    def group_of(self, path: str) -> str:
        rel = os.path.relpath(os.path.dirname(path), self.root)
        return "" if rel == "." else rel

    def read(self, path: str) -> str:
        return self.real.read(path)

    def write(self, path: str, text: str) -> None:
        if not os.path.exists(path):
            raise OSError(errno.ENOENT, "No such file or directory", path)
        if os.path.basename(path) == "tasks":
            tid = int(text)
            if tid in self.exited:
                raise OSError(errno.ESRCH, "No such process", path)
            for group in ["", *self.groups()]:
                self._set_tasks(group, [t for t in self.tasks(group) if t != tid])
            self._set_tasks(self.group_of(path), [*self.tasks(self.group_of(path)), tid])
            return
        self.schemata_writes.append((self.group_of(path), text))
        self.real.write(path, text)

    def mkdir(self, path: str) -> None:
        self.dirs.append(("mkdir", os.path.basename(path)))
        os.mkdir(path)
        shutil.copy(os.path.join(self.root, "schemata"), os.path.join(path, "schemata"))
        Path(path, "tasks").write_text("")

    def rmdir(self, path: str) -> None:
        self.dirs.append(("rmdir", os.path.basename(path)))
        moved = self.tasks(os.path.basename(path))
        shutil.rmtree(path)
        self._set_tasks("", [*self.tasks(""), *moved])

    # -------------------------------------------------------------------------------- test helpers

    def groups(self) -> list[str]:
        return sorted(n for n in os.listdir(self.root) if n != "info" and os.path.isdir(os.path.join(self.root, n)))

    def tasks(self, group: str) -> list[int]:
        return [int(t) for t in Path(self.root, group, "tasks").read_text().split()]

    def schemata(self, group: str) -> str:
        return Path(self.root, group, "schemata").read_text()

    def _set_tasks(self, group: str, tids: list[int]) -> None:
        Path(self.root, group, "tasks").write_text("".join(f"{t}\n" for t in tids))


def make_executor(root: Path, kernel: FakeKernel, clock: FakeClock, *, amd: bool = False) -> ResctrlExecutor:
    return ResctrlExecutor(str(root), clock, MemoryAudit(), None, 60.0, writer=kernel, mb_max=2048 if amd else 100)
