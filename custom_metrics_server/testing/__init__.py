"""What tests need: the real server as a process, and the backend conformance kit.

* `server_process`: `custom-metrics-server serve` on a free loopback port over TLS, waited for,
  reached with a verifying client, stopped as a kubelet would (this repository's tests and
  benchmarks use it);
* `kit`: `check_backend()`, the in-process conformance checks a backend author runs;
* `context`: `backend_context()` and `cluster_view()`, what a test gives a factory that takes
  `context=` (a `BackendContext` whose cluster view holds the test's objects);
* `serving`: `serve_backends()` and `query_every_form()`, a backend served by the real server
  over TLS and every URL form asked of it (docs/backends.md, "The conformance kit").
"""
