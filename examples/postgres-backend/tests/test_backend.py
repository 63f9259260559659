"""The backend in process against a real PostgreSQL: what each query answers, for each request."""

from __future__ import annotations

import asyncio
import logging
from decimal import Decimal
from pathlib import Path

import pytest
from custom_metrics_server import sdk
from jobsdb import (
    JobsDatabase,
    backend_for,
    custom_request,
    external_request,
    running,
    series,
    values,
)

# -- external metrics ---------------------------------------------------------------------------


async def test_a_pinned_queue_is_counted_by_the_pinned_query(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        emails = await backend.fetch_external(external_request("jobs_pending", "queue=emails"))
        assert series(emails) == {"emails": 4}  # 3 in default, 1 in other
        assert [s.metric for s in emails] == ["jobs_pending"]
        # An empty queue, and one nobody ever used, answer 0: the HPA sees a drained queue.
        assert series(
            await backend.fetch_external(external_request("jobs_pending", "queue=images"))
        ) == {"images": 0}
        assert series(
            await backend.fetch_external(external_request("jobs_pending", "queue==nosuch"))
        ) == {"nosuch": 0}


async def test_without_a_pinned_queue_every_queue_with_pending_jobs_is_a_series(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        everything = await backend.fetch_external(external_request("jobs_pending"))
        assert series(everything) == {"emails": 4, "reports": 2}
        assert {s.labels["queue"] for s in everything} == {"emails", "reports"}
        # Forms that do not pin the label run queryAll and are matched in full.
        assert series(
            await backend.fetch_external(external_request("jobs_pending", "queue!=emails"))
        ) == {"reports": 2}
        assert series(
            await backend.fetch_external(external_request("jobs_pending", "queue notin (reports)"))
        ) == {"emails": 4}
        assert series(await backend.fetch_external(external_request("jobs_pending", "queue"))) == {
            "emails": 4,
            "reports": 2,
        }


async def test_a_set_of_queues_runs_the_pinned_query_once_per_queue(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        answer = await backend.fetch_external(
            external_request("jobs_pending", "queue in (emails,images,reports)")
        )
        assert series(answer) == {"emails": 4, "images": 0, "reports": 2}
        # Two requirements on one label: their intersection.
        answer = await backend.fetch_external(
            external_request("jobs_pending", "queue in (emails,images),queue in (images)")
        )
        assert series(answer) == {"images": 0}


async def test_a_selector_on_a_label_the_series_lack_matches_nothing(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        assert await backend.fetch_external(external_request("jobs_pending", "region=eu")) == []
        assert (
            await backend.fetch_external(external_request("jobs_pending", "queue=emails,region=eu"))
            == []
        )


async def test_the_namespace_parameter_is_the_request_namespace(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        here = await backend.fetch_external(external_request("jobs_pending_here"))
        assert series(here) == {"emails": 3, "reports": 2}
        other = await backend.fetch_external(
            external_request("jobs_pending_here", namespace="other")
        )
        assert series(other) == {"emails": 1}
        assert (
            await backend.fetch_external(external_request("jobs_pending_here", namespace="none"))
            == []
        )


async def test_without_query_all_a_selector_that_pins_nothing_is_a_bad_request(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path)
    settings["external"] = [
        {k: v for k, v in settings["external"][0].items() if k != "queryAll"},
    ]
    async with running(backend_for(settings)) as backend:
        with pytest.raises(sdk.BadRequest, match=r"labelSelector .* \(queue=\.\.\.\)"):
            await backend.fetch_external(external_request("jobs_pending"))
        assert series(
            await backend.fetch_external(external_request("jobs_pending", "queue=reports"))
        ) == {"reports": 2}


async def test_labels_come_from_the_columns_and_null_values_are_absent(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path)
    settings["external"] = [
        {
            "metric": "jobs_by_state",
            "labels": ["queue"],
            "query": "SELECT state, count(*) FROM jobs WHERE queue = %(queue)s GROUP BY state",
            "queryAll": "SELECT queue, NULL::text AS state, sum(1) FILTER (WHERE state = 'done') "
            "FROM jobs GROUP BY queue",
        }
    ]
    async with running(backend_for(settings)) as backend:
        pinned = await backend.fetch_external(external_request("jobs_by_state", "queue=emails"))
        assert sorted((s.labels["state"], s.labels["queue"], s.value) for s in pinned) == [
            ("pending", "emails", 4),
            ("running", "emails", 1),
        ]
        # A NULL label is left out; a NULL value (sum of nothing) is no series.
        everything = await backend.fetch_external(external_request("jobs_by_state"))
        assert [(s.labels, s.value) for s in everything] == [({"queue": "images"}, 1)]


async def test_numeric_and_float_values_keep_their_type(jobs: JobsDatabase, tmp_path: Path) -> None:
    settings = jobs.settings(tmp_path)
    settings["external"] = [
        {"metric": "ratio", "queryAll": "SELECT 1.25::numeric / 4"},
        {"metric": "half", "queryAll": "SELECT 0.5::float8"},
    ]
    async with running(backend_for(settings)) as backend:
        (ratio,) = await backend.fetch_external(external_request("ratio"))
        (half,) = await backend.fetch_external(external_request("half"))
    assert isinstance(ratio.value, Decimal)
    assert ratio.value == Decimal("0.3125")
    assert isinstance(half.value, float)
    assert half.value == 0.5
    assert ratio.labels == half.labels == {}


# -- custom metrics -----------------------------------------------------------------------------


async def test_per_deployment_values_for_the_objects_the_server_resolved(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        request = custom_request(
            "jobs_pending",
            ("default", "worker"),
            ("default", "web"),
            ("default", "idle"),
            ("default", "ghost"),
        )
        answer = await backend.fetch(request)
    # In the request's order; no row (no pending job, or no such Deployment): no value.
    assert values(answer) == [("default", "worker", 2), ("default", "web", 3)]
    assert {(s.described.kind, s.described.api_version) for s in answer} == {
        ("Deployment", "apps/v1")
    }
    assert {s.metric for s in answer} == {"jobs_pending"}


async def test_objects_of_several_namespaces_are_asked_per_namespace(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        request = custom_request(
            "jobs_pending", ("default", "web"), ("other", "web"), ("other", "worker")
        )
        assert values(await backend.fetch(request)) == [
            ("default", "web", 3),
            ("other", "web", 1),
        ]


async def test_the_unnest_form_answers_zero_for_every_object_asked(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        request = custom_request(
            "jobs_pending_or_zero", ("default", "web"), ("default", "idle"), ("other", "worker")
        )
        assert values(await backend.fetch(request)) == [
            ("default", "web", 3),
            ("default", "idle", 0),
            ("other", "worker", 0),
        ]


async def test_rows_for_objects_not_asked_are_ignored(jobs: JobsDatabase, tmp_path: Path) -> None:
    settings = jobs.settings(tmp_path)
    settings["custom"] = [
        {
            "metric": "jobs_pending",
            "resource": "deployments.apps",
            # No %(names)s: every owner of the namespace.
            "query": "SELECT owner, count(*) FROM jobs WHERE namespace = %(namespace)s "
            "AND state = 'pending' GROUP BY owner",
        }
    ]
    async with running(backend_for(settings)) as backend:
        answer = await backend.fetch(custom_request("jobs_pending", ("default", "web")))
    assert values(answer) == [("default", "web", 3)]


async def test_what_is_not_ours_answers_nothing(jobs: JobsDatabase, tmp_path: Path) -> None:
    async with running(backend_for(jobs.settings(tmp_path))) as backend:
        assert await backend.fetch(custom_request("nosuch", ("default", "web"))) == []
        pods = sdk.ResourceMapping(sdk.GroupResource("", "pods"), "v1", "Pod", True)
        on_pods = sdk.BackendRequest(
            metric=sdk.MetricInfo(pods.group_resource, True, "jobs_pending"),
            mapping=pods,
            objects=(("default", "web"),),
            metric_selector=sdk.EVERYTHING,
        )
        assert await backend.fetch(on_pods) == []
        assert await backend.fetch_external(external_request("nosuch")) == []
        # Our values have no labels: a metricLabelSelector that needs one matches none.
        labelled = custom_request(
            "jobs_pending", ("default", "web"), selector=sdk.parse_selector("verb=GET")
        )
        assert await backend.fetch(labelled) == []
        unlabelled = custom_request(
            "jobs_pending", ("default", "web"), selector=sdk.parse_selector("!verb")
        )
        assert values(await backend.fetch(unlabelled)) == [("default", "web", 3)]


def test_listings_are_the_configured_metrics(jobs: JobsDatabase, tmp_path: Path) -> None:
    backend = backend_for(jobs.settings(tmp_path))
    deployments = sdk.GroupResource("apps", "deployments")
    assert list(backend.list_metrics()) == [
        sdk.MetricInfo(deployments, True, "jobs_pending"),
        sdk.MetricInfo(deployments, True, "jobs_pending_or_zero"),
    ]
    assert list(backend.list_external_metrics()) == ["jobs_pending", "jobs_pending_here"]
    assert backend.list_metrics() is backend.list_metrics()  # the same object: from memory


# -- errors -------------------------------------------------------------------------------------


async def test_the_statement_timeout_is_a_backend_timeout_and_the_pool_goes_on(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path, statementTimeout="300ms")
    settings["external"].append({"metric": "slow", "queryAll": "SELECT 1 FROM pg_sleep(3)"})
    async with running(backend_for(settings)) as backend:
        with pytest.raises(
            sdk.BackendTimeout, match=r"slow ran past the statement timeout \(300 ms\)"
        ):
            await backend.fetch_external(external_request("slow"))
        assert backend.ready().ready  # a slow query is not an outage
        answer = await backend.fetch_external(external_request("jobs_pending", "queue=emails"))
        assert series(answer) == {"emails": 4}


def test_a_statement_timeout_past_the_deadline_is_refused(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=r"statementTimeout \(5s\) must be below .* deadline \(2s"):
        backend_for(jobs.settings(tmp_path, statementTimeout="5s"), timeout=2)
    # The default is 80 % of the deadline.
    settings = jobs.settings(tmp_path)
    del settings["statementTimeout"]
    assert backend_for(settings, timeout=2).statement_timeout_ms == 1600


async def test_a_query_the_database_refuses_is_unavailable_naming_the_metric(
    jobs: JobsDatabase, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = jobs.settings(tmp_path)
    settings["external"] = [{"metric": "broken", "queryAll": "SELECT count(*) FROM nosuch"}]
    async with running(backend_for(settings)) as backend:
        with caplog.at_level(logging.WARNING), pytest.raises(sdk.BackendUnavailable) as raised:
            await backend.fetch_external(external_request("broken"))
        assert backend.ready().ready  # the database answers: not an outage
    message = str(raised.value)
    assert "the query of broken failed in the database: UndefinedTable (SQLSTATE 42P01)" in message
    assert "nosuch" not in message  # the database's text goes to the log only
    assert 'relation "nosuch" does not exist' in caplog.text


async def test_a_value_that_is_not_a_number_is_unavailable_naming_the_metric(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path)
    settings["external"] = [{"metric": "texty", "queryAll": "SELECT 'many'"}]
    async with running(backend_for(settings)) as backend:
        with pytest.raises(sdk.BackendUnavailable, match="texty answered a str value"):
            await backend.fetch_external(external_request("texty"))


async def test_more_rows_than_max_rows_is_unavailable(jobs: JobsDatabase, tmp_path: Path) -> None:
    settings = jobs.settings(tmp_path, maxRows=10)
    settings["external"] = [
        {"metric": "many", "queryAll": "SELECT n::text, 1 FROM generate_series(1, 1000000) n"}
    ]
    async with running(backend_for(settings)) as backend:
        with pytest.raises(sdk.BackendUnavailable, match=r"many answered more than maxRows \(10\)"):
            await backend.fetch_external(external_request("many"))
        assert backend.ready().ready


async def test_transactions_are_read_only(jobs: JobsDatabase, tmp_path: Path) -> None:
    # As the table's owner, who may delete: the READ ONLY transaction refuses it.
    settings = jobs.settings(tmp_path, user="jobs_owner")
    settings["external"] = [
        {
            "metric": "deleting",
            "queryAll": "WITH gone AS (DELETE FROM jobs RETURNING 1) SELECT count(*) FROM gone",
        }
    ]
    async with running(backend_for(settings)) as backend:
        with pytest.raises(sdk.BackendUnavailable, match="ReadOnlySqlTransaction"):
            await backend.fetch_external(external_request("deleting"))
    assert jobs.count() == 8
    # readOnly: false lets it through (so the refusal above was the setting's doing).
    async with running(backend_for({**settings, "readOnly": False})) as backend:
        assert series(await backend.fetch_external(external_request("deleting"))) == {"": 8}
    assert jobs.count() == 0


async def test_a_wrong_password_is_not_ready_and_a_rotated_file_recovers(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path)
    password_file = Path(settings["passwordFile"])
    await asyncio.to_thread(password_file.write_text, "wrong\n")
    backend = backend_for(settings)
    async with backend:
        state = await backend.check()
        assert not state.ready
        assert "password authentication failed for user" in state.reason
        with pytest.raises(sdk.BackendUnavailable):
            await backend.fetch_external(external_request("jobs_pending", "queue=emails"))
        # The Secret is rotated: the file is read again at the next connection.
        await asyncio.to_thread(password_file.write_text, jobs.reader_password + "\n")
        for _ in range(100):
            if (await backend.check()).ready:
                break
        assert backend.ready().ready, backend.ready()
        answer = await backend.fetch_external(external_request("jobs_pending", "queue=emails"))
        assert series(answer) == {"emails": 4}


async def test_the_pool_opens_in_aenter_and_closes_in_aexit(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    def sessions() -> int:
        with jobs.connect() as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                ["custom-metrics-server/jobs"],
            ).fetchone()
            assert row is not None
            return int(row[0])

    backend = backend_for(jobs.settings(tmp_path))
    assert not backend.ready().ready
    assert sessions() == 0
    async with running(backend):
        await backend.fetch_external(external_request("jobs_pending", "queue=emails"))
        assert sessions() >= 1
    assert sessions() == 0
    assert backend.ready() == sdk.Readiness(False, "stopped")


def test_the_password_file_must_exist(jobs: JobsDatabase, tmp_path: Path) -> None:
    settings = jobs.settings(tmp_path, passwordFile=str(tmp_path / "absent"))
    with pytest.raises(ValueError, match=r"settings.passwordFile: no such file: .*absent"):
        backend_for(settings)


async def test_a_busy_pool_is_unavailable_but_not_an_outage(
    jobs: JobsDatabase, tmp_path: Path
) -> None:
    settings = jobs.settings(tmp_path, poolSize=1, connectTimeout="1s", statementTimeout="4s")
    settings["external"].append({"metric": "slow", "queryAll": "SELECT 1 FROM pg_sleep(2.5)"})
    async with running(backend_for(settings)) as backend:
        slow = asyncio.create_task(backend.fetch_external(external_request("slow")))
        await asyncio.sleep(0.3)  # the slow query holds the only connection
        with pytest.raises(
            sdk.BackendUnavailable, match=r"all 1 pooled connections stayed busy for 1s"
        ):
            await backend.fetch_external(external_request("jobs_pending", "queue=emails"))
        assert backend.ready().ready  # the database answers: still ready
        assert series(await slow) == {"": 1}
        answer = await backend.fetch_external(external_request("jobs_pending", "queue=emails"))
        assert series(answer) == {"emails": 4}
