"""The eviction front (koordlet/qosmanager/evictor.py): pending bookkeeping and its expiry, dry runs,
audit entries, the kill backend over fake v1 and v2 trees, and backend selection."""

from __future__ import annotations

import errno
import signal
from dataclasses import dataclass, field

import pytest

from koordlet.errors import ConfigError
from koordlet.qosmanager.cri import CRIBackend
from koordlet.qosmanager.evictor import (
    PENDING_TIMEOUT_SECONDS,
    ApiBackend,
    CompanionEvictionAPI,
    DryRunBackend,
    EvictionFailed,
    Evictions,
    EvictionUnreachable,
    KillBackend,
    build_backend,
    containers_to_stop,
)
from koordlet.statesinformer.companion import CompanionError
from koordlet.statesinformer.framework import ContainerMeta, PodMeta
from tests.fixtures.fakehost import FakeHost
from tests.unit.qosmanager.fakes import FakeClock, MemoryAudit, RecordingBackend, make_pod
from tests.unit.resourceexecutor.fakes import IntendedSink

T0 = 1_700_000_000.0


def evictions(backend: object, clock: FakeClock, **kwargs: object) -> tuple[Evictions, MemoryAudit]:
    audit = MemoryAudit()
    return Evictions(backend, clock, audit, **kwargs), audit  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------ Evictions


def test_evict_launches_once_and_remembers_the_pod() -> None:
    clock, backend = FakeClock(T0), RecordingBackend()
    front, audit = evictions(backend, clock)
    pod = make_pod("be", "BE")
    assert front.evict(pod, "EvictPodByNodeMemoryUsage", "node memory 78%")
    assert front.evict(pod, "EvictPodByNodeMemoryUsage", "again")  # pending: not launched twice
    assert backend.evicted == [("default/be", "EvictPodByNodeMemoryUsage")]
    assert front.pending([pod]) == {"uid-be"}
    (pending,) = front.pending_list()
    assert (pending.key, pending.reason, pending.at) == ("default/be", "EvictPodByNodeMemoryUsage", T0)
    (entry,) = audit.entries
    assert entry.outcome == "evicted" and entry.owner == "evictor:recording"
    assert entry.new == "default/be EvictPodByNodeMemoryUsage: node memory 78%"
    assert entry.path == pod.cgroup_dir


def test_failed_eviction_is_not_pending_and_is_audited() -> None:
    clock = FakeClock(T0)
    front, audit = evictions(RecordingBackend(fail=True), clock)
    pod = make_pod("be", "BE")
    assert not front.evict(pod, "r", "m")
    assert front.pending([pod]) == set()
    (entry,) = audit.entries
    assert (entry.outcome, entry.error) == ("failed", "injected failure")


@pytest.mark.parametrize(("code", "unreachable"), [("PERMISSION_DENIED", False), ("UNAVAILABLE", True),
                                                    ("RESOURCE_EXHAUSTED", True), ("", True)])
def test_companion_failures_tell_this_pod_from_the_way_to_evict(code: str, unreachable: bool) -> None:
    """PERMISSION_DENIED refuses this pod (not on the node); any other failure would refuse every pod alike."""

    class Client:
        def evict(self, namespace: str, name: str, reason: str, message: str) -> str:
            raise CompanionError(f"EvictPod {namespace}/{name}: {code or 'connection refused'}", code=code)

    front, audit = evictions(ApiBackend(CompanionEvictionAPI(Client())), FakeClock(T0))
    pod = make_pod("be", "BE")
    if unreachable:
        with pytest.raises(EvictionUnreachable, match=f"EvictPod default/be: {code or 'connection refused'}"):
            front.evict(pod, "r", "m")
    else:
        assert not front.evict(pod, "r", "m")
    assert front.pending([pod]) == set()
    (entry,) = audit.entries
    assert entry.outcome == "failed"


def test_os_error_from_a_backend_is_a_failure() -> None:
    @dataclass
    class Broken:
        name: str = "broken"

        def evict(self, pod: PodMeta, reason: str, message: str) -> None:
            raise PermissionError(errno.EACCES, "denied")

    front, _ = evictions(Broken(), FakeClock(T0))
    assert not front.evict(make_pod("be", "BE"), "r", "m")


@pytest.mark.parametrize(
    ("change", "pending"),
    [
        ("nothing", True),
        ("gone", False),             # the pod left the list: its eviction is done
        ("succeeded", False),        # terminated pods no longer hold resources
        ("failed", False),
        ("timeout-edge", True),      # exactly PENDING_TIMEOUT_SECONDS later: still pending
        ("timeout", False),          # past the timeout: the backend failed silently, evict again
    ],
)
def test_pending_expiry(change: str, pending: bool) -> None:
    clock = FakeClock(T0)
    front, _ = evictions(RecordingBackend(), clock)
    pod = make_pod("be", "BE")
    front.evict(pod, "r", "m")
    listed = [pod]
    if change == "gone":
        listed = [make_pod("other", "BE")]
    elif change in ("succeeded", "failed"):
        listed = [make_pod("be", "BE", phase=change.capitalize())]
    elif change == "timeout-edge":
        clock.advance(PENDING_TIMEOUT_SECONDS)
    elif change == "timeout":
        clock.advance(PENDING_TIMEOUT_SECONDS + 0.1)
    assert (front.pending(listed) == {"uid-be"}) is pending
    # Once forgotten, it stays forgotten even if listed again.
    assert (front.pending([pod]) == {"uid-be"}) is pending


def test_expired_pod_is_evicted_again() -> None:
    clock, backend = FakeClock(T0), RecordingBackend()
    front, _ = evictions(backend, clock, pending_timeout_seconds=10.0)
    pod = make_pod("be", "BE")
    front.evict(pod, "r", "m")
    clock.advance(10.5)
    assert front.pending([pod]) == set()
    front.evict(pod, "r", "m")
    assert len(backend.evicted) == 2


def test_dry_run_is_shadow_mode_for_every_eviction() -> None:
    # A dry run behaves as a real eviction would for the strategies: the pod counts as being released,
    # so thresholds can be tried out without one "would evict" line per round for the same shortage.
    clock, sink = FakeClock(T0), IntendedSink()
    front, audit = evictions(DryRunBackend(), clock, metrics=sink)
    pod = make_pod("be", "BE")
    assert front.evict(pod, "r", "m")
    assert front.evict(pod, "r", "again")  # pending: recorded once
    (entry,) = audit.entries
    assert (entry.outcome, entry.owner) == ("intended", "evictor:dry-run")
    assert front.pending([pod]) == {"uid-be"}
    assert sink.counted == [("evict", "dry-run")]
    assert [(a.outcome, a.backend) for a in front.recent(5)] == [("intended", "dry-run")]


def test_a_shadow_eviction_launches_nothing_and_is_pending() -> None:
    clock, backend, sink = FakeClock(T0), RecordingBackend(), IntendedSink()
    seen: list[str] = []
    front, audit = evictions(backend, clock, metrics=sink, on_evicted=lambda reason, pod: seen.append(reason))
    shadowed, real = make_pod("be", "BE"), make_pod("be2", "BE")
    assert front.evict(shadowed, "EvictPodByNodeMemoryUsage", "node memory 78%", shadow="memoryevict")
    assert backend.evicted == [] and seen == []  # no eviction, and none counted as one
    assert sink.counted == [("evict", "memoryevict")]
    assert [(e.outcome, e.owner) for e in audit.entries] == [("intended", "evictor:shadow")]
    assert front.pending([shadowed, real]) == {"uid-be"}
    # The same front still evicts for a strategy in active mode.
    assert front.evict(real, "EvictPodByNodeMemoryUsage", "m")
    assert backend.evicted == [("default/be2", "EvictPodByNodeMemoryUsage")] and seen == ["EvictPodByNodeMemoryUsage"]
    clock.advance(PENDING_TIMEOUT_SECONDS + 1)
    assert front.pending([shadowed]) == set()  # as a real eviction's pod, it may be "evicted" again later


def test_on_evicted_callback() -> None:
    seen: list[tuple[str, str]] = []
    front, _ = evictions(RecordingBackend(), FakeClock(T0), on_evicted=lambda reason, pod: seen.append(
        (reason, pod.pod.key)))
    front.evict(make_pod("be", "BE"), "EvictPodByBECPUSatisfaction", "m")
    assert seen == [("EvictPodByBECPUSatisfaction", "default/be")]


# ------------------------------------------------------------------------------------------ KillBackend


@dataclass
class FakeKill:
    """``os.kill`` over a fake process table: pid -> error to raise (None: killed)."""

    errors: dict[int, OSError] = field(default_factory=dict)
    killed: list[tuple[int, int]] = field(default_factory=list)

    def __call__(self, pid: int, sig: int) -> None:
        if pid in self.errors:
            raise self.errors[pid]
        self.killed.append((pid, sig))


def pod_tree(host: FakeHost) -> PodMeta:
    """A BE pod with two containers, pids 101 (pod level), 201 + 202 and 301."""
    pod = make_pod("be", "BE", containers=("a", "b"))
    host.mkdir_cgroup(pod.cgroup_dir)
    for container, pids in zip(pod.containers, ("201\n202\n", "301\n"), strict=True):
        host.mkdir_cgroup(container.cgroup_dir)
        host.write_cgroup(container.cgroup_dir, "cgroup.procs", pids, subsystem="cpu")
    host.write_cgroup(pod.cgroup_dir, "cgroup.procs", "101\n", subsystem="cpu")
    return pod


def test_kill_backend_kills_every_process_of_the_pod(fake_cgroup_host: FakeHost) -> None:
    pod = pod_tree(fake_cgroup_host)
    kill = FakeKill()
    backend = KillBackend(fake_cgroup_host.layout(), kill)
    assert sorted(backend.pids(pod)) == [101, 201, 202, 301]
    backend.evict(pod, "EvictPodByNodeMemoryUsage", "m")
    assert sorted(kill.killed) == [(101, signal.SIGKILL), (201, signal.SIGKILL), (202, signal.SIGKILL),
                                   (301, signal.SIGKILL)]


def test_kill_backend_tolerates_processes_that_already_exited(fake_cgroup_host: FakeHost) -> None:
    pod = pod_tree(fake_cgroup_host)
    kill = FakeKill(errors={201: ProcessLookupError(errno.ESRCH, "no such process")})
    KillBackend(fake_cgroup_host.layout(), kill).evict(pod, "r", "m")
    assert sorted(p for p, _ in kill.killed) == [101, 202, 301]


def test_kill_backend_permission_error_names_the_pid(fake_cgroup_host: FakeHost) -> None:
    pod = pod_tree(fake_cgroup_host)
    kill = FakeKill(errors={202: PermissionError(errno.EPERM, "not permitted")})
    with pytest.raises(EvictionFailed, match=r"kill 202 of pod default/be: Operation not permitted"):
        KillBackend(fake_cgroup_host.layout(), kill).evict(pod, "r", "m")


def test_kill_backend_without_a_cgroup_dir_fails(fake_cgroup_host: FakeHost) -> None:
    pod = make_pod("be", "BE")
    bare = PodMeta(pod=pod.pod, cgroup_dir="", containers=pod.containers)
    with pytest.raises(EvictionFailed, match="has no cgroup directory"):
        KillBackend(fake_cgroup_host.layout(), FakeKill()).evict(bare, "r", "m")


def test_kill_backend_skips_garbage_procs_files(fake_cgroup_host: FakeHost) -> None:
    pod = pod_tree(fake_cgroup_host)
    fake_cgroup_host.write_cgroup(pod.containers[0].cgroup_dir, "cgroup.procs", "garbage\n", subsystem="cpu")
    kill = FakeKill()
    KillBackend(fake_cgroup_host.layout(), kill).evict(pod, "r", "m")
    assert sorted(p for p, _ in kill.killed) == [101, 301]


def test_kill_backend_with_a_missing_directory_fails(fake_cgroup_host: FakeHost) -> None:
    pod = make_pod("be", "BE")  # never created in the tree
    with pytest.raises(EvictionFailed, match="kubepods/besteffort/poduid-be"):
        KillBackend(fake_cgroup_host.layout(), FakeKill()).evict(pod, "r", "m")


# ------------------------------------------------------------------------------------------ build_backend


def test_build_backend_kinds(fake_cgroup_host: FakeHost) -> None:
    layout = fake_cgroup_host.layout()
    assert isinstance(build_backend("dry-run", layout, "", 1.0), DryRunBackend)
    assert isinstance(build_backend("kill", layout, "", 1.0), KillBackend)
    cri = build_backend("cri", layout, "/run/containerd/containerd.sock", 2.0)
    assert isinstance(cri, CRIBackend) and cri.endpoint == "unix:///run/containerd/containerd.sock"


def test_build_backend_api_needs_the_companion(fake_cgroup_host: FakeHost) -> None:
    with pytest.raises(ConfigError, match=r"^qos.evictor: 'api' needs the companion's Eviction API"):
        build_backend("api", fake_cgroup_host.layout(), "", 1.0)

    @dataclass
    class Api:
        calls: list[tuple[str, str, str, str]] = field(default_factory=list)

        def evict(self, namespace: str, name: str, reason: str, message: str) -> None:
            self.calls.append((namespace, name, reason, message))

    api = Api()
    backend = build_backend("api", fake_cgroup_host.layout(), "", 1.0, api)
    assert isinstance(backend, ApiBackend)
    backend.evict(make_pod("be", "BE"), "EvictPodByNodeMemoryUsage", "m")
    assert api.calls == [("default", "be", "EvictPodByNodeMemoryUsage", "m")]


def test_build_backend_unknown_kind_names_it(fake_cgroup_host: FakeHost) -> None:
    with pytest.raises(ConfigError, match=r"qos.evictor: unknown evictor 'ssh' \(cri, kill, api, dry-run\)"):
        build_backend("ssh", fake_cgroup_host.layout(), "", 1.0)


def test_containers_to_stop_skips_unstarted_containers() -> None:
    pod = make_pod("be", "BE", containers=("a", "b"))
    pending = ContainerMeta(name="b", container_id="", cgroup_dir="")
    meta = PodMeta(pod=pod.pod, cgroup_dir=pod.cgroup_dir, containers=(pod.containers[0], pending))
    assert containers_to_stop(meta) == ["be-a"]
