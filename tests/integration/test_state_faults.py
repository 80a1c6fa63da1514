"""State-dir faults for real: a full disk (a tiny tmpfs this test mounts), files damaged before a start, and a
state dir on a host folder shared into the v2 guest (9p), where SQLite's WAL cannot map its index.

What each must show: the daemon (or the store) starts, says once what it dropped or which mode it fell back
to, naming the file, and keeps running; a failure streak is logged once and its end once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from koordlet.apis.proto.companion.v1 import companion_pb2
from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from koordlet.apis.proto.cri.runtime.v1 import api_pb2_grpc as cri_grpc
from koordlet.log import TextFormatter
from koordlet.metriccache import CacheSettings, MetricCache
from koordlet.metriccache.cache import series_key
from koordlet.metriccache.component import MetricCacheComponent
from koordlet.statesinformer.companion import CompanionClient
from koordlet.statesinformer.companionslo import CompanionNodeSLOSource
from koordlet.statesinformer.nodeslo import NodeSLOHolder
from runtimeproxy.cli import FieldsFormatter
from runtimeproxy.store import Store
from tests.fixtures.cleanup import Cleanup, remove_tree
from tests.fixtures.debugclient import get
from tests.fixtures.failures import ComponentFailures
from tests.fixtures.isolation import koordlet_run_args, private_settings, write_config
from tests.fixtures.waiting import wait_until
from tests.unit.runtimeproxy.test_store import CTR_ID, POD2_ID, POD_ID, container_request, pod_request

REPO_ROOT = Path(__file__).resolve().parents[2]
DISK_LOGGER = "koordlet.metriccache.disk"
START_SECONDS = 180.0
"""Up to the debug socket, and up to the first collection: 20 s in the v2 guest on an idle host, over 60 s when that
guest is emulated (no KVM) with a CPU hog beside it; a bound, not an expectation (the wait ends when it holds)."""
STOP_SECONDS = 30.0
T0 = 1_700_000_000.0
PERSISTED_SPEC = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": 61}}


# ---------------------------------------------------------------------------------------------- a full disk


@contextlib.contextmanager
def tiny_tmpfs(size: str = "512k") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on a new directory under /tmp; unmounted and removed afterwards, and the
    test fails when that cannot be done (a store left open keeps it busy)."""
    where = Path(tempfile.mkdtemp(prefix="koordlet-statefault-", dir="/tmp"))
    with Cleanup(f"tmpfs on {where}") as cleanup:
        cleanup.push(f"directory {where}", where.rmdir)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)], check=True,
                       capture_output=True)
        cleanup.push(f"tmpfs mounted on {where}", lambda: unmount(where))
        yield where


def unmount(where: Path) -> None:
    done = subprocess.run(["umount", str(where)], capture_output=True, text=True)
    if done.returncode != 0:
        # Detached so that nothing leaks past the run, and still a failure: something kept it busy.
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
        raise OSError(f"umount {where} failed ({done.stderr.strip()}); detached it lazily")


def fill_up(directory: Path) -> Path:
    """Writes a file until its file system is full (ENOSPC); delete the file to give the space back."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    block = b"\xa5" * 4096
    try:
        while True:
            os.write(fd, block)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    assert os.statvfs(directory).f_bavail == 0, "the file system still has free blocks"
    return filler


def disk_messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    """The store's records at ``level`` as the agent's text log lines: the message, then its fields."""
    formatter = TextFormatter()
    return [formatter.format(r) for r in caplog.records if r.name == DISK_LOGGER and r.levelno == level]


def test_history_writes_on_a_full_disk_are_dropped_with_one_warning_and_resume_after(
        caplog: pytest.LogCaptureFixture, failures: ComponentFailures) -> None:
    with tiny_tmpfs() as state:
        clock = [T0]
        cache = MetricCache(CacheSettings(path=state / "metrics.db"), lambda: clock[0])
        component = MetricCacheComponent(cache, flush_interval_seconds=0.02, prune_every=5)
        series = [("node_cpu_usage", (("cpu", str(k)),)) for k in range(20)]
        rng = random.Random(3)
        stop = threading.Event()

        def collect() -> None:  # a collector: a sample per series every few milliseconds
            while not stop.wait(0.002):
                clock[0] += 1.0
                for name, labels in series:
                    cache.append(name, labels, clock[0], rng.random())

        collector = threading.Thread(target=collect, name="test-collector", daemon=True)
        with caplog.at_level(logging.INFO, logger=DISK_LOGGER):
            component.start(failures.callback("metriccache"))
            collector.start()
            try:
                wait_until("history on disk", lambda: cache.disk.read(series_key(*series[0]), 0, clock[0])[0], 10)
                filler = fill_up(state)
                wait_until("a failed history write", lambda: cache.disk.failing, 20)
                assert cache.disk.failing == "SQLITE_FULL"
                dropped = cache.disk.dropped_chunks
                wait_until("more failed writes", lambda: cache.disk.dropped_chunks >= dropped + 5 * len(series), 20)
                # The flusher thread lives on and the rings keep serving the newest samples.
                assert component.running
                # The collector moves the clock on only after appending every series at the time before.
                before = clock[0]
                newest = cache.latest(*series[0])
                assert newest is not None and newest[0] >= before - 1, (newest, before)
                (warning,) = disk_messages(caplog, logging.WARNING)
                assert "metric store failing" in warning and f"path={state / 'metrics.db'}" in warning, warning
                assert 'action="writing history"' in warning and 'error="database or disk is full' in warning, \
                    warning
                assert not disk_messages(caplog, logging.INFO) and not disk_messages(caplog, logging.ERROR)

                filler.unlink()
                wait_until("history writes working again", lambda: cache.disk.failing is None, 20)
                resumed_at = clock[0]
                wait_until("new history on disk",
                           lambda: cache.disk.read(series_key(*series[0]), resumed_at, 1e12)[0], 10)
                (info,) = disk_messages(caplog, logging.INFO)
                assert "metric store works again" in info and f"path={state / 'metrics.db'}" in info, info
                assert len(disk_messages(caplog, logging.WARNING)) == 1
            finally:
                stop.set()
                collector.join(10)
                component.stop(10)


def test_a_store_opened_on_a_full_disk_keeps_history_in_memory_and_says_so_once(
        caplog: pytest.LogCaptureFixture) -> None:
    with tiny_tmpfs() as state:
        fill_up(state)
        path = state / "metrics.db"
        with caplog.at_level(logging.INFO, logger=DISK_LOGGER):
            cache = MetricCache(CacheSettings(path=path), lambda: T0)
        try:
            (line,) = disk_messages(caplog, logging.ERROR)
            assert "metric store cannot be used" in line and f"path={path}" in line, line
            assert "database or disk is full" in line, line
            assert "keeping history in memory only" in line
            assert cache.disk.journal_mode == "memory"
            cache.append("node_cpu_usage", (), T0, 0.5)
            assert cache.flush() == 1 and cache.disk.read("node_cpu_usage{}", 0, T0) == ([T0], [0.5])
        finally:
            cache.close()
        assert not [p.name for p in state.iterdir() if p.name.startswith("metrics.db.corrupt")], \
            "a full disk is not a damaged file: nothing is moved aside"


def test_checkpoint_writes_on_a_full_disk_fail_once_per_streak_and_catch_up(
        caplog: pytest.LogCaptureFixture) -> None:
    with tiny_tmpfs("256k") as state:
        path = state / "checkpoint.json"
        store = Store(str(path), persist_delay_seconds=0.01, write_retry_seconds=0.05)
        try:
            with caplog.at_level(logging.INFO, logger="runtimeproxy.store"):
                store.put_pod(POD_ID, pod_request())
                store.flush()
                filler = fill_up(state)
                store.put_container(CTR_ID, POD_ID, container_request())
                wait_until("three failed checkpoint writes", lambda: store.failed_writes >= 3)
                store.put_pod(POD2_ID, pod_request("other"))
                wait_until("more failed checkpoint writes", lambda: store.failed_writes >= 6)
                (error,) = [FieldsFormatter("%(message)s").format(r) for r in caplog.records
                            if r.levelno == logging.ERROR]
                assert "cannot write the checkpoint" in error and f"path={path}" in error, error
                assert "error=No space left on device" in error, error

                filler.unlink()
                wait_until("the checkpoint written again", lambda: store.failed_writes == 0)
                (info,) = [FieldsFormatter("%(message)s").format(r) for r in caplog.records
                           if r.levelno == logging.INFO]
                assert "checkpoint written again" in info and f"path={path}" in info, info
        finally:
            store.close()
        assert sorted(p.name for p in state.iterdir()) == ["checkpoint.json"], "a failed write left its temp file"
        reopened = Store(str(path))
        reopened.load()
        assert set(reopened.pods()) == {POD_ID, POD2_ID} and set(reopened.containers()) == {CTR_ID}


def nodeslo_update(generation: int, threshold: int) -> companion_pb2.NodeSLOUpdate:
    spec = {"resourceUsedThresholdWithBE": {"enable": True, "cpuSuppressThresholdPercent": threshold}}
    return companion_pb2.NodeSLOUpdate(generation=generation, spec_json=json.dumps(spec).encode(),
                                       origin="file:/etc/slo.yaml", instance="i-1")


def test_persisting_the_nodeslo_on_a_full_disk_fails_once_per_streak_and_leaves_no_temp_file(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    client = CompanionClient(f"unix:{tmp_path / 'absent.sock'}", "token", "node-1")
    try:
        with tiny_tmpfs("64k") as state:
            path = state / "nodeslo-companion.json"
            source = CompanionNodeSLOSource(client, NodeSLOHolder(), path)
            logger = "koordlet.statesinformer.companionslo"
            with caplog.at_level(logging.INFO, logger=logger):
                filler = fill_up(state)
                for generation in (1, 2, 3):
                    assert source.apply(nodeslo_update(generation, 50 + generation))
                (warning,) = [r for r in caplog.records if r.name == logger and r.levelno == logging.WARNING]
                assert warning.__dict__["path"] == str(path) and warning.__dict__["error"] == "No space left on device"
                assert sorted(p.name for p in state.iterdir()) == ["filler"], "no temp file left behind"

                filler.unlink()
                assert source.apply(nodeslo_update(4, 54))
                assert [r.getMessage() for r in caplog.records if r.name == logger and r.levelno == logging.INFO
                        and r.getMessage() == "NodeSLO persisted again"] == ["NodeSLO persisted again"]
            assert json.loads(path.read_text())["generation"] == 4
    finally:
        client.close()


# ---------------------------------------------------------------------------------------------- the daemons


@dataclass
class Koordlet:
    proc: subprocess.Popen[bytes]
    socket: Path
    log: Path

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def get(self, path: str) -> Any:
        status, body = get(str(self.socket), path)
        assert status == 200, (path, status, body)
        return body

    def running(self) -> bool:
        """The process lives and every component says it runs."""
        components = self.get("/v1/status")["components"]
        return self.proc.poll() is None and bool(components) and all(c["running"] for c in components)

    def collecting(self) -> bool:
        """Node usage of the last 3 s answers from the metric cache: collectors run and the cache serves."""
        return self.get("/v1/metrics?window=3")["node"] is not None

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(STOP_SECONDS)


# `koordlet run` in a process where the kernel refuses shared file mappings, as a 9p mount without a cache does.
NO_SHARED_MMAP_MAIN = (
    "import runpy, sys\n"
    "from tests.fixtures.nosharedmmap import forbid_shared_file_mmap\n"
    "forbid_shared_file_mmap()\n"
    "sys.argv[0] = 'koordlet'\n"
    "runpy.run_module('koordlet.cli.koordlet', run_name='__main__')\n"
)


@contextlib.contextmanager
def koordlet(tmp: Path, state_dir: Path, no_shared_mmap: bool = False, **over: Any) -> Iterator[Koordlet]:
    """``koordlet run --standalone`` with a private prefix (that does not exist: no pods), debug socket and
    state dir ``state_dir``; stopped (killed if it must be) when the block ends.  ``no_shared_mmap``: in a
    process that cannot map files shared (tests/fixtures/nosharedmmap.py)."""
    sock = tmp / "debug.sock"
    settings = private_settings(
        tmp, f"koordlet-test-{os.getpid()}-absent", standalone=True, discoverKubepods=False, stateDir=str(state_dir),
        server={"addr": "127.0.0.1:0", "debugSocket": str(sock)}, qos={"evictor": "dry-run"},
        runtimeHooks={"enableServer": False, "enableNri": False}, **over)
    args = koordlet_run_args(["--standalone", "--config", str(write_config(tmp / "koordlet.yaml", settings))])
    log = tmp / "koordlet.log"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    with open(log, "ab") as out:
        main = ["-c", NO_SHARED_MMAP_MAIN] if no_shared_mmap else ["-m", "koordlet.cli.koordlet"]
        proc = subprocess.Popen([sys.executable, *main, "run", *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=REPO_ROOT)
    agent = Koordlet(proc, sock, log)
    try:
        wait_until("the debug socket", lambda: proc.poll() is not None or sock.exists(), START_SECONDS)
        assert proc.poll() is None, f"koordlet exited {proc.returncode}:\n{log.read_text(errors='replace')}"
        yield agent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(STOP_SECONDS)


def good_persisted_nodeslo() -> bytes:
    return json.dumps({"format": 1, "generation": 4, "instance": "i-1", "origin": "file:/etc/slo.yaml",
                       "spec": PERSISTED_SPEC}, sort_keys=True).encode() + b"\n"


def test_koordlet_starts_on_a_damaged_store_and_nodeslo_names_what_it_dropped_and_runs(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    metrics_db = state / "metrics.db"
    metrics_db.write_bytes(random.Random(1).randbytes(20_000))
    nodeslo = state / "nodeslo-companion.json"
    persisted = good_persisted_nodeslo()
    nodeslo.write_bytes(persisted[:len(persisted) // 2])  # cut short, as by a crash mid-write without a rename
    with koordlet(tmp_path, state, companion={"address": f"unix:{tmp_path / 'absent.sock'}"}) as agent:
        wait_until("koordlet collecting with every component running",
                   lambda: agent.running() and agent.collecting(), START_SECONDS)
        store_lines = [line for line in agent.lines() if "metric store" in line]
        assert len(store_lines) == 1, store_lines
        assert "metric store moved aside" in store_lines[0] and f"path={metrics_db}" in store_lines[0]
        assert 'problem="unreadable: file is not a database' in store_lines[0], store_lines[0]
        assert " ERROR " in store_lines[0] and f"moved_to={metrics_db}.corrupt-" in store_lines[0], store_lines[0]
        nodeslo_lines = [line for line in agent.lines() if "persisted NodeSLO" in line]
        assert len(nodeslo_lines) == 1, nodeslo_lines
        assert f"path={nodeslo}" in nodeslo_lines[0] and "not valid JSON" in nodeslo_lines[0], nodeslo_lines[0]
        assert "dropped" in nodeslo_lines[0] and f"moved_to={nodeslo}.bad" in nodeslo_lines[0], nodeslo_lines[0]
        assert agent.get("/v1/slo")["origin"] == "defaults"
        assert agent.stop() == 0, "\n".join(agent.lines()[-30:])
    assert not [line for line in agent.lines() if "Traceback" in line]
    with contextlib.closing(sqlite3.connect(metrics_db)) as db:  # the new store got the history of this run
        assert db.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0


def test_koordlet_where_wal_cannot_map_its_index_falls_back_says_so_once_and_runs(tmp_path: Path) -> None:
    """The failure of a state dir on a 9p share (koordlet died at start with ``sqlite3.OperationalError: disk
    I/O error`` from metriccache/disk.py), met on this host by refusing shared file mappings to the daemon."""
    state = tmp_path / "state"
    for run in (1, 2):  # the second start finds the file the first one left in rollback-journal mode
        with koordlet(tmp_path, state, no_shared_mmap=True) as agent:
            wait_until("koordlet collecting", lambda: agent.running() and agent.collecting(), START_SECONDS)
            line = [line for line in agent.lines() if "metric store" in line][-1]
            assert "metric store fell back to another journal mode with an exclusive lock" in line, line
            assert f"path={state / 'metrics.db'}" in line and "journal_mode=DELETE" in line, line
            assert 'failures="journal_mode=WAL: disk I/O error (SQLITE_IOERR_SHMMAP)' in line, line
            assert len([line for line in agent.lines() if "metric store" in line]) == run
            assert agent.stop() == 0, "\n".join(agent.lines()[-30:])
        assert not [line for line in agent.lines() if "Traceback" in line]
        with contextlib.closing(sqlite3.connect(state / "metrics.db")) as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
            assert db.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0, "history reached the file"


def test_koordlet_on_a_state_dir_that_fills_up_drops_history_once_and_resumes(tmp_path: Path) -> None:
    with tiny_tmpfs("1m") as state, koordlet(tmp_path, state, metricCache={"flushIntervalSeconds": 0.2}) as agent:
        wait_until("koordlet collecting", lambda: agent.running() and agent.collecting(), START_SECONDS)
        filler = fill_up(state)
        wait_until("the metric store's warning", lambda: [line for line in agent.lines() if "metric store" in line],
                   START_SECONDS)
        (warning,) = [line for line in agent.lines() if "metric store" in line]
        assert "metric store failing" in warning and f"path={state / 'metrics.db'}" in warning, warning
        assert 'action="writing history"' in warning and 'error="database or disk is full' in warning, warning
        # Still running, still collecting, and the cache answers from memory.
        wait_until("fresh samples after the fault", lambda: agent.running() and agent.collecting(), START_SECONDS)
        filler.unlink()
        recovered = ("metric store works again", f"path={state / 'metrics.db'}")
        wait_until("the store working again",
                   lambda: any(all(part in line for part in recovered) for line in agent.lines()), START_SECONDS)
        store_lines = [line for line in agent.lines() if "metric store" in line]
        assert len(store_lines) == 2, store_lines
        assert agent.stop() == 0, "\n".join(agent.lines()[-30:])


def test_koordlet_on_a_full_state_dir_runs_with_history_in_memory(tmp_path: Path) -> None:
    with tiny_tmpfs() as state:
        fill_up(state)
        with koordlet(tmp_path, state) as agent:
            wait_until("koordlet collecting", lambda: agent.running() and agent.collecting(), START_SECONDS)
            (line,) = [line for line in agent.lines() if "metric store" in line]
            assert "metric store cannot be used" in line and f"path={state / 'metrics.db'}" in line, line
            assert "keeping history in memory only" in line and "database or disk is full" in line, line
            assert agent.stop() == 0, "\n".join(agent.lines()[-30:])
        assert not [line for line in agent.lines() if "Traceback" in line]


class FakeRuntime(cri_grpc.RuntimeServiceServicer):  # type: ignore[misc]
    """A CRI runtime with no pods: enough for the proxy to reconcile its checkpoint and pass a call through."""

    def Version(self, request: cri.VersionRequest, context: Any) -> cri.VersionResponse:  # noqa: N802
        return cri.VersionResponse(version="0.1.0", runtime_name="fake-runtime", runtime_version="1.0",
                                   runtime_api_version="v1")

    def ListPodSandbox(self, request: Any, context: Any) -> cri.ListPodSandboxResponse:  # noqa: N802
        return cri.ListPodSandboxResponse()

    def ListContainers(self, request: Any, context: Any) -> cri.ListContainersResponse:  # noqa: N802
        return cri.ListContainersResponse()


def test_the_proxy_starts_on_a_truncated_checkpoint_names_it_and_serves(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.json"
    good = Store(str(checkpoint))
    good.put_pod(POD_ID, pod_request())
    good.close()
    whole = checkpoint.read_bytes()
    checkpoint.write_bytes(whole[:len(whole) // 3])

    backend_sock, proxy_sock = tmp_path / "runtime.sock", tmp_path / "proxy.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    cri_grpc.add_RuntimeServiceServicer_to_server(FakeRuntime(), server)
    server.add_insecure_port(f"unix://{backend_sock}")
    server.start()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))
    log = tmp_path / "proxy.log"
    try:
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "runtimeproxy.cli", f"--koord-runtimeproxy-endpoint={proxy_sock}",
                 f"--remote-runtime-service-endpoint={backend_sock}", f"--remote-image-service-endpoint={backend_sock}",
                 f"--runtime-hook-config-dir={tmp_path / 'hookserver.d'}", f"--checkpoint-path={checkpoint}"],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=REPO_ROOT)
        try:
            text = lambda: log.read_text(errors="replace")  # noqa: E731
            wait_until("the proxy reconciled with the runtime",
                       lambda: proc.poll() is not None or "checkpoint reconciled with the backend" in text(),
                       START_SECONDS)
            assert proc.poll() is None, text()
            (line,) = [line for line in text().splitlines() if "ERROR" in line]
            assert "the checkpoint is unusable" in line and f"path={checkpoint}" in line, line
            assert "error=not valid JSON" in line, line
            assert f"bytes={len(whole) // 3}" in line and f"kept=moved to {checkpoint}.bad" in line, line
            with grpc.insecure_channel(f"unix://{proxy_sock}") as channel:
                answer = cri_grpc.RuntimeServiceStub(channel).Version(cri.VersionRequest(), timeout=10)
            assert answer.runtime_name == "fake-runtime"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(STOP_SECONDS) == 0, text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(STOP_SECONDS)
    finally:
        server.stop(1).wait()
    assert Path(f"{checkpoint}.bad").read_bytes() == whole[:len(whole) // 3]


# ---------------------------------------------------------------------------------------------- the v2 guest


@dataclass(frozen=True)
class SharedFolder:
    mount_point: Path
    fstype: str
    options: str
    """The file system's own options (mountinfo's super options)."""

    def refuses_shared_mappings(self) -> bool:
        """A 9p mount without a cache maps files read-only (Linux fs/9p/vfs_file.c, generic_file_readonly_mmap):
        WAL's shared index cannot be mapped there."""
        cache = next((o.partition("=")[2] for o in self.options.split(",") if o.startswith("cache=")), "none")
        return self.fstype == "9p" and cache in ("none", "0", "0x0")


def shared_folders(mountinfo: Path = Path("/proc/self/mountinfo")) -> list[SharedFolder]:
    """Writable mounts of a host folder shared into this guest (9p, virtiofs)."""
    found = []
    for line in mountinfo.read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, (fstype, _source, options) = before.split(), after.split()[:3]
        if fstype in ("9p", "virtiofs") and "rw" in fields[5].split(","):
            found.append(SharedFolder(Path(fields[4].replace("\\040", " ")), fstype, options))
    return found


@pytest.mark.cgroupv2
def test_koordlet_runs_with_its_state_dir_on_a_folder_shared_from_the_host(tmp_path: Path) -> None:
    """In the v2 guest (python -m tests.vm) the results directory is the host's, shared read-write over 9p
    (virtme-ng's --rwdir); a 9p mount without a cache maps files read-only, so WAL's shared index cannot be
    mapped there.  koordlet used to die at start with ``sqlite3.OperationalError: disk I/O error``; it must
    run, and say once which journal mode it fell back to."""
    shared = shared_folders()
    assert shared, f"no writable 9p/virtiofs mount in this guest:\n{Path('/proc/self/mountinfo').read_text()}"
    folder = shared[0]
    state = Path(tempfile.mkdtemp(prefix="koordlet-state-", dir=folder.mount_point))
    try:
        with koordlet(tmp_path, state) as agent:
            wait_until("koordlet collecting", lambda: agent.running() and agent.collecting(), START_SECONDS)
            store_lines = [line for line in agent.lines() if "metric store" in line]
            print(f"state dir on {folder}: {store_lines or 'WAL worked'}")  # for the run's report
            # One fallback line where the kernel refuses WAL's mapping; elsewhere WAL may work (no line).
            assert (len(store_lines) == 1) if folder.refuses_shared_mappings() else (len(store_lines) <= 1), \
                (folder, store_lines)
            if store_lines:
                assert "metric store fell back to another journal mode with an exclusive lock" in store_lines[0], \
                    store_lines[0]
                assert f"path={state / 'metrics.db'}" in store_lines[0], store_lines[0]
                assert 'failures="journal_mode=WAL: ' in store_lines[0], store_lines[0]
                assert "journal_mode=DELETE" in store_lines[0], store_lines[0]
            assert agent.stop() == 0, "\n".join(agent.lines()[-30:])
        assert not [line for line in agent.lines() if "Traceback" in line], agent.lines()
        with contextlib.closing(sqlite3.connect(state / "metrics.db")) as db:
            assert db.execute("SELECT count(*) FROM chunks").fetchone()[0] > 0, "history reached the shared folder"
    finally:
        with Cleanup(f"state dir {state}") as cleanup:
            cleanup.attempt(f"remove {state}", lambda: remove_tree(state))
