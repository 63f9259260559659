"""What an identity was granted by a deployment's RBAC, and what it used, from the real API
server: the bindings' roles as kube-apiserver stores them (the built-in ones referenced, such as
`system:auth-delegator`, included) against the audit log's requests of that identity.

A permission is `(verb, group, resource)`, with `resource` as `resource/subresource` where
there is one (Role rules name them so). O(rules x verbs x resources) to expand; O(events) to
read the audit log.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from tests.controlplane.cluster import ControlPlane
from tests.controlplane.deployment import Build, Obj

__all__ = ["Permission", "Use", "granted", "uses"]

Permission = tuple[str, str, str]  # verb, API group, resource[/subresource]


@dataclass(frozen=True)
class Use:
    """One request of the identity, as audited."""

    permission: Permission
    namespace: str
    name: str
    code: int


def _role(plane: ControlPlane, ref: Obj, namespace: str) -> Obj:
    kind = "clusterroles" if ref["kind"] == "ClusterRole" else "roles"
    where = "" if kind == "clusterroles" else f"namespaces/{namespace}/"
    return plane.get_json(f"/apis/rbac.authorization.k8s.io/v1/{where}{kind}/{ref['name']}")  # type: ignore[no-any-return]


def _subject_is(subject: Obj, namespace: str, name: str) -> bool:
    return (
        subject.get("kind") == "ServiceAccount"
        and subject.get("name") == name
        and subject.get("namespace", namespace) == namespace
    )


def granted(plane: ControlPlane, build: Build) -> set[Permission]:
    """Every permission the build's (Cluster)RoleBindings give its ServiceAccount."""
    found: set[Permission] = set()
    for binding in build.of_kind("RoleBinding") + build.of_kind("ClusterRoleBinding"):
        subjects = binding.get("subjects") or []
        if not any(_subject_is(s, build.namespace, build.service_account) for s in subjects):
            continue
        namespace = binding["metadata"].get("namespace", "")
        for rule in _role(plane, binding["roleRef"], namespace).get("rules") or []:
            for verb in rule.get("verbs", []):
                for group in rule.get("apiGroups", []):
                    for resource in rule.get("resources", []):
                        found.add((verb, group, resource))
    return found


def uses(plane: ControlPlane, user: str) -> list[Use]:
    """Every resource request `user` made, from the audit log (non-resource paths, such as
    discovery's `/apis`, which every authenticated identity may read, are left out)."""
    found = []
    for event in plane.audit_events():
        ref = event.get("objectRef")
        if event["user"]["username"] != user or not ref or "resource" not in ref:
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found.append(
            Use(
                (event["verb"], ref.get("apiGroup", ""), resource),
                ref.get("namespace", ""),
                ref.get("name", ""),
                int(event.get("responseStatus", {}).get("code", 0)),
            )
        )
    return found


def covers(grants: Iterable[Permission], used: Permission) -> bool:
    """Whether a grant allows `used` (RBAC's `*` for verbs, groups or resources included)."""
    verb, group, resource = used
    return any(
        v in (verb, "*") and g in (group, "*") and r in (resource, "*") for v, g, r in grants
    )
