"""The fake kube-apiserver's request attributes (kube-apiserver's RequestInfoFactory) and RBAC evaluation, on
their own: the cases the privilege tests and the companion's calls depend on."""

from __future__ import annotations

import pytest

from tests.fixtures.fakeauth import forbidden_body, request_attributes
from tests.fixtures.rbac import BOOTSTRAP, Attributes, User, authorize


@pytest.mark.parametrize(("method", "path", "query", "expected"), [
    ("GET", "/api/v1/nodes", {}, ("list", "", "nodes", "", "", "")),
    ("GET", "/api/v1/nodes", {"watch": "true"}, ("watch", "", "nodes", "", "", "")),
    ("GET", "/api/v1/watch/nodes/n1", {}, ("watch", "", "nodes", "", "n1", "")),
    ("GET", "/api/v1/namespaces/ns/configmaps", {"fieldSelector": "metadata.name=cfg"},
     ("list", "", "configmaps", "", "cfg", "ns")),
    ("PATCH", "/api/v1/nodes/n1/status", {}, ("patch", "", "nodes", "status", "n1", "")),
    ("POST", "/api/v1/namespaces/ns/pods/web/eviction", {}, ("create", "", "pods", "eviction", "web", "ns")),
    ("PUT", "/apis/slo.koordinator.sh/v1alpha1/nodemetrics/n1/status", {},
     ("update", "slo.koordinator.sh", "nodemetrics", "status", "n1", "")),
    ("DELETE", "/api/v1/namespaces/ns/pods", {}, ("deletecollection", "", "pods", "", "", "ns")),
    # A namespace's own requests are in that namespace, its status and finalize are its subresources.
    ("GET", "/api/v1/namespaces/ns", {}, ("get", "", "namespaces", "", "ns", "ns")),
    ("PUT", "/api/v1/namespaces/ns/finalize", {}, ("update", "", "namespaces", "finalize", "ns", "ns")),
    ("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {},
     ("create", "authentication.k8s.io", "tokenreviews", "", "", "")),
])
def test_request_attributes(method: str, path: str, query: dict[str, str],
                            expected: tuple[str, str, str, str, str, str]) -> None:
    attrs = request_attributes(method, path, query)
    assert attrs.resource_request
    assert (attrs.verb, attrs.api_group, attrs.resource, attrs.subresource, attrs.name, attrs.namespace) == expected


@pytest.mark.parametrize("path", ["/version", "/api", "/apis", "/apis/slo.koordinator.sh", "/healthz", "/metrics"])
def test_non_resource_requests(path: str) -> None:
    attrs = request_attributes("GET", path, {})
    assert (attrs.resource_request, attrs.verb, attrs.path) == (False, "get", path)


def test_bootstrap_roles_every_authenticated_user_holds() -> None:
    user = User.service_account("ns", "sa")
    for path, allowed in (("/version", True), ("/apis", True), ("/api/v1", True), ("/metrics", False)):
        assert authorize(BOOTSTRAP, user, Attributes("get", resource_request=False, path=path))[0] is allowed, path
    review = Attributes("create", api_group="authorization.k8s.io", resource="selfsubjectaccessreviews")
    assert authorize(BOOTSTRAP, user, review)[0]
    # system:auth-delegator exists but is bound to nobody by default.
    tokenreview = Attributes("create", api_group="authentication.k8s.io", resource="tokenreviews")
    assert not authorize(BOOTSTRAP, user, tokenreview)[0]


def test_rules_match_like_the_rbac_authorizer() -> None:
    user = User.service_account("ns", "sa")
    policy = [
        {"kind": "Role", "metadata": {"name": "r", "namespace": "ns"}, "rules": [
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["mine"]},
            {"apiGroups": [""], "resources": ["*/status"], "verbs": ["update"]}]},
        {"kind": "RoleBinding", "metadata": {"name": "b", "namespace": "ns"},
         "roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "ServiceAccount", "name": "sa"}]},
        {"kind": "ClusterRoleBinding", "metadata": {"name": "dangling"},
         "roleRef": {"kind": "ClusterRole", "name": "gone"},
         "subjects": [{"kind": "Group", "name": "system:serviceaccounts"}]},
    ]
    assert authorize(policy, user, Attributes("get", resource="secrets", name="mine", namespace="ns"))[0]
    assert not authorize(policy, user, Attributes("get", resource="secrets", name="other", namespace="ns"))[0]
    assert not authorize(policy, user, Attributes("get", resource="secrets", name="mine", namespace="kube-system"))[0]
    assert authorize(policy, user, Attributes("update", resource="pods", subresource="status", namespace="ns"))[0]
    allowed, reason = authorize(policy, user, Attributes("list", resource="secrets", namespace="ns"))
    assert (allowed, reason) == (False, 'RBAC: clusterrole.rbac.authorization.k8s.io "gone" not found')
    body = forbidden_body(user, Attributes("list", resource="secrets", namespace="ns"), reason)
    assert body["message"] == ('secrets is forbidden: User "system:serviceaccount:ns:sa" cannot list resource '
                               '"secrets" in API group "" in the namespace "ns": RBAC: clusterrole.rbac.authorization'
                               '.k8s.io "gone" not found')
    assert body["details"] == {"kind": "secrets"}
