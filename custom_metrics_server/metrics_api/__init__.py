"""The Resource Metrics API, `metrics.k8s.io` `v1` and `v1beta1`, and nothing else: the
request (`request`: path grammar, `Accept` views), the answer (`responses`) and its rendering
(`render`). Pure: `server.endpoints` does the I/O.
"""
