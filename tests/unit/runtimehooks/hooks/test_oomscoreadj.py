"""oomscoreadj: a container's oom_score_adj from the per-container spec annotation, else the pod-level one,
within [-1000, 1000]; garbage is an error naming the pod and the annotation."""

from __future__ import annotations

import pytest

from koordlet.apis.extension import LABEL_QOS
from koordlet.apis.pod import Container, Pod
from koordlet.runtimehooks.deps import HookDeps
from koordlet.runtimehooks.framework import HookRequest, HookRunner, Stage
from koordlet.runtimehooks.hooks import oomscoreadj

ADJ = "koordinator.sh/oom-score-adj"
SPEC = "koordinator.sh/oom-score-adj-spec"


def pod(annotations: dict[str, str], qos: str = "LS", labels: dict[str, str] | None = None) -> Pod:
    return Pod(uid="u1", name="p", namespace="ns", labels={LABEL_QOS: qos, **(labels or {})},
               annotations=annotations, kube_qos=None, phase="Pending", priority=None,
               containers=(Container("main", ""), Container("sidecar", "")))


def run(p: Pod, container: int = 0, stage: Stage = Stage.PRE_CREATE_CONTAINER) -> tuple[dict[str, object], list[str]]:
    result = HookRunner([oomscoreadj.new(HookDeps())]).run(HookRequest(stage, p, "", p.containers[container], "cid"))
    return result.adjustment.values, result.errors


def test_constants_match_upstream() -> None:
    assert oomscoreadj.ANNOTATION_OOM_SCORE_ADJ == ADJ
    assert oomscoreadj.ANNOTATION_OOM_SCORE_ADJ_SPEC == SPEC
    assert (oomscoreadj.OOM_SCORE_ADJ_MIN, oomscoreadj.OOM_SCORE_ADJ_MAX) == (-1000, 1000)
    assert oomscoreadj.new(HookDeps()).stages == frozenset({Stage.PRE_CREATE_CONTAINER})


@pytest.mark.parametrize(("annotations", "container", "qos", "expected"), [
    ({ADJ: "500"}, 0, "LS", 500),
    ({ADJ: "-1000"}, 0, "LS", -1000),
    ({ADJ: "1000"}, 1, "BE", 1000),
    ({ADJ: "0"}, 0, "SYSTEM", 0),
    ({ADJ: "+7"}, 0, "LSE", 7),
    ({ADJ: "-05"}, 0, "LSR", -5),
    ({SPEC: '{"main": -500, "sidecar": 200}'}, 0, "LS", -500),
    ({SPEC: '{"main": -500, "sidecar": 200}'}, 1, "LS", 200),
    ({SPEC: '{"main": -500}', ADJ: "300"}, 1, "LS", 300),  # not in the spec: the pod default
    ({SPEC: '{"main": -500}', ADJ: "300"}, 0, "LS", -500),  # the spec wins
    ({SPEC: "", ADJ: "10"}, 0, "LS", 10),
    ({SPEC: '{"main": 999}', ADJ: "not-read"}, 0, "LS", 999),
])
def test_values(annotations: dict[str, str], container: int, qos: str, expected: int) -> None:
    assert run(pod(annotations, qos), container) == ({"oom_score_adj": expected}, [])


@pytest.mark.parametrize(("annotations", "container"), [
    ({}, 0),
    ({ADJ: ""}, 0),
    ({SPEC: '{"main": -500}'}, 1),
    ({SPEC: "{}"}, 0),
])
def test_left_alone(annotations: dict[str, str], container: int) -> None:
    assert run(pod(annotations), container) == ({}, [])


def test_a_label_is_not_read() -> None:
    assert run(pod({}, labels={ADJ: "500"})) == ({}, [])


def test_sandbox_and_other_stages_are_not_touched() -> None:
    p = pod({ADJ: "500"})
    for stage in (Stage.PRE_RUN_POD_SANDBOX, Stage.PRE_UPDATE_CONTAINER_RESOURCES, Stage.PRE_START_CONTAINER):
        result = HookRunner([oomscoreadj.new(HookDeps())]).run(HookRequest(stage, p, "", p.containers[0], "cid"))
        assert result.ran == [] and result.adjustment.empty()


@pytest.mark.parametrize(("annotations", "key", "message"), [
    ({ADJ: "abc"}, ADJ, "not an integer: 'abc'"),
    ({ADJ: " 5"}, ADJ, "not an integer: ' 5'"),
    ({ADJ: "1_0"}, ADJ, "not an integer: '1_0'"),
    ({ADJ: "1.5"}, ADJ, "not an integer: '1.5'"),
    ({ADJ: "1001"}, ADJ, "1001 is outside [-1000, 1000]"),
    ({ADJ: "-1001"}, ADJ, "-1001 is outside [-1000, 1000]"),
    ({ADJ: "99999999999999999999999"}, ADJ, "is outside [-1000, 1000]"),
    ({SPEC: "{not json", ADJ: "5"}, SPEC, "not JSON"),
    ({SPEC: "[-500]"}, SPEC, "expected a JSON object"),
    ({SPEC: '{"main": "-500"}'}, SPEC, "main: expected an integer, got '-500'"),
    ({SPEC: '{"main": 1.5}'}, SPEC, "main: expected an integer, got 1.5"),
    ({SPEC: '{"main": true}'}, SPEC, "main: expected an integer, got True"),
    ({SPEC: '{"main": null}'}, SPEC, "main: expected an integer, got None"),
    ({SPEC: '{"main": -1001}'}, SPEC, "main: -1001 is outside [-1000, 1000]"),
    ({SPEC: '{"sidecar": 1}', ADJ: "x"}, ADJ, "not an integer: 'x'"),
])
def test_garbage_is_an_error_naming_pod_and_key(annotations: dict[str, str], key: str, message: str) -> None:
    values, errors = run(pod(annotations))
    assert values == {}
    assert len(errors) == 1 and errors[0].startswith(f"oomscoreadj: pod ns/p: annotation {key}:")
    assert message in errors[0]
