"""ClusterColocationProfile (config.koordinator.sh/v1alpha1): parsing, matching and applying one profile to a Pod.

Field names, types and defaults follow koordinator ``apis/config/v1alpha1/cluster_colocation_profile_types.go``;
the order in which a profile's fields are laid onto the pod follows ``doMutateByColocationProfile`` in
``pkg/webhook/pod/mutating/cluster_colocation_profile.go``.  A profile is parsed once, when the cluster view
sees it, so a bad profile is refused there (naming the field) instead of failing every pod it would match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from koordlet.apis import gojson
from koordlet.apis.extension import LABEL_QOS
from koordlet.apis.nodeslo.fields import (
    FieldSpec,
    JsonObject,
    enum_field,
    int_field,
    nested,
    object_field,
    show,
    str_field,
    str_map_field,
)
from koordlet.apis.sloconfig import LabelSelector
from koordlet.companion.colocation.resources import check_pod
from koordlet.companion.colocation.smpatch import strategic_merge_pod
from koordlet.errors import ConfigError

LABEL_PRIORITY: Final = "koordinator.sh/priority"
ANNOTATION_SKIP_UPDATE_RESOURCES: Final = "config.koordinator.sh/skip-update-resources"
"""On the *profile*: the profile is applied but cpu/memory are not converted to batch/mid resources
(koordinator apis/extension/cluster_colocation_profile.go)."""
QOS_CLASSES: Final = ("LSE", "LSR", "LS", "BE", "SYSTEM")
_INT32: Final = (-(2**31), 2**31 - 1)
_PERCENT = re.compile(r"^([+-]?[0-9]+)%$", re.ASCII)


@dataclass(frozen=True)
class PriorityClassInfo:
    """What the mutation copies from a scheduling.k8s.io/v1 PriorityClass onto the pod."""

    value: int
    """``.value``, set as ``spec.priority``."""
    preemption_policy: str | None = None
    """``.preemptionPolicy`` (``PreemptLowerPriority``/``Never``), set as ``spec.preemptionPolicy``; None
    removes it from the pod, as upstream assigns the (nil) pointer."""


def _probability_field(json_name: str) -> Any:
    """``*intstr.IntOrString``: an integer is taken as the percent itself, a string must be ``"<int>%"``.

    ``intstr.GetScaledValueFromIntOrPercent(p, 100, false)`` refuses any other string at mutation time, which
    would fail every matching pod; it is refused here instead.  Out-of-range values stay legal as upstream
    reads them: a negative percent always skips, one above 100 always applies."""

    def parse(value: Any, path: str) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            if not _INT32[0] <= value <= _INT32[1]:
                raise ConfigError(f"{path}: must fit in int32, got {value}")
            return value
        if isinstance(value, str):
            match = _PERCENT.match(value)
            if match is not None and len(match.group(1)) <= 11:
                return int(match.group(1))
        raise ConfigError(f"{path}: must be an integer or a percentage such as '50%', got {show(value)}")

    return field(default=None, metadata={"spec": FieldSpec(json_name, parse, lambda value: value)})


@dataclass(frozen=True)
class ProfileSpec(JsonObject):
    """``ClusterColocationProfileSpec``; unset fields are None."""

    namespace_selector: LabelSelector | None = field(default=None, metadata=nested("namespaceSelector",
                                                                                    LabelSelector))
    """Namespaces whose pods the profile applies to; None or empty: every namespace."""
    selector: LabelSelector | None = field(default=None, metadata=nested("selector", LabelSelector))
    """Pods the profile applies to, by their labels; None or empty: every pod."""
    probability: int | None = _probability_field("probability")
    """Percent of matching pods the profile is applied to; None: all of them."""
    qos_class: str | None = enum_field("qosClass", QOS_CLASSES)
    """Set as the ``koordinator.sh/qosClass`` label."""
    priority_class_name: str | None = str_field("priorityClassName")
    """PriorityClass whose name, value and preemption policy are set on the pod."""
    koordinator_priority: int | None = int_field("koordinatorPriority", *_INT32)
    """Set as the ``koordinator.sh/priority`` label (Koordinator's sub-priority)."""
    labels: Mapping[str, str] | None = str_map_field("labels")
    """Labels set on the pod."""
    annotations: Mapping[str, str] | None = str_map_field("annotations")
    """Annotations set on the pod."""
    label_keys_mapping: Mapping[str, str] | None = str_map_field("labelKeysMapping")
    """``labels[new] = labels[old]`` for each ``old: new`` (a missing old label copies as "", as upstream)."""
    annotation_keys_mapping: Mapping[str, str] | None = str_map_field("annotationKeysMapping")
    """The same for annotations."""
    label_suffixes: Mapping[str, str] | None = str_map_field("labelSuffixes")
    """``labels[key] += suffix`` for each present label ``key``."""
    scheduler_name: str | None = str_field("schedulerName")
    """Set as ``spec.schedulerName``."""
    patch: Mapping[str, Any] | None = object_field("patch")
    """A strategic merge patch of the Pod (``$patch`` directives and the Pod's merge keys honoured)."""


@dataclass(frozen=True)
class Profile:
    """One parsed ClusterColocationProfile."""

    name: str
    """``metadata.name``: profiles are applied in lexicographic order of it."""
    spec: ProfileSpec = field(default_factory=ProfileSpec)
    """What the profile selects and sets."""
    skip_update_resources: bool = False
    """The profile carries the ``config.koordinator.sh/skip-update-resources`` annotation."""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Profile:
        """Parse a ClusterColocationProfile object as the API returns it; raises ConfigError naming the
        profile and the field that is wrong."""
        if not isinstance(obj, Mapping):
            raise ConfigError(f"ClusterColocationProfile: must be an object, got {show(obj)}")
        metadata = gojson.member(obj, "metadata")
        name = gojson.member(metadata, "name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            raise ConfigError("ClusterColocationProfile metadata.name: must be a non-empty string")
        annotations = gojson.str_map(gojson.member(metadata, "annotations"),
                                     f"ClusterColocationProfile {name} metadata.annotations", ConfigError)
        raw_spec = gojson.member(obj, "spec")
        spec = ProfileSpec() if raw_spec is None else ProfileSpec.from_json(
            raw_spec, f"ClusterColocationProfile {name} spec")
        return cls(name=name, spec=spec, skip_update_resources=ANNOTATION_SKIP_UPDATE_RESOURCES in annotations)

    @property
    def percent(self) -> int:
        """The probability in percent (100 when unset)."""
        return 100 if self.spec.probability is None else self.spec.probability

    def skipped_by(self, rand: Callable[[int], int]) -> bool:
        """Whether this pod draws a miss.  Upstream's rule verbatim (``shouldSkipProfile``): 0 always skips,
        100 never draws, otherwise skip when ``rand(100) > percent`` -- so "50%" applies to 51 of 100 draws."""
        percent = self.percent
        return percent == 0 or (percent != 100 and rand(100) > percent)

    def selects_pod(self, pod_labels: Mapping[str, str]) -> bool:
        """The pod selector part of matching (a None or empty selector selects every pod)."""
        selector = self.spec.selector
        return selector is None or selector.matches(pod_labels)

    def needs_namespace(self) -> bool:
        """Whether matching needs the namespace's labels: an empty namespace selector matches without them
        (upstream returns before the namespace lookup)."""
        selector = self.spec.namespace_selector
        return selector is not None and bool(selector.match_labels or selector.match_expressions)

    def apply(self, pod: dict[str, Any], priority_class: Callable[[str], PriorityClassInfo | None]) -> None:
        """Lay this profile onto ``pod`` (a decoded v1.Pod, changed in place).

        ``priority_class`` looks a PriorityClass up by name; when it returns None a LookupError is raised
        (upstream fails the whole admission with the client's NotFound error).  A patch that cannot be applied,
        or that leaves a pod the webhooks cannot read, raises ValueError."""
        spec = self.spec
        metadata = _object(pod, "metadata")
        if spec.labels:
            _object(metadata, "labels").update(spec.labels)
        if spec.annotations:
            _object(metadata, "annotations").update(spec.annotations)
        # Upstream ranges over Go maps, whose order is random; sorted keys make chained mappings
        # (a->b, b->c) at least deterministic here.
        if spec.label_keys_mapping:
            _copy_keys(_object(metadata, "labels"), spec.label_keys_mapping)
        if spec.annotation_keys_mapping:
            _copy_keys(_object(metadata, "annotations"), spec.annotation_keys_mapping)
        if spec.label_suffixes:
            labels = _object(metadata, "labels")
            for key in sorted(spec.label_suffixes):
                if key in labels:
                    labels[key] = labels[key] + spec.label_suffixes[key]
        pod_spec = _object(pod, "spec")
        if spec.scheduler_name:
            pod_spec["schedulerName"] = spec.scheduler_name
        if spec.qos_class:
            _object(metadata, "labels")[LABEL_QOS] = spec.qos_class
        if spec.priority_class_name:
            info = priority_class(spec.priority_class_name)
            if info is None:
                raise LookupError(f'priorityclasses.scheduling.k8s.io "{spec.priority_class_name}" not found')
            pod_spec["priorityClassName"] = spec.priority_class_name
            pod_spec["priority"] = info.value
            if info.preemption_policy is None:
                pod_spec.pop("preemptionPolicy", None)
            else:
                pod_spec["preemptionPolicy"] = info.preemption_policy
        if spec.koordinator_priority is not None:
            _object(metadata, "labels")[LABEL_PRIORITY] = str(spec.koordinator_priority)
        if spec.patch is not None:
            patched = strategic_merge_pod(pod, spec.patch)
            if patched is not pod:  # a top-level "$patch: replace|delete" yields a new object
                pod.clear()
                pod.update(patched)
            # Upstream decodes the patched JSON back into a typed Pod and fails the admission when that
            # fails; the same checks the request passed keep a malformed patch from reaching the apiserver.
            check_pod(pod, "patched pod")


def _object(metadata: dict[str, Any], key: str) -> dict[str, Any]:
    """``metadata[key]`` as a mutable object (labels, annotations, the pod's metadata or spec), created when
    absent or null (the request decoder has already refused one of another type)."""
    found = metadata.get(key)
    if found is None:
        found = metadata[key] = {}
    return found


def _copy_keys(values: dict[str, str], mapping: Mapping[str, str]) -> None:
    for old in sorted(mapping):
        values[mapping[old]] = values.get(old, "")

