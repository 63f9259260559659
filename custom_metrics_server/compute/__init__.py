"""Compute resources of pods and nodes: the KEP-1748 product.

The pod resource model (requests and limits as the scheduler counts them), compact records of
the cluster's pods, nodes and workloads, kubelet usage (the text format, rates, the scraper),
the metrics served over them (custom metrics, `/metrics/resources`, `metrics.k8s.io`) and the
Kubernetes backend that wires them to a live cluster. Here "resource" means a compute resource
(cpu, memory, extended resources); REST resources live in `..cluster` and `..api`.
"""
