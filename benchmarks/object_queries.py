"""HPA-shaped queries in process while the cluster changes, old and new code (issue 17, item 5).

The envelope's world (`tests/fakes/envelope_world.py`, fed through `ClusterState`'s sinks) with
usage from a `UsageStore` fed two rounds of the fake kubelets' text; through the whole ASGI app
in process (chain, routing, backend, body), CPU (`time.process_time`) per answer of:

* object: `deployments.apps/<web-N>/kube_running_pod_resource_usage?metricLabelSelector=
  resource=cpu`, a 30-pod Deployment (what half of the 5,000 HPAs ask);
* pods: `pods/*/kube_running_pod_resource_usage?labelSelector=app=<web-N>&
  metricLabelSelector=resource=cpu` over the same Deployment's 30 pods (the other half);

at three moments: `warm` (nothing changed since the last answer), `unrelated` (one node that
holds none of its pods scraped again and one pod of another namespace changed by a watch
event: the steady state at 150k pods, where some node is scraped every 3 ms and 1,000 events
arrive a second) and `member` (the node of one of its pods scraped again). The old code
(`ResourceMetricsBackend.fetch` before this change, kept below verbatim) and the new one
alternate on the same state; the answers of a moment are compared byte for byte, and with
those of a backend that memoises nothing (fresh each time): any difference fails the run.

    python benchmarks/object_queries.py                  # 150,000 pods (~2 min)
    python benchmarks/object_queries.py --pods 12000
    python benchmarks/object_queries.py --smoke          # 3,000 pods, a few answers (~10 s)
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from resources_exposition import _answers, _scope, _usage, build_state, machine  # noqa: E402

from custom_metrics_server.backends.kubernetes.metrics import ResourceMetricsBackend  # noqa: E402
from custom_metrics_server.cluster_state.records import PODS, ClusterState  # noqa: E402
from tests.fakes.envelope_world import WorldPlan, make_pod  # noqa: E402

API = "/apis/custom.metrics.k8s.io/v1beta2"
METRIC = "kube_running_pod_resource_usage"


async def _old_fetch(self: Any, request: Any) -> Any:
    """`ResourceMetricsBackend.fetch` before this change (474a5a1), verbatim: objects that
    hold pods validated by the state's and the usage store's generations."""
    from custom_metrics_server.backends.kubernetes import metrics as m

    metric = m.ALIASES.get(request.metric.metric, request.metric.metric)
    gr = request.metric.group_resource
    if len(self._answers) > m._TABLE_LIMIT:
        self._answers.clear()
    table = self._answers.setdefault((request.metric.metric, gr, request.metric_selector), {})
    if len(table) > m._CACHE_LIMIT:
        table.clear()
    now = float(int(self._clock()))
    if gr == m.PODS and self.usage is not None and metric in m._USAGE_METRICS:
        return m.pod_usage_samples(
            request.objects,
            table,
            self.state.pods,
            self.usage,
            # Every answer memoised, as before the second-ask rule: a marker with this very
            # token makes `remember` memoise at once.
            lambda key, pod, token: self._memoised(
                request, metric, (table, {key: token}), key, source=pod, token=token, now=now
            ),
        )
    usage_generation = getattr(self.usage, "generation", 0) if metric in m._USAGE_METRICS else 0
    state_generation = self.state.generation
    pods = self.state.pods
    found: list[Any] = []
    append = found.append
    for key in request.objects:
        source: object = pods.get(key) if gr == m.PODS else state_generation
        hit = table.get(key)
        if (
            hit is not None
            and hit[0] is source
            and hit[1] == usage_generation
            and now - hit[2] < m._FRESH
        ):
            if hit[3] is not None:
                append(hit[3])
            continue
        record = self.state.inventory.table(gr).get(key)
        if record is None:
            continue
        sample = self._sample(
            name=request.metric.metric,
            metric=metric,
            gr=gr,
            key=key,
            ref=record.ref,
            selector=request.metric_selector,
            now=now,
        )
        table[key] = (source, usage_generation, now, sample)
        if sample is not None:
            append(sample)
    return found


async def _fresh_fetch(self: Any, request: Any) -> Any:
    """The new code with nothing memoised: what every answer must equal."""
    self._answers.clear()
    return await NEW_FETCH(self, request)


NEW_FETCH = ResourceMetricsBackend.fetch


def _target(state: ClusterState, plan: WorldPlan) -> Any:
    """A 30-pod Deployment (the envelope's `web-*`) and its pods."""
    w = next(w for w in plan.workloads if w.kind == "Deployment" and w.name.startswith("web-"))
    members = state.pods_owned_by(w.namespace, "Deployment", w.name)
    assert len(members) == plan.shape.hpa_pods, len(members)
    return w, members


class Changes:
    """The cluster changing under the queries: node scrapes and pod watch events."""

    def __init__(self, state: ClusterState, plan: WorldPlan, members: list[Any]) -> None:
        self.state, self.plan, self.members = state, plan, members
        self.farm, self.store, self.now = _usage(plan)
        member_nodes = {p.node for p in members}
        self.others = [n for n in self.farm.nodes if n not in member_nodes]
        namespace = members[0].namespace
        self.other_pods = [
            i for i, (wi, _, _) in enumerate(plan.pods) if plan.workloads[wi].namespace != namespace
        ]
        self.turn = 0

    def scrape(self, node: str) -> None:
        """`node`'s kubelet answers again, later (its counters moved)."""
        from custom_metrics_server.kubelet_format.rows import read_usage_rows

        self.turn += 1
        at = self.now + 15 * self.turn
        body = self.farm.body(node, at)
        assert body is not None
        self.store.apply_rows(node, read_usage_rows(body, default_time=at), at)

    def unrelated(self) -> None:
        """A node holding none of the members scraped, and a pod of another namespace
        modified (a new label value: a new record, as any update)."""
        self.scrape(self.others[self.turn % len(self.others)])
        index = self.other_pods[self.turn % len(self.other_pods)]
        obj = copy.deepcopy(make_pod(self.plan, index))
        obj["metadata"]["labels"]["bench-turn"] = str(self.turn)
        self.state.sink(PODS).event("MODIFIED", obj)

    def member(self) -> None:
        """The node of one member scraped."""
        self.scrape(self.members[self.turn % len(self.members)].node)


VARIANTS = {"old": _old_fetch, "new": NEW_FETCH, "fresh": _fresh_fetch}


async def _answer(app: Any, name: str, scope: dict[str, Any]) -> tuple[float, bytes]:
    ResourceMetricsBackend.fetch = VARIANTS[name]  # type: ignore[method-assign]
    try:
        seconds, status, body = await _answers(app, scope, 1)
    finally:
        ResourceMetricsBackend.fetch = NEW_FETCH  # type: ignore[method-assign]
    assert status == 200, (status, body[:300])
    return seconds, body


async def _query(
    apps: dict[str, Any], scope: dict[str, Any], changes: Changes, count: int
) -> tuple[dict[str, dict[str, list[float]]], list[str]]:
    """CPU seconds per (code, moment) of `count` answers; the moments whose bodies differed."""
    times: dict[str, dict[str, list[float]]] = {
        n: {"warm": [], "unrelated": [], "member": []} for n in VARIANTS
    }
    differed: list[str] = []
    for name in VARIANTS:
        await _answer(apps[name], name, scope)
    for _ in range(count):
        for phase, change in (
            ("warm", None),
            ("unrelated", changes.unrelated),
            ("member", changes.member),
        ):
            if change is not None:
                change()
            bodies = set()
            # Rotated: the first answer after a change pays the shared caches' misses.
            order = list(VARIANTS)
            order = order[changes.turn % 3 :] + order[: changes.turn % 3]
            for name in order:
                seconds, body = await _answer(apps[name], name, scope)
                times[name][phase].append(seconds)
                bodies.add(body)
            if len(bodies) != 1:
                differed.append(phase)
    return times, differed


async def measure(pods: int, count: int) -> dict[str, Any]:
    """Every (query, body, code, moment): (best, median) CPU us of `count` answers."""
    from custom_metrics_server.server.app import create_app

    state, plan = build_state(pods)
    w, members = _target(state, plan)
    changes = Changes(state, plan, members)
    apps = {
        name: create_app(cluster=state, backends=[ResourceMetricsBackend(state, changes.store)])
        for name in VARIANTS
    }
    paths = {
        "object": (
            f"{API}/namespaces/{w.namespace}/deployments.apps/{w.name}/{METRIC}",
            b"metricLabelSelector=resource%3Dcpu",
        ),
        "pods": (
            f"{API}/namespaces/{w.namespace}/pods/*/{METRIC}",
            f"labelSelector=app%3D{w.name}&metricLabelSelector=resource%3Dcpu".encode(),
        ),
    }
    out: dict[str, Any] = {"deployment": f"{w.namespace}/{w.name}", "pods": len(state.pods)}
    failed = False
    for query, (path, qs) in paths.items():
        for encoding, accept in (
            ("json", b"application/json"),
            ("protobuf", b"application/vnd.kubernetes.protobuf"),
        ):
            times, differed = await _query(apps, _scope(path, qs, accept), changes, count)
            for phase in differed:
                failed = True
                print(f"DIFFERENT BODIES: {query} {encoding} {phase}", file=sys.stderr)
            out[(query, encoding)] = {
                name: {
                    phase: (round(min(v) * 1e6), round(statistics.median(v) * 1e6))
                    for phase, v in runs.items()
                }
                for name, runs in times.items()
            }
    out["failed"] = failed
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=150_000)
    parser.add_argument("--answers", type=int, default=300, help="answers per moment and code")
    parser.add_argument("--smoke", action="store_true", help="3,000 pods, 5 answers")
    args = parser.parse_args()
    pods, count = (3000, 5) if args.smoke else (args.pods, args.answers)
    print(f"machine: {machine()}; python {sys.version.split()[0]}")
    started = time.process_time()
    result = asyncio.run(measure(pods, count))
    print(
        f"{result['pods']:,} pods, {result['deployment']} (30 pods); CPU us an answer, best (median) of {count}"
    )
    print("| query | body | code | warm | after unrelated node + pod | after a member's node |")
    print("|---|---|---|---|---|---|")
    for key, runs in result.items():
        if not isinstance(key, tuple):
            continue
        for name, phases in runs.items():
            cells = " | ".join(f"{b} ({m})" for b, m in phases.values())
            print(f"| {key[0]} | {key[1]} | {name} | {cells} |")
    print(f"same bytes in every moment: {not result['failed']}")
    print(f"load after: {machine()}; total CPU {time.process_time() - started:.0f} s")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
