"""The pod admission webhooks of Koordinator's manager, as pure functions of an AdmissionReview.

``mutate`` follows ``pkg/webhook/pod/mutating/mutating_handler.go`` for CREATE: the ClusterColocationProfiles
(``cluster_colocation_profile.go``), then the ``node.koordinator.sh/extended-resource-spec`` annotation
(``extended_resource_spec.go``); the answer is an RFC 6902 patch from the pod as received to the pod as
mutated.  ``validate`` follows ``pkg/webhook/pod/validating`` (``cluster_colocation_profile.go``).  Both never
raise: a request that cannot be decoded is refused with 400, a failed lookup (a profile naming a PriorityClass
that does not exist) with 500.  Like upstream's ``admission.Errored``, such an answer refuses the pod whatever the
webhook's ``failurePolicy`` (which only covers calls that fail); the webhook server turns the failures that are
its own (a view not synced yet, a bug) into HTTP errors instead, which ``failurePolicy: Ignore`` admits.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from koordlet.companion.colocation import resources
from koordlet.companion.colocation import validate as rules
from koordlet.companion.colocation.jsonpatch import diff
from koordlet.companion.colocation.profile import PriorityClassInfo, Profile
from koordlet.errors import ParseError

__all__ = ["API_VERSION", "ClusterView", "Decision", "PriorityClassInfo", "Profile", "mutate", "validate"]

API_VERSION: Final = "admission.k8s.io/v1"


class ClusterView(Protocol):
    """What the mutation reads from the cluster (a watch cache in the webhook, a dict in tests)."""

    def profiles(self) -> Sequence[Profile]:
        """The parsed, valid ClusterColocationProfiles, in any order."""

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """The labels of namespace ``name``; None when the namespace is unknown."""

    def priority_class(self, name: str) -> PriorityClassInfo | None:
        """The PriorityClass ``name``; None when it does not exist."""


@dataclass(frozen=True)
class Decision:
    """What an admission call decided, for metrics and logs."""

    allowed: bool
    mutated: bool
    """A non-empty patch was returned."""
    profiles: tuple[str, ...] = ()
    """Names of the profiles applied, in the order applied."""
    skipped: tuple[str, ...] = ()
    """Profiles that matched the pod but lost the probability draw."""
    reason: str = ""
    """The refusal or error text; for an allowed pod, remarks worth a log line ("" when none)."""


class _Refused(Exception):
    """Ends an admission with ``allowed: false`` and an HTTP-like status code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def mutate(review: Mapping[str, Any], view: ClusterView, *, rand: Callable[[int], int] = random.randrange
           ) -> tuple[dict[str, Any], Decision]:
    """AdmissionReview (admission.k8s.io/v1, as decoded from JSON) -> the response AdmissionReview and what
    was decided.  A mutated pod is answered with ``patchType: JSONPatch`` and the base64 patch; other kinds,
    subresources and operations other than CREATE are allowed unchanged, as upstream."""
    return _answer(review, lambda request: _mutate(request, view, rand))


def validate(review: Mapping[str, Any]) -> tuple[dict[str, Any], Decision]:
    """AdmissionReview -> response: refuses (code 400, the field errors as message) the pods upstream's
    ClusterColocationProfile validation refuses on CREATE and UPDATE; everything else is allowed."""
    return _answer(review, _validate)


def _answer(review: Mapping[str, Any], decide: Callable[[Mapping[str, Any]], tuple[list[dict[str, Any]], Decision]]
            ) -> tuple[dict[str, Any], Decision]:
    """The response AdmissionReview for ``decide``'s patch and decision; a refusal or any unexpected error
    becomes ``allowed: false`` with its code, so the webhook always answers and its failurePolicy decides."""
    uid = _uid(review)
    try:
        ops, decision = decide(_request(review))
    except _Refused as refused:
        code, message = refused.code, str(refused)
    except Exception as exc:  # a bug must not leave kube-apiserver without an answer
        code, message = 500, f"internal error: {type(exc).__name__}: {exc}"
    else:
        response = _allowed(uid)
        if ops:
            response["response"]["patchType"] = "JSONPatch"
            response["response"]["patch"] = base64.b64encode(
                json.dumps(ops, separators=(",", ":"), ensure_ascii=False).encode()).decode("ascii")
        return response, decision
    response = {"apiVersion": API_VERSION, "kind": "AdmissionReview",
                "response": {"uid": uid, "allowed": False, "status": {"code": code, "message": message}}}
    return response, Decision(allowed=False, mutated=False, reason=message)


def _mutate(request: Mapping[str, Any], view: ClusterView, rand: Callable[[int], int]
            ) -> tuple[list[dict[str, Any]], Decision]:
    if _ignored(request) or request.get("operation") not in ("CREATE", "UPDATE"):
        return [], Decision(allowed=True, mutated=False)
    pod = _decode_pod(request.get("object"), "request.object")
    if request["operation"] != "CREATE":  # upstream's handleUpdate changes nothing
        return [], Decision(allowed=True, mutated=False)
    mutated_pod = _clone(pod)
    applied, skipped, remarks = _apply_profiles(mutated_pod, _namespace_of(pod, request), view, rand)
    try:
        resources.set_extended_resource_spec(mutated_pod)
    except ValueError as exc:
        raise _Refused(500, f"failed to get current extended resource spec, err: {exc}") from None
    ops = diff(pod, mutated_pod)
    return ops, Decision(allowed=True, mutated=bool(ops), profiles=applied, skipped=skipped,
                         reason="; ".join(remarks))


def _validate(request: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Decision]:
    operation = request.get("operation")
    if _ignored(request) or operation not in ("CREATE", "UPDATE"):
        return [], Decision(allowed=True, mutated=False)
    pod = _decode_pod(request.get("object"), "request.object")
    old = _decode_pod(request.get("oldObject"), "request.oldObject") if operation == "UPDATE" else None
    message = rules.validate_pod(pod, old)
    if message:  # upstream answers its field errors with admission.Errored(400, ...)
        raise _Refused(400, message)
    return [], Decision(allowed=True, mutated=False)


def _apply_profiles(pod: dict[str, Any], namespace: str, view: ClusterView, rand: Callable[[int], int]
                    ) -> tuple[tuple[str, ...], tuple[str, ...], list[str]]:
    """``clusterColocationProfileMutatingPod``: match, sort by name, draw, apply, then convert resources."""
    remarks: list[str] = []
    try:
        profiles = view.profiles()
    except Exception as exc:  # the view is the webhook's cache: any failure is upstream's List error
        raise _Refused(500, f"listing ClusterColocationProfiles: {exc}") from None
    labels = (pod.get("metadata") or {}).get("labels") or {}
    namespace_labels: Mapping[str, str] | None = None
    namespace_looked_up = False
    matched: list[Profile] = []
    for profile in profiles:
        if profile.needs_namespace():
            if not namespace_looked_up:
                namespace_labels, remark = _namespace_labels(view, namespace)
                namespace_looked_up = True
                if remark:
                    remarks.append(remark)
            # Upstream counts a namespace it cannot read as matching (its `!matched && err == nil` test).
            selector = profile.spec.namespace_selector
            if namespace_labels is not None and selector is not None and not selector.matches(namespace_labels):
                continue
        if profile.selects_pod(labels):
            matched.append(profile)
    if not matched:
        return (), (), remarks
    matched.sort(key=lambda profile: profile.name)
    applied: list[str] = []
    skipped: list[str] = []
    skip_resources = False
    for profile in matched:
        skip_resources = skip_resources or profile.skip_update_resources
        if profile.skipped_by(rand):
            skipped.append(profile.name)
            continue
        try:
            profile.apply(pod, view.priority_class)
        except (LookupError, ValueError) as exc:  # NotFound, or a patch apimachinery would refuse
            raise _Refused(500, f"ClusterColocationProfile {profile.name}: {exc}") from None
        applied.append(profile.name)
    if not skip_resources:
        resources.convert_pod_resources(pod)
    return tuple(applied), tuple(skipped), remarks


def _namespace_labels(view: ClusterView, namespace: str) -> tuple[Mapping[str, str] | None, str]:
    try:
        found = view.namespace_labels(namespace)
    except Exception as exc:  # as upstream's failed Get: the profile still counts as matching
        return None, f"namespace {namespace!r} lookup failed ({exc}); namespaceSelectors count as matching"
    if found is None:
        return None, f"namespace {namespace!r} unknown; namespaceSelectors count as matching"
    return found, ""


def _uid(review: Mapping[str, Any]) -> str:
    request = review.get("request") if isinstance(review, Mapping) else None
    uid = request.get("uid") if isinstance(request, Mapping) else None
    return uid if isinstance(uid, str) else ""


def _request(review: Mapping[str, Any]) -> Mapping[str, Any]:
    if not isinstance(review, Mapping):
        raise _Refused(400, "AdmissionReview: must be an object")
    request = review.get("request")
    if not isinstance(request, Mapping):
        raise _Refused(400, "AdmissionReview.request: must be an object")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise _Refused(400, "AdmissionReview.request.uid: must be a non-empty string")
    return request


def _ignored(request: Mapping[str, Any]) -> bool:
    """Upstream's ``shouldIgnoreIfNotPod``: subresources and resources other than ``pods``."""
    resource = request.get("resource")
    name = resource.get("resource") if isinstance(resource, Mapping) else None
    return bool(request.get("subResource")) or name != "pods"


def _decode_pod(obj: Any, where: str) -> dict[str, Any]:
    """The pod in the request, checked where the mutation reads it (upstream decodes into a typed Pod and
    answers 400 when that fails)."""
    try:
        return resources.check_pod(obj, where)
    except ParseError as exc:
        raise _Refused(400, str(exc)) from None


def _namespace_of(pod: Mapping[str, Any], request: Mapping[str, Any]) -> str:
    """``metadata.namespace``, else the request's (a pod created in a namespace may omit its own)."""
    namespace = (pod.get("metadata") or {}).get("namespace") or request.get("namespace") or ""
    return namespace if isinstance(namespace, str) else ""


def _clone(value: Any) -> Any:
    """A deep copy of decoded JSON; four times faster than ``copy.deepcopy``, which matters at every pod."""
    if type(value) is dict:
        return {key: _clone(item) for key, item in value.items()}
    if type(value) is list:
        return [_clone(item) for item in value]
    return value


def _allowed(uid: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": True, "status": {"code": 200}}}
