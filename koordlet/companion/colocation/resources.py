"""Pod resources as the pod webhooks see them: the checks of the request decoder, the conversion of cpu/memory
to Koordinator's batch/mid extended resources (``mutatePodResourceSpec`` in koordinator
``pkg/webhook/pod/mutating/cluster_colocation_profile.go``) and the ``node.koordinator.sh/extended-resource-spec``
annotation (``mutateByExtendedResources`` in ``extended_resource_spec.go``, format of
``apis/extension/resource.go``).

Quantities are written in apimachinery's canonical form, as upstream's ``json.Marshal`` of a
``resource.Quantity`` writes them: one core converted to batch-cpu is ``resource.NewQuantity(1000,
DecimalSI)``, which serialises as ``"1k"`` (the docs print ``"1000"``; kube-apiserver stores ``1k``).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from decimal import ROUND_UP, Decimal
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.extension import (
    ANNOTATION_EXTENDED_RESOURCE_SPEC,
    LABEL_PRIORITY_CLASS,
    LABEL_QOS,
    PRIORITY_BANDS,
    RESOURCE_BATCH_CPU,
    RESOURCE_BATCH_MEMORY,
    RESOURCE_MID_CPU,
    RESOURCE_MID_MEMORY,
    PriorityClass,
)
from koordlet.apis.quantity import format_memory_bytes, milli_value, parse_quantity
from koordlet.errors import ParseError

# apis/extension/resource.go ResourceNameMap: koord-prod, koord-free and none keep cpu/memory.
RESOURCE_NAME_MAP: Final[Mapping[PriorityClass, Mapping[str, str]]] = {
    PriorityClass.BATCH: {"cpu": RESOURCE_BATCH_CPU, "memory": RESOURCE_BATCH_MEMORY},
    PriorityClass.MID: {"cpu": RESOURCE_MID_CPU, "memory": RESOURCE_MID_MEMORY},
}
_PROD_QOS: Final = frozenset({"SYSTEM", "LSE", "LSR", "LS"})
_KNOWN_QOS: Final = _PROD_QOS | {"BE"}
_KUBE_QOS_DEFAULT: Final = {"Guaranteed": "LSR", "Burstable": "LS", "BestEffort": "BE"}
_SPEC_RESOURCES: Final = (RESOURCE_BATCH_CPU, RESOURCE_BATCH_MEMORY)
_NANO: Final = Decimal("1e-9")
_DECIMAL_SUFFIXES: Final = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES: Final = frozenset({"Ki", "Mi", "Gi", "Ti", "Pi", "Ei"})
_NUMBER_THEN_SUFFIX = re.compile(r"^\s*[+-]?(?:\d+\.?\d*|\.\d+)(\S*)\s*$", re.ASCII)

# ---------------------------------------------------------------------------------------------- decoding


def check_pod(obj: Any, where: str) -> dict[str, Any]:
    """``obj`` if it is a v1.Pod as far as the webhooks read it; raises ParseError naming the first bad field
    (the typed decode upstream does before anything else, which answers 400)."""
    if not isinstance(obj, dict):
        raise ParseError(f"{where}: must be a Pod object, got {type(obj).__name__}")
    metadata = gojson.mapping(obj.get("metadata"), f"{where}.metadata")
    for key in ("labels", "annotations"):
        gojson.str_map(metadata.get(key), f"{where}.metadata.{key}")
    gojson.string(metadata.get("namespace"), f"{where}.metadata.namespace")
    spec = gojson.mapping(obj.get("spec"), f"{where}.spec")
    priority = spec.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise ParseError(f"{where}.spec.priority: expected an integer, got {priority!r}")
    for kind in ("initContainers", "containers"):
        for index, container in enumerate(gojson.array(spec.get(kind), f"{where}.spec.{kind}")):
            path = f"{where}.spec.{kind}[{index}]"
            gojson.string(gojson.mapping(container, path).get("name"), f"{path}.name")
            resources = gojson.mapping(container.get("resources"), f"{path}.resources")
            for part in ("requests", "limits"):
                _check_quantities(resources.get(part), f"{path}.resources.{part}")
    _check_quantities(spec.get("overhead"), f"{where}.spec.overhead")
    pod_level = gojson.mapping(spec.get("resources"), f"{where}.spec.resources")
    for part in ("requests", "limits"):
        _check_quantities(pod_level.get(part), f"{where}.spec.resources.{part}")
    gojson.string(gojson.mapping(obj.get("status"), f"{where}.status").get("qosClass"), f"{where}.status.qosClass")
    return obj


def _check_quantities(value: Any, where: str) -> None:
    for name, quantity in gojson.mapping(value, where).items():
        if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
            raise ParseError(f"{where}.{name}: expected a quantity, got {quantity!r}")
        try:
            quantity_value(quantity)
        except ParseError as exc:
            raise ParseError(f"{where}.{name}: {exc}") from None


# -------------------------------------------------------------------------------------------- quantities


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True must not hit the entry of 1
def quantity_value(quantity: str | int | float) -> Decimal:
    """``parse_quantity`` remembered: pods repeat a handful of texts ("100m", "1", "2Gi"), and every admission
    reads each of them several times."""
    return parse_quantity(quantity)


@functools.lru_cache(maxsize=4096, typed=True)  # typed: True must not hit the entry of 1
def canonical(quantity: str | int | float) -> str:
    """The text apimachinery's ``Quantity.MarshalJSON`` writes for ``quantity`` (``"1024Mi"`` -> ``"1Gi"``,
    ``"1000"`` -> ``"1k"``, ``"0.5"`` -> ``"500m"``).  The suffix family the text was written in is kept:
    binary for Ki..Ei (unless the value is below 1024 or not whole), decimal exponent for ``1e3``."""
    value = quantity_value(quantity)
    if value != 0 and value % _NANO != 0:  # apimachinery rounds up to nano units, away from zero
        value = value.quantize(_NANO, rounding=ROUND_UP)
    if value == 0:
        return "0"
    family = _family(str(quantity))
    if family == "binary":
        if -1024 < value < 1024 or value != value.to_integral_value():
            family = "decimal"
        else:
            return format_memory_bytes(int(value))
    return _canonical_decimal(value, exponent_form=family == "exponent")


def _family(text: str) -> str:
    match = _NUMBER_THEN_SUFFIX.match(text)
    suffix = match.group(1) if match else ""
    if suffix in _BINARY_SUFFIXES:
        return "binary"
    if suffix and suffix[0] in "eE" and len(suffix) > 1:
        return "exponent"
    return "decimal"


def _canonical_decimal(value: Decimal, *, exponent_form: bool) -> str:
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite: parse_quantity refuses anything else
    mantissa = int("".join(map(str, digits)))
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3  # never negative in Python: -1 -> 2, as apimachinery's switch on exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    number = f"-{mantissa}" if sign else str(mantissa)
    if exponent_form:
        return number if exponent == 0 else f"{number}e{exponent}"
    suffix = _DECIMAL_SUFFIXES.get(exponent)
    return number + suffix if suffix is not None else f"{number}e{exponent}"


# ------------------------------------------------------------------------------------ priority and QoS


def pod_priority_class(pod: Mapping[str, Any]) -> PriorityClass:
    """``extension.GetPodPriorityClassWithDefault``: :func:`priority_class_raw`, else the class the
    Koordinator QoS implies (SYSTEM/LSE/LSR/LS -> koord-prod, BE -> koord-batch), where a pod without a QoS
    label takes LSR/LS/BE from its Kubernetes QoS (Guaranteed/Burstable/BestEffort)."""
    found = priority_class_raw(pod)
    if found is not PriorityClass.NONE:
        return found
    qos = qos_raw(pod) or _KUBE_QOS_DEFAULT.get(kube_qos(pod), "")
    if qos in _PROD_QOS:
        return PriorityClass.PROD
    return PriorityClass.BATCH if qos == "BE" else PriorityClass.NONE


def priority_class_raw(pod: Mapping[str, Any]) -> PriorityClass:
    """``GetPodPriorityClassRaw``: the ``koordinator.sh/priority-class`` label (an unknown value counts as
    none), else the band of ``spec.priority`` (none outside every band)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if LABEL_PRIORITY_CLASS in labels:
        try:
            return PriorityClass(labels[LABEL_PRIORITY_CLASS])
        except ValueError:
            return PriorityClass.NONE
    priority = (pod.get("spec") or {}).get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool):
        for band, (low, high) in PRIORITY_BANDS.items():
            if low <= priority <= high:
                return band
    return PriorityClass.NONE


def qos_raw(pod: Mapping[str, Any]) -> str:
    """``GetPodQoSClassRaw``: the ``koordinator.sh/qosClass`` label when it names a class, else ""."""
    qos = ((pod.get("metadata") or {}).get("labels") or {}).get(LABEL_QOS, "")
    return qos if qos in _KNOWN_QOS else ""


def kube_qos(pod: Mapping[str, Any]) -> str:
    """Kubernetes' QoS class: ``status.qosClass`` when set, else kubectl's ``ComputePodQOS`` (pod-level
    ``spec.resources`` when present, otherwise every container and init container; only positive cpu and
    memory quantities count)."""
    status = pod.get("status") or {}
    if status.get("qosClass"):
        return str(status["qosClass"])
    spec = pod.get("spec") or {}
    requests: dict[str, Decimal] = {}
    limits: dict[str, Decimal] = {}
    guaranteed = True
    pod_level = spec.get("resources")
    if pod_level is not None:
        _add_positive(requests, pod_level.get("requests"))
        if pod_level.get("limits") and not {"cpu", "memory"} <= _add_positive(limits, pod_level["limits"]):
            guaranteed = False
    else:
        for kind in ("containers", "initContainers"):
            for container in spec.get(kind) or ():
                resources = container.get("resources") or {}
                _add_positive(requests, resources.get("requests"))
                if not {"cpu", "memory"} <= _add_positive(limits, resources.get("limits")):
                    guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and len(requests) == len(limits) and all(limits.get(k) == v for k, v in requests.items()):
        return "Guaranteed"
    return "Burstable"


def _add_positive(total: dict[str, Decimal], quantities: Mapping[str, Any] | None) -> set[str]:
    found = set()
    for name in ("cpu", "memory"):
        if quantities and name in quantities:
            value = quantity_value(quantities[name])
            if value > 0:
                total[name] = total.get(name, Decimal(0)) + value
                found.add(name)
    return found


# ------------------------------------------------------------------------------------------- conversion


def convert_pod_resources(pod: dict[str, Any]) -> None:
    """``mutatePodResourceSpec``: for a koord-batch or koord-mid pod, move cpu (as a whole number of
    milli-cores) and memory of every container, init container and the overhead to the extended resources
    of its class, and give a container that limits one but does not request it a request equal to the
    limit (``restrictResourceRequestAndLimit``)."""
    names = RESOURCE_NAME_MAP.get(pod_priority_class(pod))
    if names is None:
        return
    spec = pod.get("spec") or {}
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or ():
            resources = container.get("resources")
            if not resources:
                continue
            for part in ("requests", "limits"):
                if resources.get(part):
                    _replace(resources[part], names)
            limits = resources.get("limits") or {}
            for extended in names.values():
                if extended in limits and extended not in (resources.get("requests") or {}):
                    if resources.get("requests") is None:
                        resources["requests"] = {}
                    resources["requests"][extended] = canonical(limits[extended])
    if spec.get("overhead") is not None:
        _replace(spec["overhead"], names)


def _replace(quantities: dict[str, Any], names: Mapping[str, str]) -> None:
    if "cpu" in quantities:
        # resource.NewQuantity(q.MilliValue(), DecimalSI): milli-cores rounded up, written as a plain integer.
        milli = milli_value(quantities.pop("cpu"))
        quantities[names["cpu"]] = _canonical_decimal(Decimal(milli), exponent_form=False) if milli else "0"
    if "memory" in quantities:
        quantities[names["memory"]] = canonical(quantities.pop("memory"))


# ------------------------------------------------------------------------------ extended-resource-spec


def set_extended_resource_spec(pod: dict[str, Any]) -> None:
    """``mutateByExtendedResources``: record the batch-cpu/batch-memory requests and limits of the pod's
    containers (not init containers, as upstream) in the ``node.koordinator.sh/extended-resource-spec``
    annotation, for koordlet and the runtime proxy, which never see the pod spec in a CRI call.

    The annotation is ``json.Marshal(ExtendedResourceSpec)``: ``{"containers":{"<name>":{"limits":{..},
    "requests":{..}}}}`` with sorted keys, canonical quantities and empty parts left out (``{}`` for a pod
    without them).  It is written only when its content changes; an existing annotation that is not valid
    raises ValueError (upstream fails the admission)."""
    wanted: dict[str, dict[str, dict[str, str]]] = {}
    for container in (pod.get("spec") or {}).get("containers") or ():
        entry = {}
        resources = container.get("resources") or {}
        for part in ("limits", "requests"):
            quantities = resources.get(part) or {}
            found = {name: canonical(quantities[name]) for name in _SPEC_RESOURCES if name in quantities}
            if found:
                entry[part] = found
        if entry:
            wanted[container.get("name") or ""] = entry
    document = {"containers": wanted} if wanted else {}
    current = ((pod.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_EXTENDED_RESOURCE_SPEC)
    if current is None and not wanted:
        return
    if current is not None and _comparable(document) == _comparable(_decode_spec(current)):
        return
    if pod.get("metadata") is None:
        pod["metadata"] = {}
    if pod["metadata"].get("annotations") is None:
        pod["metadata"]["annotations"] = {}
    pod["metadata"]["annotations"][ANNOTATION_EXTENDED_RESOURCE_SPEC] = json.dumps(
        document, sort_keys=True, separators=(",", ":"))


def _decode_spec(text: str) -> Mapping[str, Any]:
    """An existing annotation read as ``json.Unmarshal`` into ``ExtendedResourceSpec`` would (unknown members
    ignored, null as absent); raises ValueError for anything it would refuse."""
    document = gojson.loads(text)
    if document is None:
        return {}
    where = ANNOTATION_EXTENDED_RESOURCE_SPEC
    containers = gojson.mapping(gojson.member(gojson.mapping(document, where), "containers"), f"{where}.containers")
    decoded: dict[str, Any] = {}
    for name, entry in containers.items():
        parts = gojson.mapping(entry, f"{where}.containers.{name}")
        decoded[name] = {part: gojson.mapping(gojson.member(parts, part), f"{where}.containers.{name}.{part}")
                         for part in ("limits", "requests")}
    return {"containers": decoded}


def _comparable(document: Mapping[str, Any]) -> dict[str, Any]:
    """Quantities by value, empty parts dropped: two documents Go would decode to the same requirements
    compare equal (upstream compares the decoded structs)."""
    result: dict[str, Any] = {}
    for name, parts in (document.get("containers") or {}).items():
        entry = {part: {resource: quantity_value(text) for resource, text in quantities.items()}
                 for part, quantities in parts.items() if quantities}
        if entry:
            result[name] = entry
    return result
