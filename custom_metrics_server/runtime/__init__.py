"""What every long-running process of ours needs, whatever it serves.

Background-task helpers, GC tuning for large state, TLS contexts and certificates, and the
HTTPS listener shared by `serve` and `node-agent` (the outbound HTTP client is
`..http_client`). Imports nothing else of the package.
"""
