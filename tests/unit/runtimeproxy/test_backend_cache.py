"""The backend's per-method callables: CRI methods kept, any other name in a bounded LRU."""

from __future__ import annotations

import threading

from runtimeproxy.backend import KNOWN_METHODS, UNKNOWN_METHODS_CACHED, Backend, _Callables


def test_known_methods_cover_both_cri_versions() -> None:
    assert "/runtime.v1.RuntimeService/RunPodSandbox" in KNOWN_METHODS
    assert "/runtime.v1alpha2.RuntimeService/RunPodSandbox" in KNOWN_METHODS
    assert "/runtime.v1.RuntimeService/GetContainerEvents" in KNOWN_METHODS
    assert "/runtime.v1.ImageService/PullImage" in KNOWN_METHODS


def test_unknown_names_are_bounded_and_least_recently_used_go_first() -> None:
    made: list[str] = []
    callables = _Callables(lambda m: made.append(m) or object(), unknown_limit=3)
    known = "/runtime.v1.RuntimeService/Version"
    first = callables.get(known)
    for i in range(10):
        callables.get(f"/x.Y/M{i}")
    assert callables.get(known) is first  # never evicted
    assert len(callables) == 1 + 3
    kept = callables.get("/x.Y/M9")
    callables.get("/x.Y/M10")  # evicts M7, the least recently used
    assert callables.get("/x.Y/M9") is kept
    before = len(made)
    callables.get("/x.Y/M7")
    assert len(made) == before + 1  # M7 was rebuilt


def test_concurrent_lookups_stay_bounded() -> None:
    callables = _Callables(lambda m: object(), unknown_limit=8)

    def hammer(start: int) -> None:
        for i in range(start, start + 500):
            callables.get(f"/random.Svc/{i}")

    threads = [threading.Thread(target=hammer, args=(n * 1000,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(callables) == 8


def test_backend_holds_at_most_the_bound(tmp_path: object) -> None:
    with Backend(f"unix:/nonexistent-{id(tmp_path)}.sock") as backend:
        for i in range(500):
            backend.stream(f"/evil.Svc/M{i}", iter(()), (), 0.001).cancel()
        assert backend.cached_callables() == UNKNOWN_METHODS_CACHED
