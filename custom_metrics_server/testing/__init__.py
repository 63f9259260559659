"""What tests need to run the server for real: a `serve` process over TLS on a free port.

Shared by this repository's tests and benchmarks, and by anyone testing a backend against the
real server (docs/backends.md).
"""
