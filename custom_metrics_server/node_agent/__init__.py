"""The node agent: a kubelet ``/metrics/resource`` endpoint fed by the container runtime.

``custom-metrics-server node-agent`` reads container and pod stats from the runtime's CRI
socket (:mod:`.runtime`), node totals from the host (:mod:`.host`), and serves them over
HTTPS in the kubelet's exposition format (the writer is :mod:`..kubelet_format.writer`, which
the demo's simulated kubelets share; :mod:`.server` serves it), so the Kubernetes backend can
scrape agents instead of kubelets with the same parser and rate code.
"""
