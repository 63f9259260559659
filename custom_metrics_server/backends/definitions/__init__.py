"""MetricDefinitions: metrics the teams that scale on them define (docs/metric-definitions.md)."""
