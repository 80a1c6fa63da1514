"""The fake kube-apiserver authorizes service-account tokens by the RBAC the manifests ship (plus the bootstrap
roles): every call koord-companion's grants allow passes, anything else is the real 403, and the companion itself
runs on exactly its grants, and stops working when one it needs is taken away."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient

from koordlet.companion.kube import make_api_client
from tests.fixtures.fakeapiserver import RESOURCES, FakeApiServer, make_pod
from tests.fixtures.rbac import NAMESPACE, rules_of
from tests.fixtures.waiting import wait_until
from tests.security.rig import leading_companion

SA = "koord-companion"
USER = f"system:serviceaccount:{NAMESPACE}:{SA}"
VERSIONS = {**{r.group: r.version for r in RESOURCES.values()}, "authentication.k8s.io": "v1"}

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl renders the manifests' RBAC")


@pytest.fixture
def companion_token(fake_apiserver: FakeApiServer, tmp_path: Path) -> Path:
    """A projected token of the companion's pod, as its Deployment mounts it (audience: the API server)."""
    fake_apiserver.seed(make_pod("koord-companion-0", NAMESPACE, "node-1", service_account=SA))
    path = tmp_path / "companion-token"
    path.write_text(fake_apiserver.mint_token(NAMESPACE, "koord-companion-0"))
    return path


@pytest.fixture
def client(fake_apiserver: FakeApiServer, companion_token: Path) -> Iterator[ApiClient]:
    api = make_api_client(fake_apiserver.host, companion_token, fake_apiserver.ca_file)
    try:
        yield api
    finally:
        api.close()


def _path(group: str, resource: str, namespace: str, name: str) -> str:
    base = f"/apis/{group}/{VERSIONS[group]}" if group else "/api/v1"
    plural, _, sub = resource.partition("/")
    path = f"{base}/namespaces/{namespace}/{plural}" if namespace else f"{base}/{plural}"
    if name or sub:
        path += f"/{name or 'x'}"
    return f"{path}/{sub}" if sub else path


_METHODS = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT", "patch": "PATCH",
            "delete": "DELETE"}


def call(api: ApiClient, verb: str, group: str, resource: str, namespace: str = "", name: str = "") -> tuple[int, Any]:
    """One request through the real client: (HTTP status, decoded body)."""
    path = _path(group, resource, namespace, name if verb not in ("list", "watch", "create") or "/" in resource
                 else "")
    query = [("watch", "true"), ("timeoutSeconds", "1")] if verb == "watch" else []
    body: Any = {"metadata": {"name": name or "x"}} if verb in ("create", "update", "patch") else None
    headers = {"Content-Type": "application/merge-patch+json" if verb == "patch" else "application/json",
               "Accept": "application/json"}
    answer = _send(api, _METHODS[verb], path, query, headers, body)
    if verb == "watch":
        # The fake ends a watch by closing the connection, which the pool would hand out again.
        api.rest_client.pool_manager.clear()
    return answer


def _send(api: ApiClient, method: str, path: str, query: list[tuple[str, str]] | None = None,
          headers: dict[str, str] | None = None, body: Any = None) -> tuple[int, Any]:
    """Through the real client's URL building, token hook and TLS: (HTTP status, decoded JSON body or None)."""
    serialized = api.param_serialize(method, path, query_params=query or [],
                                     header_params=headers or {"Accept": "application/json"}, body=body,
                                     auth_settings=["BearerToken"])
    response = api.call_api(*serialized[:4], _request_timeout=10)
    data = response.read()
    try:
        return int(response.status), json.loads(data) if data else None
    except ValueError:  # a watch stream: JSON lines
        return int(response.status), None


NAMESPACED = {r.plural for r in RESOURCES.values() if r.namespaced}


def _grants(fake_apiserver: FakeApiServer) -> list[tuple[str, str, str, str, str]]:
    """(namespace, group, resource, verb, name) of a call for every grant the manifests give the companion: a
    cluster-wide grant on a namespaced resource is used in the companion's namespace (lists: across all)."""
    found = []
    for scope, rule in rules_of(fake_apiserver.rbac(), SA):
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    name = (rule.get("resourceNames") or [""])[0]
                    if not name and (verb in ("get", "update", "patch") or "/" in resource):
                        name = "node-1"
                    namespaced = resource.split("/")[0] in NAMESPACED
                    namespace = scope or (NAMESPACE if namespaced and verb not in ("list", "watch") else "")
                    found.append((namespace, group, resource, verb, name))
    return found


def _refusal(verb: str, group: str, resource: str, namespace: str, name: str) -> str:
    qualified = resource.split("/")[0] + (f".{group}" if group else "")
    if resource.split("/")[0] == "namespaces":
        namespace = name  # RequestInfoFactory: a namespace's own requests are in that namespace
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return (f'{qualified} "{name}" is forbidden: User "{USER}" cannot {verb} resource "{resource}" in API group '
            f'"{group}" {where}')


def test_every_granted_call_passes_and_its_neighbours_are_refused(fake_apiserver: FakeApiServer,
                                                                  client: ApiClient) -> None:
    grants = _grants(fake_apiserver)
    assert len(grants) > 30  # the manifests were read
    for namespace, group, resource, verb, name in grants:
        status, body = call(client, verb, group, resource, namespace, name)
        assert status != 403, (verb, group, resource, namespace, name, body)
    assert fake_apiserver.denials == []
    for namespace, group, resource, verb, name in grants:
        # No grant deletes anything.
        status, body = call(client, "delete", group, resource, namespace, name or "x")
        assert (status, body["message"]) == (403, _refusal("delete", group, resource, namespace, name or "x"))
        if namespace == NAMESPACE and resource.split("/")[0] in ("secrets", "configmaps", "leases"):
            # Granted by the Role: nothing of the kind in another namespace.
            status, body = call(client, verb, group, resource, "kube-system", name or "x")
            assert status == 403, (verb, resource)
    assert len(fake_apiserver.denials) >= len(grants)


def test_refusals_carry_the_real_status_body(fake_apiserver: FakeApiServer, client: ApiClient) -> None:
    status, body = call(client, "delete", "slo.koordinator.sh", "nodeslos", "", "node-1")
    assert (status, body) == (403, {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f'nodeslos.slo.koordinator.sh "node-1" is forbidden: User "{USER}" cannot delete resource '
                   f'"nodeslos" in API group "slo.koordinator.sh" at the cluster scope',
        "reason": "Forbidden", "details": {"name": "node-1", "group": "slo.koordinator.sh", "kind": "nodeslos"},
        "code": 403})
    # By name: its own serving Secret only, in its namespace only.
    status, body = call(client, "get", "", "secrets", NAMESPACE, "other-secret")
    assert status == 403
    assert body["message"] == (f'secrets "other-secret" is forbidden: User "{USER}" cannot get resource "secrets" in '
                               f'API group "" in the namespace "{NAMESPACE}"')
    assert body["details"] == {"name": "other-secret", "kind": "secrets"}
    # A subresource is its own grant: pods/eviction create yes, pods/status update no.
    status, body = call(client, "update", "", "pods/status", NAMESPACE, "koord-companion-0")
    assert status == 403
    assert body["message"] == (f'pods "koord-companion-0" is forbidden: User "{USER}" cannot update resource '
                               f'"pods/status" in API group "" in the namespace "{NAMESPACE}"')
    status, body = call(client, "list", "", "secrets", NAMESPACE)
    assert status == 403
    assert body["message"] == (f'secrets is forbidden: User "{USER}" cannot list resource "secrets" in API group "" '
                               f'in the namespace "{NAMESPACE}"')
    assert [d.message for d in fake_apiserver.denials][-1] == body["message"]
    # The bootstrap roles every authenticated user holds: discovery and /version.
    assert call_path(client, "/version")[0] == 200
    status, body = call_path(client, "/metrics")
    assert status == 403 and body["message"] == f'forbidden: User "{USER}" cannot get path "/metrics"'


def call_path(api: ApiClient, path: str) -> tuple[int, Any]:
    return _send(api, "GET", path)


def test_the_admin_token_is_not_asked_and_a_foreign_token_is_401(fake_apiserver: FakeApiServer,
                                                                 kube_api: ApiClient, tmp_path: Path) -> None:
    assert call(kube_api, "delete", "slo.koordinator.sh", "nodeslos", "", "node-1")[0] == 404
    fake_apiserver.seed(make_pod("koordlet-a", NAMESPACE, "node-1", service_account="koordlet"))
    koordlet_token = tmp_path / "koordlet-token"  # audience koord-companion: not for the API server
    koordlet_token.write_text(fake_apiserver.mint_token(NAMESPACE, "koordlet-a", audiences=["koord-companion"]))
    api = make_api_client(fake_apiserver.host, koordlet_token, fake_apiserver.ca_file)
    try:
        assert call(api, "get", "", "nodes", "", "node-1")[0] == 401
    finally:
        api.close()
    assert fake_apiserver.denials == []


# ------------------------------------------------------------------------------------- the real companion


def test_companion_runs_on_its_grants(fake_apiserver: FakeApiServer, companion_token: Path) -> None:
    with leading_companion(fake_apiserver, ["node-1"], token_file=companion_token):
        wait_until("node-1's NodeSLO", lambda: fake_apiserver.get("nodeslos", "node-1"))
    assert fake_apiserver.denials == []


def test_companion_without_one_grant_fails_with_the_403(fake_apiserver: FakeApiServer, companion_token: Path) -> None:
    policy = fake_apiserver.rbac()
    [role] = [o for o in policy if o["kind"] == "ClusterRole" and o["metadata"]["name"] == SA]
    [rule] = [r for r in role["rules"] if r.get("resources") == ["nodeslos", "nodemetrics"]]
    rule["resources"] = ["nodemetrics"]  # nodeslos get/create/update taken away
    fake_apiserver.set_rbac(policy)
    with leading_companion(fake_apiserver, ["node-1"], token_file=companion_token):
        denial = wait_until("a refused NodeSLO call", lambda: [d for d in fake_apiserver.denials
                                                              if d.attributes.resource == "nodeslos"])[0]
    assert denial.user == USER
    assert denial.message == (f'nodeslos.slo.koordinator.sh "node-1" is forbidden: User "{USER}" cannot '
                              f'{denial.attributes.verb} resource "nodeslos" in API group "slo.koordinator.sh" at '
                              f'the cluster scope')
    assert fake_apiserver.get("nodeslos", "node-1") is None
