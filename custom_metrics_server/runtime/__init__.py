"""What every long-running process of ours needs, whatever it serves.

Background-task helpers, GC tuning for large state, TLS contexts and certificates, a lean
HTTP/1.1 keep-alive client (`http11`: the Prometheus client and the pod scraper), and the
HTTPS listener shared by `serve` and `node-agent`. Imports nothing else of the package.
"""
