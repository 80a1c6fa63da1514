"""What Koordinator's validating pod webhook refuses for colocation (``clusterColocationProfileValidatingPod`` in
koordinator ``pkg/webhook/pod/validating/cluster_colocation_profile.go``), with its messages in the shape of
apimachinery's ``field.ErrorList.ToAggregate().Error()``:

- on UPDATE, the ``koordinator.sh/qosClass`` label, the priority class and the ``koordinator.sh/priority``
  label are immutable;
- a pod requesting batch-cpu or batch-memory must be labelled QoS BE;
- QoS BE cannot go with koord-prod or no priority class, QoS LSR not with mid/batch/free or none;
- an LSR or LSE pod must request a whole, non-zero number of CPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any, Final

from koordlet.apis.extension import LABEL_QOS, RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY, PriorityClass
from koordlet.companion.colocation.profile import LABEL_PRIORITY
from koordlet.companion.colocation.resources import canonical, priority_class_raw, qos_raw, quantity_value

_QOS_PATH: Final = f"labels.{LABEL_QOS}"
_PODLEVEL_RESOURCES: Final = ("cpu", "memory")


def validate_pod(pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> str:
    """The refusal message for ``pod`` ("" when it is acceptable); ``old`` is the stored pod on UPDATE."""
    errors: list[str] = []
    qos = qos_raw(pod)
    priority_class = priority_class_raw(pod)
    if old is not None:
        _immutable(errors, _QOS_PATH, qos, qos_raw(old))
        _immutable(errors, "spec.priority", priority_class.value, priority_class_raw(old).value)
        _immutable(errors, f"labels.{LABEL_PRIORITY}", _labels(pod).get(LABEL_PRIORITY, ""),
                   _labels(old).get(LABEL_PRIORITY, ""))
    requests = pod_requests(pod, ("cpu", RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY))
    if (requests.get(RESOURCE_BATCH_CPU) or requests.get(RESOURCE_BATCH_MEMORY)) and qos != "BE":
        errors.append(f"{_QOS_PATH}: Required value: must specify koordinator QoS BE with koordinator colocation "
                      "resources")
    forbidden = {"BE": (PriorityClass.NONE, PriorityClass.PROD),
                 "LSR": (PriorityClass.NONE, PriorityClass.MID, PriorityClass.BATCH, PriorityClass.FREE)}
    if priority_class in forbidden.get(qos, ()):
        errors.append(f"Pod: Forbidden: {LABEL_QOS}={qos} and priorityClass={priority_class.value} cannot be used "
                      "in combination")
    if qos in ("LSR", "LSE"):
        cpu = requests.get("cpu", Decimal(0))
        where = "pod.spec.containers[*].resources.requests"
        if cpu == 0:
            errors.append(f"{where}: Required value: LSR Pod must declare the requested CPUs")
        elif _ceil(cpu) * 1000 != _ceil(cpu * 1000):  # Value()*1000 != MilliValue(): both round up
            errors.append(f"{where}: Invalid value: {_quote(canonical(str(cpu)))}: the requested CPUs of LSR Pod "
                          "must be integer")
    return _aggregate(errors)


def pod_requests(pod: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Decimal]:
    """component-helpers ``PodRequests`` for ``names``: containers and restartable (sidecar) init containers
    add up, other init containers count by the largest, pod-level requests replace cpu/memory, and the
    overhead is added."""
    spec = pod.get("spec") or {}
    total = _sum({}, (_requests(c, names) for c in spec.get("containers") or ()))
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for container in spec.get("initContainers") or ():
        requests = _requests(container, names)
        if container.get("restartPolicy") == "Always":
            _sum(total, [requests])
            _sum(sidecars, [requests])
            requests = dict(sidecars)
        else:
            requests = _sum(dict(requests), [sidecars])
        for name, value in requests.items():
            init_peak[name] = max(init_peak.get(name, value), value)
    for name, value in init_peak.items():
        total[name] = max(total.get(name, value), value)
    pod_level = ((spec.get("resources") or {}).get("requests") or {})
    if any(name in pod_level for name in _PODLEVEL_RESOURCES):
        total.update({name: quantity_value(pod_level[name]) for name in _PODLEVEL_RESOURCES
                      if name in pod_level and name in names})
    overhead = spec.get("overhead") or {}
    _sum(total, [{name: quantity_value(overhead[name]) for name in names if name in overhead}])
    return total


def _requests(container: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Decimal]:
    requests = (container.get("resources") or {}).get("requests") or {}
    return {name: quantity_value(requests[name]) for name in names if name in requests}


def _sum(total: dict[str, Decimal], parts: Any) -> dict[str, Decimal]:
    for part in parts:
        for name, value in part.items():
            total[name] = total.get(name, Decimal(0)) + value
    return total


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("labels") or {}


def _immutable(errors: list[str], path: str, new: str, old: str) -> None:
    # apimachinery ValidateImmutableField: field.Invalid(path, newValue, "field is immutable")
    if new != old:
        errors.append(f"{path}: Invalid value: {_quote(new)}: field is immutable")


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def _quote(text: str) -> str:
    """Go's ``%q`` for the plain label values that reach it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _aggregate(errors: list[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one message alone, several deduplicated inside brackets."""
    unique = list(dict.fromkeys(errors))
    if len(unique) <= 1:
        return unique[0] if unique else ""
    return "[" + ", ".join(unique) + "]"
