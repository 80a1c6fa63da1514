"""Test doubles for the resource executor: a settable clock, a writer that records and can fail, an
in-memory audit, and a metrics sink for shadow mode."""

from __future__ import annotations

from dataclasses import dataclass, field

from koordlet.resourceexecutor import AuditEntry, FileWriter


@dataclass
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class RecordingWriter:
    """Writes through :class:`FileWriter` to the fake tree, recording every write (path, text) and the
    content of ``watch`` files right after each write; ``fail`` maps a path to the errno its writes
    raise (nothing is written then)."""

    fail: dict[str, int] = field(default_factory=dict)
    writes: list[tuple[str, str]] = field(default_factory=list)
    attempts: list[tuple[str, str]] = field(default_factory=list)
    watch: list[str] = field(default_factory=list)
    snapshots: list[dict[str, str]] = field(default_factory=list)
    reads: int = 0
    real: FileWriter = field(default_factory=FileWriter)

    def read(self, path: str) -> str:
        self.reads += 1
        return self.real.read(path)

    def write(self, path: str, text: str) -> None:
        self.attempts.append((path, text))
        if path in self.fail:
            code = self.fail[path]
            raise OSError(code, "injected", path)
        self.real.write(path, text)
        self.writes.append((path, text))
        self.snapshots.append({w: self.real.read(w) for w in self.watch})

    def calls_to(self, path: str) -> int:
        return sum(1 for p, _ in self.attempts if p == path)


@dataclass
class MemoryAudit:
    entries: list[AuditEntry] = field(default_factory=list)

    def record(self, entry: AuditEntry) -> None:
        self.entries.append(entry)


@dataclass
class IntendedSink:
    """A write sink for code that must write nothing: counts shadow mode's intentions (kind, who)."""

    counted: list[tuple[str, str]] = field(default_factory=list)

    def observe(self, kind: str, ok: bool, seconds: float) -> None:
        raise AssertionError(f"a write of {kind} was observed: shadow mode writes nothing")

    def intended(self, kind: str, strategy: str) -> None:
        self.counted.append((kind, strategy))
