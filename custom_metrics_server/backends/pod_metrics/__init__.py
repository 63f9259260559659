"""The `pod-metrics` backend: pods' own Prometheus `/metrics`, scraped directly (or through the
API server's pod proxy) and served as Pods metrics and as Object metrics of the workloads that
own the pods, with no monitoring stack (docs/backends.md, "Pods' own metrics").
"""
