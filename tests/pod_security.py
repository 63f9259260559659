"""The Pod Security Standards (`baseline`, `restricted`) as the PodSecurity admission plugin
checks a pod spec, for the manifests' tests: schema validation (kubernetes-validate) cannot
see that a namespace labelled `pod-security.kubernetes.io/enforce: restricted` would reject
the pods of a workload placed in it.

The checks are those of https://kubernetes.io/docs/concepts/security/pod-security-standards/
(version `latest`) that a pod template in this repository could trip: host namespaces,
privileged containers, added capabilities, hostPath volumes, host ports, seccomp, `/proc`
mount, sysctls (baseline); volume types, privilege escalation, running as non-root, user 0,
seccomp profile, capabilities dropped (restricted). AppArmor and SELinux options are checked
for their baseline rule only. `privileged` allows everything.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

Obj = Mapping[str, Any]

LEVELS: Final = ("privileged", "baseline", "restricted")
#: The capabilities baseline allows to add.
BASELINE_CAPABILITIES: Final = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
#: The volume types restricted allows.
RESTRICTED_VOLUMES: Final = frozenset(
    {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
)
SAFE_SYSCTLS: Final = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
WORKLOAD_KINDS: Final = frozenset(
    {"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job", "CronJob", "Pod"}
)


def pod_spec(obj: Obj) -> Obj | None:
    """The pod spec a workload object creates pods from (None for other kinds)."""
    kind = obj.get("kind")
    if kind not in WORKLOAD_KINDS:
        return None
    if kind == "Pod":
        spec: Obj = obj["spec"]
        return spec
    if kind == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]  # type: ignore[no-any-return]
    return obj["spec"]["template"]["spec"]  # type: ignore[no-any-return]


def _containers(spec: Obj) -> Iterator[Obj]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _baseline(spec: Obj) -> Iterator[str]:
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            yield f"host namespaces ({key}=true)"
    pod_context = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            yield f'hostPath volumes (volume "{volume["name"]}")'
    for sysctl in pod_context.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            yield f"forbidden sysctls ({sysctl.get('name')})"
    contexts = [(pod_context, "pod")] + [
        (container.get("securityContext") or {}, f'container "{container["name"]}"')
        for container in _containers(spec)
    ]
    for context, where in contexts:
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if seccomp == "Unconfined":
            yield f"seccompProfile (Unconfined, {where})"
        selinux = (context.get("seLinuxOptions") or {}).get("type")
        if selinux and selinux not in ("container_t", "container_init_t", "container_kvm_t"):
            yield f"seLinuxOptions (type {selinux}, {where})"
    for container in _containers(spec):
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            yield f'privileged (container "{name}")'
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            yield f'non-default capabilities (container "{name}": {sorted(added)})'
        if context.get("procMount", "Default") != "Default":
            yield f'procMount (container "{name}")'
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                yield f'hostPort (container "{name}": {port["hostPort"]})'


def _restricted(spec: Obj) -> Iterator[str]:
    pod_context = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        types = set(volume) - {"name"}
        if not types <= RESTRICTED_VOLUMES:
            yield f'restricted volume types (volume "{volume["name"]}": {sorted(types)})'
    if pod_context.get("runAsUser") == 0:
        yield "runAsUser=0 (pod)"
    pod_seccomp = (pod_context.get("seccompProfile") or {}).get("type")
    for container in _containers(spec):
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            yield f'allowPrivilegeEscalation != false (container "{name}")'
        non_root = context.get("runAsNonRoot", pod_context.get("runAsNonRoot"))
        if non_root is not True:
            yield f'runAsNonRoot != true (container "{name}")'
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            yield f'runAsUser=0 (container "{name}")'
        seccomp = (context.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            yield f'seccompProfile (container "{name}" must be RuntimeDefault or Localhost)'
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            yield f'unrestricted capabilities (container "{name}" must drop ALL)'
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            yield f'unrestricted capabilities (container "{name}" adds more than NET_BIND_SERVICE)'


def violations(spec: Obj, level: str) -> list[str]:
    """What the PodSecurity admission plugin would refuse in `spec` at `level`."""
    if level not in LEVELS:
        raise ValueError(f"unknown Pod Security level {level!r}")
    found: list[str] = []
    if level in ("baseline", "restricted"):
        found += _baseline(spec)
    if level == "restricted":
        found += _restricted(spec)
    return found


def enforced_level(namespace: Obj) -> str:
    """The level a Namespace's labels enforce (unlabelled: privileged, the default)."""
    labels = namespace.get("metadata", {}).get("labels") or {}
    return str(labels.get("pod-security.kubernetes.io/enforce", "privileged"))
