"""A custom-metrics-server backend plugin that answers metrics from PostgreSQL with SQL.

Installed, it registers the backend type `postgres` (entry point group
`custom_metrics_server.backends`); a backends file entry `type: postgres` makes one with
`factory`. It imports nothing of the server but `custom_metrics_server.sdk`.

* `settings.Settings`: the entry's `settings:` (connection, pool, timeouts, the queries);
* `backend.PostgresBackend`: the backend (external and custom metrics, a connection pool,
  readiness, errors as the SDK's).
"""

from __future__ import annotations

from custom_metrics_server import sdk

from cms_postgres.backend import PostgresBackend, QueryError
from cms_postgres.settings import CustomMetric, ExternalMetric, Settings

__all__ = [
    "CustomMetric",
    "ExternalMetric",
    "PostgresBackend",
    "QueryError",
    "Settings",
    "factory",
]

__version__ = "0.1.0"


@sdk.factory(settings=Settings, requires="1.0")
def factory(settings: Settings, *, context: sdk.BackendContext | None = None) -> PostgresBackend:
    """Make the backend of one `type: postgres` entry (called by the server with the validated
    settings and the entry's context: its name, fetch deadline, the backends file's directory and
    the cluster view that resolves `resource:`)."""
    if context is None:
        return PostgresBackend(settings)
    return PostgresBackend(
        settings,
        name=context.name,
        timeout=context.timeout,
        base_dir=context.base_dir,
        cluster=context.cluster,
        logger=context.logger,
    )
