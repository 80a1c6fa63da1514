"""Pleg on temporary directories (inotify works on tmpfs and ext4) and with a scripted inotify."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from koordlet import native
from koordlet.errors import CgroupGone, NativeError
from koordlet.statesinformer.pleg import WATCH_MASK, Pleg, is_pod_dir_name
from tests.fixtures.failures import ComponentFailures

UID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
LOGGER = "koordlet.statesinformer.pleg"


class Events:
    """An ``on_event`` callback whose calls can be waited for."""

    def __init__(self, fail_first: int = 0) -> None:
        self.calls = 0
        self._fail_first = fail_first
        self._cond = threading.Condition()

    def __call__(self) -> None:
        with self._cond:
            self.calls += 1
            self._cond.notify_all()
            if self.calls <= self._fail_first:
                raise RuntimeError("consumer bug")

    def wait(self, calls: int, timeout_seconds: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.calls >= calls, timeout_seconds)


def wait_until(predicate: Callable[[], bool], timeout_seconds: float = 5.0) -> bool:
    """Polls state that has no condition to wait on (which directories are watched), with a deadline."""
    deadline = time.monotonic() + timeout_seconds
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def run_pleg(failures: ComponentFailures) -> Iterator[Callable[..., Pleg]]:
    started: list[Pleg] = []

    def run(*args: object, **kwargs: object) -> Pleg:
        pleg = Pleg(*args, **kwargs)  # type: ignore[arg-type]
        pleg.start(failures.callback("pleg"))
        started.append(pleg)
        return pleg

    yield run
    for pleg in started:
        pleg.stop(5)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"pod{UID}", True),
        (f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice", True),
        (f"kubepods-burstable-pod{UID.replace('-', '_')}.slice", True),
        (f"kubepods-pod{UID.replace('-', '_')}.slice", True),
        ("besteffort", False),
        ("kubepods-besteffort.slice", False),
        ("pod", False),
        ("cri-containerd-abc.scope", False),
        ("0123456789abcdef", False),
    ],
)
def test_pod_dir_names(name: str, expected: bool) -> None:
    assert is_pod_dir_name(name) is expected


def test_pod_dirs_created_and_removed_are_events(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    events = Events()
    pleg = run_pleg([tmp_path], events)
    assert pleg.watched == (str(tmp_path),)

    (tmp_path / f"pod{UID}").mkdir()
    assert events.wait(1)
    (tmp_path / f"pod{UID}").rmdir()
    assert events.wait(2)
    assert pleg.events == 2


def test_other_entries_are_ignored(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    events = Events()
    pleg = run_pleg([tmp_path], events)
    # Not pods: a container-like directory, a QoS directory, a regular file named like a pod.
    (tmp_path / "0123abcd").mkdir()
    (tmp_path / "besteffort").mkdir()
    (tmp_path / "podfile").write_text("")
    (tmp_path / f"pod{UID}-file").touch()
    (tmp_path / "0123abcd").rmdir()
    # inotify keeps order: once the pod directory's event is seen, the ones before were judged.
    (tmp_path / "pod1234").mkdir()
    assert events.wait(1)
    assert pleg.events == 1


def test_systemd_pod_slice_is_an_event(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    events = Events()
    run_pleg([tmp_path], events)
    (tmp_path / f"kubepods-burstable-pod{UID.replace('-', '_')}.slice").mkdir()
    assert events.wait(1)


def test_moves_in_and_out_are_events(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    watched, outside = tmp_path / "watched", tmp_path / "outside"
    watched.mkdir()
    outside.mkdir()
    (outside / "pod1").mkdir()
    events = Events()
    pleg = run_pleg([watched], events)
    (outside / "pod1").rename(watched / "pod1")
    assert events.wait(1)
    (watched / "pod1").rename(outside / "pod1")
    assert events.wait(2)
    assert pleg.events == 2


def test_several_paths_are_watched(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    kubepods = tmp_path / "kubepods"
    besteffort = kubepods / "besteffort"
    besteffort.mkdir(parents=True)
    events = Events()
    pleg = run_pleg([kubepods, besteffort, besteffort], events)  # duplicates are watched once
    assert pleg.watched == (str(kubepods), str(besteffort))
    (kubepods / "podguaranteed").mkdir()
    assert events.wait(1)
    (besteffort / "podbe").mkdir()
    assert events.wait(2)


def test_missing_directory_is_retried(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    besteffort = tmp_path / "kubepods" / "besteffort"
    events = Events()
    pleg = run_pleg([besteffort], events, retry_interval_seconds=0.02)
    assert pleg.watched == ()
    # kubelet creates the QoS directory, and a pod in it, before the retry arms the watch: the pod
    # found there at arming time is an event too.
    (besteffort / "pod1").mkdir(parents=True)
    assert events.wait(1)
    assert wait_until(lambda: pleg.watched == (str(besteffort),))
    (besteffort / "pod2").mkdir()
    assert events.wait(2)


def test_created_child_is_armed_at_once(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    kubepods = tmp_path / "kubepods"
    kubepods.mkdir()
    besteffort = kubepods / "besteffort"
    events = Events()
    # No retry in this test's lifetime: only the IN_CREATE seen in kubepods can arm besteffort.
    pleg = run_pleg([kubepods, besteffort], events, retry_interval_seconds=3600)
    besteffort.mkdir()
    assert wait_until(lambda: str(besteffort) in pleg.watched)
    (besteffort / "pod1").mkdir()
    assert events.wait(1)
    assert pleg.events == 1


def test_removed_directory_is_rearmed_when_it_returns(tmp_path: Path, run_pleg: Callable[..., Pleg]) -> None:
    besteffort = tmp_path / "besteffort"
    besteffort.mkdir()
    events = Events()
    pleg = run_pleg([besteffort], events, retry_interval_seconds=0.02)
    besteffort.rmdir()
    assert wait_until(lambda: pleg.watched == ())
    besteffort.mkdir()
    assert wait_until(lambda: pleg.watched == (str(besteffort),))
    (besteffort / "pod1").mkdir()
    assert events.wait(1)


def test_callback_error_does_not_stop_events(
    tmp_path: Path, run_pleg: Callable[..., Pleg], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER)
    events = Events(fail_first=1)
    run_pleg([tmp_path], events)
    (tmp_path / "pod1").mkdir()
    assert events.wait(1)
    (tmp_path / "pod2").mkdir()
    assert events.wait(2)
    assert [r.getMessage() for r in caplog.records] == ["pleg event callback failed"]


def test_stop_is_prompt_and_releases_the_fd(tmp_path: Path, failures: ComponentFailures) -> None:
    opened: list[native.Inotify] = []

    def factory() -> native.Inotify:
        opened.append(native.Inotify())
        return opened[-1]

    pleg = Pleg([tmp_path], Events(), inotify_factory=factory)
    pleg.start(failures.callback("pleg"))
    began = time.monotonic()
    pleg.stop(5)
    # Woken through its pipe, not by a timeout: far below the 5 s allowed.
    assert time.monotonic() - began < 2
    assert opened[0].fileno() == -1
    pleg.stop(5)  # idempotent


class ScriptedInotify:
    """An inotify whose events the test pushes; readiness is a real pipe, so select() works as usual."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        self._events: list[native.InotifyEvent] = []
        self._lock = threading.Lock()
        self.watches: dict[str, int] = {}
        self.added: list[str] = []
        self.removed: list[int] = []
        self.closed = False

    def fileno(self) -> int:
        return self._r

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        assert mask == WATCH_MASK
        if not os.path.isdir(path):
            raise CgroupGone(2, f"inotify watch on {path}: No such file or directory")
        self.added.append(os.fspath(path))
        self.watches[os.fspath(path)] = len(self.added)  # a new wd each time, like the kernel
        return len(self.added)

    def remove_watch(self, wd: int) -> None:
        self.removed.append(wd)

    def push(self, *events: native.InotifyEvent) -> None:
        with self._lock:
            self._events.extend(events)
        os.write(self._w, b"x")

    def read(self) -> list[native.InotifyEvent]:
        with self._lock:
            events, self._events = self._events, []
        os.read(self._r, 1024)
        return events

    def close(self) -> None:
        self.closed = True
        os.close(self._r)
        os.close(self._w)


def test_queue_overflow_asks_for_a_resync(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                          failures: ComponentFailures) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    fake = ScriptedInotify()
    events = Events()
    pleg = Pleg([tmp_path], events, inotify_factory=lambda: fake)
    pleg.start(failures.callback("pleg"))
    try:
        fake.push(native.InotifyEvent(-1, native.IN_Q_OVERFLOW, ""))
        assert events.wait(1)
        assert pleg.overflows == 1 and pleg.events == 0
        assert pleg.watched == (str(tmp_path),)  # every watch re-checked and still there
        assert [r.getMessage() for r in caplog.records] == ["pleg inotify queue overflowed, asking for a resync"]
    finally:
        pleg.stop(5)
    assert fake.closed


def test_events_read_together_make_one_call(tmp_path: Path, failures: ComponentFailures) -> None:
    fake = ScriptedInotify()
    events = Events()
    pleg = Pleg([tmp_path], events, inotify_factory=lambda: fake)
    pleg.start(failures.callback("pleg"))
    try:
        wd = fake.watches[str(tmp_path)]
        fake.push(*(native.InotifyEvent(wd, native.IN_CREATE | native.IN_ISDIR, f"pod{i}") for i in range(5)))
        assert events.wait(1)
        fake.push(native.InotifyEvent(wd, native.IN_DELETE | native.IN_ISDIR, "pod9"))
        assert events.wait(2)
        assert pleg.events == 6 and events.calls == 2
    finally:
        pleg.stop(5)


def test_silently_removed_directory_is_found_by_the_check(tmp_path: Path, failures: ComponentFailures) -> None:
    # What cgroupfs does: the directory goes and comes back, and the watch hears nothing of it.
    besteffort = tmp_path / "besteffort"
    besteffort.mkdir()
    fake = ScriptedInotify()
    events = Events()
    pleg = Pleg([besteffort], events, inotify_factory=lambda: fake, retry_interval_seconds=0.01)
    pleg.start(failures.callback("pleg"))
    try:
        besteffort.rmdir()
        assert wait_until(lambda: pleg.watched == ())
        assert fake.removed == [1]  # the dead watch was released
        besteffort.mkdir()
        (besteffort / "pod1").mkdir()
        assert events.wait(1)  # re-armed, and the pod made meanwhile asks for a resync
        assert pleg.watched == (str(besteffort),) and fake.watches[str(besteffort)] > 1
    finally:
        pleg.stop(5)


def test_child_removed_in_a_watched_parent_is_dropped_at_once(tmp_path: Path, failures: ComponentFailures) -> None:
    kubepods = tmp_path / "kubepods"
    besteffort = kubepods / "besteffort"
    besteffort.mkdir(parents=True)
    fake = ScriptedInotify()
    pleg = Pleg([kubepods, besteffort], Events(), inotify_factory=lambda: fake, retry_interval_seconds=3600)
    pleg.start(failures.callback("pleg"))
    try:
        besteffort.rmdir()
        fake.push(native.InotifyEvent(fake.watches[str(kubepods)], native.IN_DELETE | native.IN_ISDIR, "besteffort"))
        assert wait_until(lambda: pleg.watched == (str(kubepods),))
        assert fake.removed == [fake.watches[str(besteffort)]]
    finally:
        pleg.stop(5)


def test_start_fails_when_inotify_is_unavailable(tmp_path: Path, failures: ComponentFailures) -> None:
    def factory() -> native.Inotify:
        raise NativeError(24, "inotify_init1: Too many open files")

    pleg = Pleg([tmp_path], Events(), inotify_factory=factory)
    with pytest.raises(NativeError):
        pleg.start(failures.callback("pleg"))


class CountingInotify(native.Inotify):
    def __init__(self) -> None:
        super().__init__()
        self.add_calls = 0

    def add_watch(self, path: str | os.PathLike[str], mask: int) -> int:
        self.add_calls += 1
        return super().add_watch(path, mask)


def test_unwatchable_path_is_logged_once(tmp_path: Path, run_pleg: Callable[..., Pleg],
                                         caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    (tmp_path / "file").write_text("")
    below_file = tmp_path / "file" / "kubepods"  # ENOTDIR: not the expected "missing", a real problem
    inotify = CountingInotify()
    pleg = run_pleg([below_file], Events(), retry_interval_seconds=0.01, inotify_factory=lambda: inotify)
    assert wait_until(lambda: inotify.add_calls >= 5)
    assert pleg.watched == ()
    assert len(caplog.records) == 1
    record = caplog.records[0]
    assert record.levelno == logging.WARNING and "Not a directory" in record.__dict__["reason"]


def test_missing_path_is_logged_once_at_debug(tmp_path: Path, run_pleg: Callable[..., Pleg],
                                              caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    inotify = CountingInotify()
    run_pleg([tmp_path / "besteffort"], Events(), retry_interval_seconds=0.01, inotify_factory=lambda: inotify)
    assert wait_until(lambda: inotify.add_calls >= 5)
    assert [(r.levelno, r.__dict__["reason"]) for r in caplog.records] == [(logging.DEBUG, "does not exist (yet)")]
    (tmp_path / "besteffort").mkdir()
    assert wait_until(lambda: len(caplog.records) == 2)
    assert caplog.records[1].getMessage() == "pleg watching directory"


def test_rejects_a_bad_retry_interval(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="retry_interval_seconds"):
        Pleg([tmp_path], Events(), retry_interval_seconds=0)
