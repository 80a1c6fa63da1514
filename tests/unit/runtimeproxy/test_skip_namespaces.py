"""The skip label (``runtimeproxy.koordinator.sh/skip-hookserver``) is honoured only in the namespaces allowed
to skip (``--skip-hookserver-namespaces``): a tenant's pod carrying it is hooked like any other, and the
refusal is logged once per pod.  Rig: the scripted hook server of ``test_intercept``."""

from __future__ import annotations

import logging
import shlex
from collections.abc import Iterator
from typing import Any

import pytest

from koordlet.apis.proto.cri.runtime.v1 import api_pb2 as cri
from runtimeproxy import cli, intercept
from runtimeproxy.intercept import DEFAULT_SKIP_NAMESPACES, Interceptor
from tests.unit.runtimeproxy.test_cli import unit
from tests.unit.runtimeproxy.test_intercept import (
    Env,
    batch_answer,
    create,
    create_request,
    run_pod,
    scripted_hook_server,
)

SKIP = "runtimeproxy.koordinator.sh/skip-hookserver"
EVERY_STAGE = ["PreRunPodSandboxHook", "PreCreateContainerHook", "PreStartContainerHook", "PostStartContainerHook",
               "PreUpdateContainerResourcesHook", "PostStopContainerHook", "PostStopPodSandboxHook"]


@pytest.fixture
def env() -> Iterator[Env]:
    with scripted_hook_server() as made:
        yield made


def pod_life(env: Env, interceptor: Interceptor, **pod: Any) -> list[str]:
    """A pod's CRI calls from RunPodSandbox to StopPodSandbox; the hook methods called, in order."""
    env.script.calls.clear()
    pod_id = run_pod(env, interceptor, **pod)
    container_id = create(env, interceptor, pod_id, **pod)
    env.call(interceptor, "StartContainer", cri.StartContainerRequest(container_id=container_id))
    env.call(interceptor, "UpdateContainerResources", cri.UpdateContainerResourcesRequest(
        container_id=container_id, linux=cri.LinuxContainerResources(cpu_quota=80000, cpu_period=100000)))
    env.call(interceptor, "StopContainer", cri.StopContainerRequest(container_id=container_id))
    env.call(interceptor, "StopPodSandbox", cri.StopPodSandboxRequest(pod_sandbox_id=pod_id))
    return [method for method, _ in env.script.calls]


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    formatter = cli.FieldsFormatter("%(message)s")
    return [formatter.format(r) for r in caplog.records
            if r.name == intercept.__name__ and "may not skip" in r.getMessage()]


@pytest.mark.parametrize("where", ["label", "annotation"])
def test_a_tenant_pod_with_the_skip_key_is_hooked_at_every_stage(env: Env, where: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    pod: dict[str, Any] = {"labels": {SKIP: "true"}} if where == "label" else {"annotations": {SKIP: "true"}}
    with caplog.at_level(logging.WARNING, intercept.__name__):
        called = pod_life(env, env.interceptor(), namespace="tenant-a", uid="uid-tenant", **pod)
    assert called == EVERY_STAGE
    [message] = refusals(caplog)  # one pod, seven calls: logged once
    assert "tenant-a/web" in message and "uid-tenant" in message and "koordinator-system,kube-system" in message


@pytest.mark.parametrize("namespace", sorted(DEFAULT_SKIP_NAMESPACES))
@pytest.mark.parametrize("where", ["label", "annotation"])
def test_a_pod_of_an_allowed_namespace_skips_every_stage(env: Env, namespace: str, where: str,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    pod: dict[str, Any] = {"labels": {SKIP: "true"}} if where == "label" else {"annotations": {SKIP: "true"}}
    with caplog.at_level(logging.WARNING, intercept.__name__):
        assert pod_life(env, env.interceptor(), namespace=namespace, **pod) == []
    assert refusals(caplog) == []


def test_another_value_of_the_key_is_no_skip_and_no_refusal(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, intercept.__name__):
        assert pod_life(env, env.interceptor(), labels={SKIP: "false"}, namespace="kube-system") == EVERY_STAGE
    assert refusals(caplog) == []


def test_an_unknown_pod_is_judged_by_the_sandbox_config_of_create_container(env: Env) -> None:
    """No RunPodSandbox seen (checkpoint lost): CreateContainer's ``sandbox_config.metadata.namespace``."""
    env.script.answers["PreCreateContainerHook"] = batch_answer
    interceptor = env.interceptor()
    env.call(interceptor, "CreateContainer", create_request("sb-unknown", {SKIP: "true"}, namespace="tenant-a"))
    assert [m for m, _ in env.script.calls] == ["PreCreateContainerHook"]
    assert env.script.calls[0][1].pod_meta.namespace == "tenant-a"
    env.script.calls.clear()
    request = create_request("sb-unknown", {SKIP: "true"}, namespace="kube-system")
    env.call(interceptor, "CreateContainer", request)
    assert env.script.calls == []
    assert env.backend.received[-1][1] == request.SerializeToString()


def test_the_checkpointed_pod_namespace_decides_for_its_containers(env: Env) -> None:
    interceptor = env.interceptor()
    pod_id = run_pod(env, interceptor, {SKIP: "true"}, namespace="tenant-a")
    env.script.calls.clear()
    # The checkpoint (what RunPodSandbox carried) is what the proxy trusts, not a later request's claim.
    create(env, interceptor, pod_id, {SKIP: "true"}, namespace="kube-system")
    assert [m for m, _ in env.script.calls] == ["PreCreateContainerHook"]


def test_star_allows_every_namespace_and_empty_none(env: Env) -> None:
    assert pod_life(env, env.interceptor(skip_namespaces={"*"}), labels={SKIP: "true"}, namespace="tenant-a") == []
    assert pod_life(env, env.interceptor(skip_namespaces=()), labels={SKIP: "true"},
                    namespace="kube-system") == EVERY_STAGE
    assert pod_life(env, env.interceptor(skip_namespaces={"tenant-a"}), labels={SKIP: "true"},
                    namespace="tenant-a") == []


def test_a_custom_skip_key_is_limited_alike(env: Env) -> None:
    options: dict[str, Any] = {"skip": ("example.com/no-hooks", "yes"), "skip_namespaces": {"ops"}}
    labels = {"example.com/no-hooks": "yes"}
    assert pod_life(env, env.interceptor(**options), labels=labels, namespace="ops") == []
    assert pod_life(env, env.interceptor(**options), labels=labels, namespace="tenant-a") == EVERY_STAGE


def test_refusals_are_logged_once_per_pod_in_bounded_memory(env: Env, caplog: pytest.LogCaptureFixture,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intercept, "REFUSED_SKIPS_REMEMBERED", 3)
    interceptor = env.interceptor(policy=None)
    with caplog.at_level(logging.WARNING, intercept.__name__):
        for round_ in range(2):
            for n in range(3):
                run_pod(env, interceptor, {SKIP: "true"}, namespace="tenant-a", uid=f"uid-{n}")
            assert len(refusals(caplog)) == 3, f"round {round_}: each of 3 remembered pods logged once"
        for n in range(3, 20):
            run_pod(env, interceptor, {SKIP: "true"}, namespace="tenant-a", uid=f"uid-{n}")
        assert len(interceptor._refused) == 3
        caplog.clear()
        run_pod(env, interceptor, {SKIP: "true"}, namespace="tenant-a", uid="uid-0")
    assert len(refusals(caplog)) == 1, "a forgotten pod is logged again"


# --- the flag ----------------------------------------------------------------------------------------


def test_the_flag_defaults_to_kube_system_and_koordinator_system() -> None:
    args = cli.build_parser().parse_args([])
    assert args.skip_hookserver_namespaces == DEFAULT_SKIP_NAMESPACES == {"kube-system", "koordinator-system"}
    assert cli.options_from(args).skip_namespaces == DEFAULT_SKIP_NAMESPACES


@pytest.mark.parametrize(("text", "expected"), [
    ("ops", {"ops"}), (" ops , kube-system ,", {"ops", "kube-system"}), ("*", {"*"}), ("", set()),
])
def test_the_flag_takes_a_comma_list(text: str, expected: set[str]) -> None:
    args = cli.build_parser().parse_args([f"--skip-hookserver-namespaces={text}"])
    assert args.skip_hookserver_namespaces == expected
    assert cli.options_from(args).skip_namespaces == expected


@pytest.mark.parametrize("text", ["Kube-System", "ops,-bad", "a" * 64, "ns/x"])
def test_the_flag_refuses_what_is_no_namespace(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args([f"--skip-hookserver-namespaces={text}"])
    assert exited.value.code == 2
    assert "--skip-hookserver-namespaces" in capsys.readouterr().err


def test_the_systemd_unit_names_the_namespaces() -> None:
    argv = shlex.split(unit()["Service"]["ExecStart"])
    args = cli.build_parser().parse_args(argv[1:])
    assert args.skip_hookserver_namespaces == DEFAULT_SKIP_NAMESPACES
