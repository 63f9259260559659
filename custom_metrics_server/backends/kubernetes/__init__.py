"""The Kubernetes backend: the KEP-1748 resource metrics of a live cluster.

`backend.KubernetesBackend` wires the watches, discovery, the kubelet scraper and a Lease
around `metrics.ResourceMetricsBackend` (the custom metrics answers over a `ClusterState` and a
usage source, with the memos of `object_answers` and `pod_usage_answers` and the series of
`metric_series`); `state_exposition` writes a `ClusterState`'s `/metrics/resources`.
"""
