"""A fake kernel behind the kernel-knob executor's writer, for ``sched_features``."""

from __future__ import annotations

import errno
from dataclasses import dataclass, field
from pathlib import Path

from koordlet.resourceexecutor.writer import FileWriter
from koordlet.system.hostpaths import HostPaths
from koordlet.system.sysfiles import sched_features_path


@dataclass
class SchedFeaturesKernel:
    """The kernel's side of ``sched_features``: a write of ``NAME`` / ``NO_NAME`` flips that one feature (a
    plain file would be overwritten whole); an unknown name is EINVAL."""

    path: str
    real: FileWriter = field(default_factory=FileWriter)
    writes: list[str] = field(default_factory=list)

    def read(self, path: str) -> str:
        return self.real.read(path)

    def write(self, path: str, text: str) -> None:
        if path != self.path:
            self.real.write(path, text)
            return
        name = text.strip().removeprefix("NO_")
        words = self.real.read(path).split()
        if name not in [w.removeprefix("NO_") for w in words]:
            raise OSError(errno.EINVAL, "invalid", path)
        words = [text.strip() if w.removeprefix("NO_") == name else w for w in words]
        Path(path).write_text(" ".join(words) + "\n")
        self.writes.append(text)


def with_features(paths: HostPaths, text: str = "GENTLE_FAIR_SLEEPERS NO_HRTICK WAKEUP_PREEMPTION\n"
                  ) -> SchedFeaturesKernel:
    path = Path(sched_features_path(paths))
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return SchedFeaturesKernel(str(path))
