"""A MetricDefinition status write refused for a real resourceVersion conflict
(`backends/definitions/status_writer.py`), against a real kube-apiserver: the writer in process
reads the objects, the object changes (a label added) before its write, so the write is refused
409; it reads the object again and writes, keeping the other writer's change; an object deleted
meanwhile is forgotten (404).

A module of its own, with no server process: a server writing statuses beside it (the status
module's replica watches every namespace) would write the same status first, leaving this
writer nothing to write.
"""

from __future__ import annotations

import pytest

from custom_metrics_server.backends.definitions.backend import DefinitionsBackend
from custom_metrics_server.backends.definitions.policy import Platform
from custom_metrics_server.backends.definitions.schedule import make_schedule
from custom_metrics_server.backends.definitions.status_writer import StatusWriter
from custom_metrics_server.kube.client import KubeClient
from custom_metrics_server.kube.config import load_connection
from tests.controlplane.cluster import ControlPlane
from tests.controlplane.test_metric_definitions import GROUP
from tests.controlplane.test_metric_definitions_serving import constant, definition
from tests.controlplane.test_metric_definitions_status import conditions, install, path

pytestmark = pytest.mark.integration


async def test_a_conflict_staged_between_read_and_write_is_read_again_and_written(
    control_plane: ControlPlane,
) -> None:
    """The writer in process, on a real API server: its copy of the object is older than the
    object (a label added after it was read), so its first write is refused 409."""
    plane = control_plane
    install(plane)
    team = plane.create_namespace("mdef-conflict")
    plane.apply(
        [
            definition(team, "seen", "st_seen_load", constant(4)),
            definition(team, "gone", "st_gone_load", constant(5)),
        ]
    )
    client = KubeClient(load_connection(str(plane.admin_kubeconfig)))
    made = DefinitionsBackend(
        client, makers={"Schedule": make_schedule}, platform=Platform(), write_status=False
    )
    writer = StatusWriter(client, made.catalog, identity="in-process")
    made.catalog.list_started()
    for name in ("seen", "gone"):
        made.catalog.listed(plane.get_json(path(team, name)))  # the writer's read
    made.catalog.list_finished()
    await made.tick()
    plane.kubectl("label", "-n", team, f"metricdefinitions.{GROUP}", "seen", "changed=after")
    plane.kubectl("delete", "-n", team, f"metricdefinitions.{GROUP}", "gone", "--wait=true")
    try:
        assert await writer.round() == 1
    finally:
        await client.aclose()
    assert writer.conflicts == 1
    obj = plane.get_json(path(team, "seen"))
    assert obj["metadata"]["labels"] == {"changed": "after"}  # the other writer's change kept
    assert conditions(obj)["Ready"]["status"] == "True"
    assert obj["status"]["lastValue"] == "4"
