"""The hook-server registry: parsing registration files, first match by name order, reload and bad files."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from runtimeproxy.registry import STAGES, HookServer, RegistrationError, Registry, parse_registration

WAIT_SECONDS = 5.0


def write(directory: Path, name: str, body: object) -> Path:
    """Write a registration atomically, as koordlet does (temp file + rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.tmp"
    tmp.write_text(body if isinstance(body, str) else json.dumps(body))
    os.replace(tmp, directory / name)
    return directory / name


def registration(endpoint: str = "/run/koordlet/koordlet.sock", policy: str = "Ignore",
                 hooks: list[str] | None = None) -> dict[str, object]:
    return {"remote-endpoint": endpoint, "failure-policy": policy,
            "runtime-hooks": list(STAGES) if hooks is None else hooks}


# -- parsing -----------------------------------------------------------------------------------------


def test_parses_what_koordlet_writes() -> None:
    body = json.dumps(registration(policy="Fail"))
    assert parse_registration("koordlet.json", body) == HookServer(
        name="koordlet.json",
        endpoint="/run/koordlet/koordlet.sock",
        failure_policy="Fail",
        hooks=frozenset(STAGES),
    )


@pytest.mark.parametrize("endpoint", ["/run/k.sock", "unix:///run/k.sock", "unix:/run/k.sock", " /run/k.sock "])
def test_endpoint_accepts_bare_path_and_unix_uri(endpoint: str) -> None:
    server = parse_registration("a.json", json.dumps(registration(endpoint=endpoint)))
    assert server.endpoint == "/run/k.sock"
    assert server.target == "unix:///run/k.sock"


@pytest.mark.parametrize("policy", ["", None])
def test_empty_or_missing_failure_policy_means_ignore(policy: str | None) -> None:
    body: dict[str, object] = registration()
    if policy is None:
        del body["failure-policy"]
    else:
        body["failure-policy"] = policy
    assert parse_registration("a.json", json.dumps(body)).failure_policy == "Ignore"


def test_hook_suffix_is_accepted() -> None:
    body = json.dumps(registration(hooks=["PreCreateContainerHook", "PostStopContainer"]))
    server = parse_registration("a.json", body)
    assert server.hooks == {"PreCreateContainer", "PostStopContainer"}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "a.json: not valid JSON"),
        ("[1, 2]", "a.json: must hold a JSON object, got list"),
        (
            json.dumps({"failure-policy": "Ignore"}),
            "a.json: remote-endpoint: must be a non-empty socket path, got None",
        ),
        (json.dumps(registration(endpoint="")), "a.json: remote-endpoint: must be a non-empty socket path, got ''"),
        (json.dumps(registration(endpoint="tcp://1.2.3.4:80")), "only unix sockets are supported, got 'tcp://1.2.3.4:80'"),
        (json.dumps(registration(endpoint="run/k.sock")), "must be an absolute socket path, got 'run/k.sock'"),
        (json.dumps(registration(policy="fail")), "a.json: failure-policy: must be Fail or Ignore, got 'fail'"),
        (json.dumps(registration(hooks=["PreRunPodSandbox", "PreEat"])), "runtime-hooks: unknown stage 'PreEat'"),
        (json.dumps({**registration(), "runtime-hooks": "PreRunPodSandbox"}), "runtime-hooks: must be a list"),
    ],
)
def test_bad_registration_names_file_and_value(body: str, message: str) -> None:
    with pytest.raises(RegistrationError) as error:
        parse_registration("a.json", body)
    assert message in str(error.value)


# -- the registry --------------------------------------------------------------------------------------


def test_first_file_in_name_order_serves_a_stage(tmp_path: Path) -> None:
    write(tmp_path, "20-koordlet.json", registration("/run/b.sock", hooks=["PreRunPodSandbox", "PreCreateContainer"]))
    write(tmp_path, "10-other.json", registration("/run/a.sock", policy="Fail", hooks=["PreCreateContainerHook"]))
    write(tmp_path, "ignored.txt", registration("/run/c.sock"))
    registry = Registry(str(tmp_path))
    registry.reload()

    assert [s.name for s in registry.servers()] == ["10-other.json", "20-koordlet.json"]
    first = registry.server_for("PreCreateContainer")
    assert first is not None and (first.name, first.endpoint, first.failure_policy) == (
        "10-other.json", "/run/a.sock", "Fail"
    )
    only = registry.server_for("PreRunPodSandboxHook")
    assert only is not None and only.endpoint == "/run/b.sock"
    assert registry.server_for("PostStopContainer") is None
    assert registry.errors() == {}
    with pytest.raises(ValueError, match="unknown runtime hook stage 'Nope'"):
        registry.server_for("Nope")


def test_missing_directory_is_empty_until_it_appears(tmp_path: Path) -> None:
    directory = tmp_path / "hookserver.d"
    registry = Registry(str(directory))
    registry.reload()
    assert registry.servers() == () and registry.errors() == {}
    write(directory, "koordlet.json", registration())
    registry.reload()
    server = registry.server_for("PreStartContainer")
    assert server is not None and server.name == "koordlet.json"


def test_reload_sees_changes_and_removals(tmp_path: Path) -> None:
    write(tmp_path, "koordlet.json", registration("/run/a.sock", hooks=["PreRunPodSandbox"]))
    registry = Registry(str(tmp_path))
    registry.reload()
    write(tmp_path, "koordlet.json", registration("/run/b.sock", hooks=["PostStopPodSandbox"]))
    registry.reload()
    assert registry.server_for("PreRunPodSandbox") is None
    server = registry.server_for("PostStopPodSandbox")
    assert server is not None and server.endpoint == "/run/b.sock"
    (tmp_path / "koordlet.json").unlink()
    registry.reload()
    assert registry.servers() == ()


def test_bad_file_never_removes_a_good_one_and_last_good_version_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, "a.json", "{broken")
    write(tmp_path, "b.json", registration("/run/b.sock", hooks=["PreCreateContainer"]))
    registry = Registry(str(tmp_path))
    with caplog.at_level(logging.ERROR, logger="runtimeproxy.registry"):
        registry.reload()
        registry.reload()  # unchanged: not logged again
    assert set(registry.errors()) == {"a.json"}
    assert registry.errors()["a.json"].startswith("a.json: not valid JSON")
    rejected = [r for r in caplog.records if "a.json" in str(getattr(r, "error", ""))]
    assert [(r.getMessage(), getattr(r, "error", None)) for r in rejected] == [
        ("hook-server registry: rejected", registry.errors()["a.json"])
    ]
    server = registry.server_for("PreCreateContainer")
    assert server is not None and server.name == "b.json"

    caplog.clear()
    write(tmp_path, "b.json", registration("/run/b.sock", policy="Sometimes", hooks=["PreCreateContainer"]))
    with caplog.at_level(logging.ERROR, logger="runtimeproxy.registry"):
        registry.reload()
    assert registry.errors()["b.json"] == "b.json: failure-policy: must be Fail or Ignore, got 'Sometimes'"
    kept = registry.server_for("PreCreateContainer")
    assert kept is not None and (kept.name, kept.failure_policy) == ("b.json", "Ignore")
    assert any("keeping its last good version" in r.getMessage() for r in caplog.records)

    write(tmp_path, "a.json", registration("/run/a.sock", hooks=["PreCreateContainer"]))
    write(tmp_path, "b.json", registration("/run/b2.sock", hooks=["PostStopContainer"]))
    registry.reload()
    assert registry.errors() == {}
    fixed = registry.server_for("PreCreateContainer")
    assert fixed is not None and fixed.endpoint == "/run/a.sock"
    post = registry.server_for("PostStopContainer")
    assert post is not None and post.endpoint == "/run/b2.sock"


def test_watcher_reloads_on_change(tmp_path: Path) -> None:
    directory = tmp_path / "hookserver.d"
    registry = Registry(str(directory), poll_interval=0.02)
    registry.start()
    try:
        assert registry.servers() == ()
        generation = registry.generation
        write(directory, "koordlet.json", registration("/run/a.sock", hooks=["PreRunPodSandbox"]))
        assert registry.wait_for_change(generation, WAIT_SECONDS)
        server = registry.server_for("PreRunPodSandbox")
        assert server is not None and server.endpoint == "/run/a.sock"

        generation = registry.generation
        # Same size, rewritten within one timestamp tick: the rename still changes the inode.
        write(directory, "koordlet.json", registration("/run/b.sock", hooks=["PreRunPodSandbox"]))
        assert registry.wait_for_change(generation, WAIT_SECONDS)
        server = registry.server_for("PreRunPodSandbox")
        assert server is not None and server.endpoint == "/run/b.sock"

        generation = registry.generation
        (directory / "koordlet.json").unlink()
        assert registry.wait_for_change(generation, WAIT_SECONDS)
        assert registry.server_for("PreRunPodSandbox") is None
    finally:
        registry.stop()


def test_start_twice_is_an_error(tmp_path: Path) -> None:
    registry = Registry(str(tmp_path), poll_interval=0.05)
    registry.start()
    try:
        with pytest.raises(RuntimeError):
            registry.start()
    finally:
        registry.stop()


def test_poll_interval_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="poll_interval"):
        Registry(str(tmp_path), poll_interval=0)
