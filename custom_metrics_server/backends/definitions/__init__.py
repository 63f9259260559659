"""The `metric-definitions` backend: application teams' `MetricDefinition`s, each served in its
own namespace from its source (docs/metric-definitions.md; `backend` is the entry point)."""
