"""Which pods are scraped, at which endpoints, and which workloads own them: the pod-metrics
backend's view of the cluster, fed by two watches.

`PodTargets` is the `WatchSink` of the pods (list + watch of `/api/v1/pods` with
`fieldSelector=status.phase=Running`, so pods that stop running leave as DELETED events): a
pod becomes targets when it is Running, has a pod IP and is chosen by a scrape config (its
namespace and labels match, and the config's port resolves on it: a number, or the name of one
of its containers' ports) or, with annotation discovery on, by its annotations
(`<prefix>/scrape: "true"`, `<prefix>/port` (required: a number or a container port name),
`<prefix>/path` (default `/metrics`), `<prefix>/scheme` (`http` or `https`)). One target per
distinct (port, path, scheme) of a pod: two configs naming the same endpoint scrape it once
(the first config's metric rules apply). Nothing else of a pod is kept: a pod that is not
chosen costs nothing after its event.

Ownership follows `ownerReferences`, as the resource model does (`cluster_state.records`): a pod's
controller (a ReplicaSet, StatefulSet, DaemonSet or Job), and a ReplicaSet's controller
Deployment from `ReplicaSetOwners` (the `WatchSink` of `/apis/apps/v1/replicasets`, kept only
when Deployments are aggregated: one small entry per ReplicaSet that a Deployment controls).
During a rollout the old and the new ReplicaSet's pods both belong to the Deployment, as they
do for the HPA.

PURE: no I/O. Cost: a pod event O(scrape configs + labels); `pods_of` O(result).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from custom_metrics_server.backends.pod_metrics.config import (
    WORKLOAD_KINDS,
    AnnotationDiscovery,
    MetricSelection,
    PodMetricsConfig,
    ScrapeConfig,
)
from custom_metrics_server.cluster_state.record_inputs import controller_of
from custom_metrics_server.domain import GroupResource, ObjectKey
from custom_metrics_server.kube.keyed_sink import KeyedSink

__all__ = ["PODS", "PodTargets", "ReplicaSetOwners", "Target"]

logger = logging.getLogger(__name__)

Scheme = Literal["http", "https"]

PODS: Final = GroupResource("", "pods")
DEPLOYMENTS: Final = GroupResource("apps", "deployments")
_PORT_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: A pod whose annotations are unusable is logged at most this often (seconds).
_WARN_EVERY: Final = 60.0


@dataclass(frozen=True, slots=True)
class Target:
    """One endpoint of one pod; `name` is its key everywhere (scheduler, store, logs)."""

    name: str
    namespace: str
    pod: str
    address: str
    port: int
    path: str
    scheme: Scheme
    selection: MetricSelection
    config: str  # the scrape config's name, or "annotations"


@dataclass(frozen=True, slots=True)
class _Pod:
    targets: tuple[Target, ...]
    controller: tuple[str, str] | None  # (kind, name)


def _port(spec: Mapping[str, Any], wanted: int | str) -> int | None:
    """A port number, or the number of the container port named `wanted`."""
    if isinstance(wanted, int):
        return wanted
    if wanted.isdigit():
        number = int(wanted)
        return number if 0 < number < 65536 else None
    for container in spec.get("containers") or ():
        for port in (container or {}).get("ports") or ():
            if port.get("name") == wanted and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return None


class PodTargets(KeyedSink[ObjectKey]):
    """The scrape targets, by pod and by name, and the pods of each controller."""

    def __init__(self, config: PodMetricsConfig, *, clock: Any = time.monotonic) -> None:
        super().__init__()
        self.config = config
        self._selections = {
            scrape.name: config.selection(scrape.metrics) for scrape in config.scrape
        }
        annotations = config.annotations
        self._annotation_selection = (
            config.selection(annotations.metrics) if annotations is not None else None
        )
        self.targets: dict[str, Target] = {}
        self._pods: dict[ObjectKey, _Pod] = {}
        #: (namespace, controller kind, controller name) -> pod names
        self._by_controller: dict[tuple[str, str, str], set[str]] = {}
        #: bumped on every change of the targets or of ownership (listings follow it)
        self.generation = 0
        self.replicasets = ReplicaSetOwners(self)
        self._clock = clock
        self._warned: dict[ObjectKey, float] = {}
        #: called when a target appears that was not there before (the scraper's catch-up)
        self.added: Callable[[], None] | None = None
        #: the workload resources whose Object metrics are served
        self.workloads = {
            WORKLOAD_KINDS[name][1]: WORKLOAD_KINDS[name][0] for name in config.workloads
        }

    # -- the pods' WatchSink (`KeyedSink`) --

    def keys(self) -> Iterable[ObjectKey]:
        return self._pods.keys()

    def key_of(self, obj: Mapping[str, Any]) -> ObjectKey | None:
        return _object_key(obj)

    # -- selection --

    def apply(self, pod: Mapping[str, Any]) -> ObjectKey | None:
        metadata = pod.get("metadata") or {}
        name = metadata.get("name")
        if not name:
            return None
        key = (str(metadata.get("namespace", "")), str(name))
        found = self._chosen(key, pod, metadata)
        if found is None:
            self.remove(key)
            return key
        previous = self._pods.get(key)
        if previous == found:
            return key
        self.remove(key)
        self._pods[key] = found
        before = {target.name for target in previous.targets} if previous is not None else set()
        appeared = False
        for target in found.targets:
            self.targets[target.name] = target
            appeared = appeared or target.name not in before
        if found.controller is not None:
            self._by_controller.setdefault((key[0], *found.controller), set()).add(key[1])
        self.generation += 1
        if appeared and self.added is not None:
            self.added()
        return key

    def _chosen(
        self, key: ObjectKey, pod: Mapping[str, Any], metadata: Mapping[str, Any]
    ) -> _Pod | None:
        status = pod.get("status") or {}
        address = status.get("podIP")
        if status.get("phase") != "Running" or not address:
            return None
        spec = pod.get("spec") or {}
        labels = metadata.get("labels") or {}
        endpoints: dict[tuple[int, str, Scheme], tuple[str, MetricSelection]] = {}
        for scrape in self.config.scrape:
            if self._matches(scrape, key[0], labels):
                port = _port(spec, scrape.port)
                if port is not None:
                    endpoint = (port, scrape.path, scrape.scheme)
                    endpoints.setdefault(endpoint, (scrape.name, self._selections[scrape.name]))
        annotations = self.config.annotations
        if annotations is not None and self._annotation_selection is not None:
            annotated = self._annotated(key, spec, metadata, annotations)
            if annotated is not None:
                endpoints.setdefault(annotated, ("annotations", self._annotation_selection))
        if not endpoints:
            return None
        host = str(address)
        targets = tuple(
            Target(
                name=("https:" if scheme == "https" else "") + f"{key[0]}/{key[1]}:{port}{path}",
                namespace=key[0],
                pod=key[1],
                address=host,
                port=port,
                path=path,
                scheme=scheme,
                selection=selection,
                config=config,
            )
            for (port, path, scheme), (config, selection) in endpoints.items()
        )
        return _Pod(targets, controller_of(metadata))

    @staticmethod
    def _matches(scrape: ScrapeConfig, namespace: str, labels: Mapping[str, str]) -> bool:
        if scrape.namespaces and namespace not in scrape.namespaces:
            return False
        return scrape.selector.matches(labels)

    def _annotated(
        self,
        key: ObjectKey,
        spec: Mapping[str, Any],
        metadata: Mapping[str, Any],
        discovery: AnnotationDiscovery,
    ) -> tuple[int, str, Scheme] | None:
        if discovery.namespaces and key[0] not in discovery.namespaces:
            return None
        annotations = metadata.get("annotations") or {}
        prefix = discovery.prefix
        if str(annotations.get(f"{prefix}/scrape", "")).lower() != "true":
            return None
        wanted = str(annotations.get(f"{prefix}/port", "")).strip()
        path = str(annotations.get(f"{prefix}/path", "/metrics")).strip() or "/metrics"
        scheme = str(annotations.get(f"{prefix}/scheme", "http")).strip().lower()
        problem = ""
        port = None
        if not wanted:
            problem = f"{prefix}/port is missing"
        elif not wanted.isdigit() and not _PORT_NAME.fullmatch(wanted):
            problem = f"{prefix}/port {wanted!r} is neither a number nor a port name"
        else:
            port = _port(spec, wanted)
            if port is None:
                problem = f"{prefix}/port {wanted!r} is not a port of the pod"
        if not path.startswith("/") or any(c in path for c in " \r\n\t"):
            problem = f"{prefix}/path {path!r} is not an absolute path"
        if scheme not in ("http", "https"):
            problem = f"{prefix}/scheme {scheme!r} is neither http nor https"
        if problem:
            now = self._clock()
            if now - self._warned.get(key, float("-inf")) >= _WARN_EVERY:
                self._warned[key] = now
                if len(self._warned) > 10_000:
                    self._warned.clear()
                logger.warning("not scraping pod %s/%s: %s", key[0], key[1], problem)
            return None
        assert port is not None
        return (port, path, "https" if scheme == "https" else "http")

    def remove(self, key: ObjectKey) -> None:
        old = self._pods.pop(key, None)
        if old is None:
            return
        for target in old.targets:
            self.targets.pop(target.name, None)
        if old.controller is not None:
            owner = (key[0], *old.controller)
            siblings = self._by_controller.get(owner)
            if siblings is not None:
                siblings.discard(key[1])
                if not siblings:
                    del self._by_controller[owner]
        self.generation += 1

    # -- queries --

    def pod_targets(self, key: ObjectKey) -> tuple[Target, ...]:
        """The targets of one pod (none if it is not scraped)."""
        pod = self._pods.get(key)
        return pod.targets if pod is not None else ()

    def pods(self) -> Iterable[ObjectKey]:
        """Every scraped pod."""
        return self._pods.keys()

    def pods_of(self, resource: GroupResource, key: ObjectKey) -> list[ObjectKey]:
        """The scraped pods an object holds: the pod itself, or a workload's pods through
        ownerReferences (a Deployment through its ReplicaSets). O(result)."""
        if resource == PODS:
            return [key] if key in self._pods else []
        namespace, name = key
        kind = self.workloads.get(resource)
        if kind is None:
            return []
        if resource == DEPLOYMENTS:
            names = [
                pod
                for replicaset in self.replicasets.of_deployment(namespace, name)
                for pod in self._by_controller.get((namespace, "ReplicaSet", replicaset), ())
            ]
        else:
            names = list(self._by_controller.get((namespace, kind, name), ()))
        return [(namespace, pod) for pod in sorted(names)]

    def workloads_of(self, key: ObjectKey) -> list[GroupResource]:
        """The workload resources a scraped pod counts under (for listings)."""
        pod = self._pods.get(key)
        if pod is None or pod.controller is None:
            return []
        kind, name = pod.controller
        found = [gr for gr, kind_name in self.workloads.items() if kind_name == kind]
        if (
            kind == "ReplicaSet"
            and DEPLOYMENTS in self.workloads
            and self.replicasets.deployment_of(key[0], name) is not None
        ):
            found.append(DEPLOYMENTS)
        return found


class ReplicaSetOwners(KeyedSink[ObjectKey]):
    """The `WatchSink` of ReplicaSets: which Deployment controls each (only those that one
    does), for Deployments' Object metrics."""

    def __init__(self, targets: PodTargets) -> None:
        super().__init__()
        self._targets = targets
        self._owner: dict[ObjectKey, str] = {}
        self._by_deployment: dict[ObjectKey, set[str]] = {}

    def keys(self) -> Iterable[ObjectKey]:
        return self._owner.keys()

    def key_of(self, obj: Mapping[str, Any]) -> ObjectKey | None:
        return _object_key(obj)

    def remove(self, key: ObjectKey) -> None:
        self._set(key, None)

    def apply(self, obj: Mapping[str, Any]) -> ObjectKey | None:
        metadata = obj.get("metadata") or {}
        if not metadata.get("name"):
            return None
        key = (str(metadata.get("namespace", "")), str(metadata["name"]))
        controller = controller_of(metadata)
        self._set(key, controller[1] if controller and controller[0] == "Deployment" else None)
        return key

    def _set(self, key: ObjectKey, deployment: str | None) -> None:
        old = self._owner.get(key)
        if old == deployment:
            return
        if old is not None:
            siblings = self._by_deployment.get((key[0], old))
            if siblings is not None:
                siblings.discard(key[1])
                if not siblings:
                    del self._by_deployment[(key[0], old)]
            del self._owner[key]
        if deployment is not None:
            self._owner[key] = deployment
            self._by_deployment.setdefault((key[0], deployment), set()).add(key[1])
        self._targets.generation += 1

    def deployment_of(self, namespace: str, replicaset: str) -> str | None:
        """The Deployment controlling a ReplicaSet, if one does."""
        return self._owner.get((namespace, replicaset))

    def of_deployment(self, namespace: str, deployment: str) -> Iterable[str]:
        """The ReplicaSets a Deployment controls."""
        return self._by_deployment.get((namespace, deployment), ())


def _object_key(obj: Mapping[str, Any]) -> ObjectKey:
    """A deleted object's (namespace, name)."""
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
