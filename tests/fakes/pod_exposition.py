"""Realistic bodies of a pod's `/metrics`: a Go service's default client_golang metrics plus a
few application counters, gauges and a latency histogram, with values that move per scrape.

`go_app_body(pod, scrape, series=200)` is what one pod answers at its `scrape`-th scrape: about
`series` sample lines (HELP and TYPE lines besides), deterministic for (pod, scrape). Counters
grow by a per-pod rate per scrape, so tests and benchmarks know the rate to expect:

* `http_requests_total{code,handler,method}`: `request_rate(pod)` x (scrape) for code 200 of
  handler /api (and fixed fractions of it for the others);
* `jobs_processed_total`: `10 * (pod % 7 + 1)` per scrape;
* `queue_depth`: `pod % 13 + scrape` (a gauge).
"""

from __future__ import annotations

from typing import Final

_GO_GAUGES: Final = (
    ("go_goroutines", "Number of goroutines that currently exist."),
    ("go_threads", "Number of OS threads created."),
    ("go_memstats_alloc_bytes", "Number of bytes allocated and still in use."),
    ("go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table."),
    ("go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata."),
    ("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and still in use."),
    ("go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used."),
    ("go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use."),
    ("go_memstats_heap_objects", "Number of allocated objects."),
    ("go_memstats_heap_released_bytes", "Number of heap bytes released to OS."),
    ("go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system."),
    (
        "go_memstats_last_gc_time_seconds",
        "Number of seconds since 1970 of last garbage collection.",
    ),
    ("go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures."),
    (
        "go_memstats_mcache_sys_bytes",
        "Number of bytes used for mcache structures obtained from system.",
    ),
    ("go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures."),
    (
        "go_memstats_mspan_sys_bytes",
        "Number of bytes used for mspan structures obtained from system.",
    ),
    (
        "go_memstats_next_gc_bytes",
        "Number of heap bytes when next garbage collection will take place.",
    ),
    ("go_memstats_other_sys_bytes", "Number of bytes used for other system allocations."),
    ("go_memstats_stack_inuse_bytes", "Number of bytes in use by the stack allocator."),
    ("go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator."),
    ("go_memstats_sys_bytes", "Number of bytes obtained from system."),
    ("process_max_fds", "Maximum number of open file descriptors."),
    ("process_open_fds", "Number of open file descriptors."),
    ("process_resident_memory_bytes", "Resident memory size in bytes."),
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds."),
    ("process_virtual_memory_bytes", "Virtual memory size in bytes."),
    ("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes."),
    ("promhttp_metric_handler_requests_in_flight", "Current number of scrapes being served."),
)
_GO_COUNTERS: Final = (
    ("go_memstats_alloc_bytes_total", "Total number of bytes allocated, even if freed."),
    ("go_memstats_frees_total", "Total number of frees."),
    ("go_memstats_lookups_total", "Total number of pointer lookups."),
    ("go_memstats_mallocs_total", "Total number of mallocs."),
    ("process_cpu_seconds_total", "Total user and system CPU time spent in seconds."),
)
_BUCKETS: Final = ("0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10")
_HANDLERS: Final = ("/api", "/api/orders", "/api/users", "/healthz", "/metrics", "/static")
_METHODS: Final = ("GET", "POST")
_CODES: Final = ("200", "404", "500")


def request_rate(pod: int) -> int:
    """Requests per scrape of `http_requests_total{code="200",handler="/api",method="GET"}`."""
    return 5 * (pod % 11 + 1)


def go_app_body(pod: int, scrape: int, series: int = 200) -> bytes:
    """About `series` sample lines (at least the ~50 default Go ones and the app's counters)."""
    base = pod * 1_000 + scrape
    out: list[str] = []
    add = out.append
    add(
        "# HELP go_gc_duration_seconds A summary of the pause duration of garbage collection cycles."
    )
    add("# TYPE go_gc_duration_seconds summary")
    for quantile in ("0", "0.25", "0.5", "0.75", "1"):
        add(
            f'go_gc_duration_seconds{{quantile="{quantile}"}} {2.1e-05 * (1 + float(quantile)):.6g}'
        )
    add(f"go_gc_duration_seconds_sum {0.0123 * (scrape + 1):.6g}")
    add(f"go_gc_duration_seconds_count {40 * (scrape + 1)}")
    add("# HELP go_info Information about the Go environment.\n# TYPE go_info gauge")
    add('go_info{version="go1.22.4"} 1')
    for name, help_text in _GO_GAUGES:
        add(f"# HELP {name} {help_text}\n# TYPE {name} gauge")
        add(f"{name} {(base * 7919 + len(name) * 104729) % 9_999_991 + 0.5:.10g}")
    for name, help_text in _GO_COUNTERS:
        add(f"# HELP {name} {help_text}\n# TYPE {name} counter")
        add(f"{name} {(pod + 1) * 1_000 + scrape * 37 + len(name)}")
    add(
        "# HELP promhttp_metric_handler_requests_total Total number of scrapes by HTTP status code."
    )
    add("# TYPE promhttp_metric_handler_requests_total counter")
    for code in ("200", "500", "503"):
        add(
            f'promhttp_metric_handler_requests_total{{code="{code}"}} {scrape if code == "200" else 0}'
        )
    # The application's own metrics.
    rate = request_rate(pod)
    add("# HELP http_requests_total Requests handled, by handler, method and code.")
    add("# TYPE http_requests_total counter")
    used = len([line for line in out if not line.startswith("#")])
    app_lines: list[str] = []
    for index, (handler, method, code) in enumerate(
        (h, m, c) for h in _HANDLERS for m in _METHODS for c in _CODES
    ):
        share = 1.0 if index == 0 else 1.0 / (index + 1)
        value = round(rate * share * scrape, 3)
        app_lines.append(
            f'http_requests_total{{code="{code}",handler="{handler}",method="{method}"}} {value:g}'
        )
    out += app_lines
    used += len(app_lines)
    add("# HELP jobs_processed_total Jobs done.\n# TYPE jobs_processed_total counter")
    add(f"jobs_processed_total {10 * (pod % 7 + 1) * scrape}")
    add("# HELP queue_depth Jobs waiting.\n# TYPE queue_depth gauge")
    add(f"queue_depth {pod % 13 + scrape}")
    used += 2
    add("# HELP http_request_duration_seconds Request latency.")
    add("# TYPE http_request_duration_seconds histogram")
    handler_index = 0
    while used + len(_BUCKETS) + 3 <= series:
        handler = f"/api/v{handler_index}"
        count = 100 * (scrape + 1) + handler_index
        for position, bound in enumerate(_BUCKETS):
            add(
                f'http_request_duration_seconds_bucket{{handler="{handler}",le="{bound}"}} '
                f"{count * (position + 1) // len(_BUCKETS)}"
            )
        add(f'http_request_duration_seconds_bucket{{handler="{handler}",le="+Inf"}} {count}')
        add(f'http_request_duration_seconds_sum{{handler="{handler}"}} {count * 0.042:.6g}')
        add(f'http_request_duration_seconds_count{{handler="{handler}"}} {count}')
        used += len(_BUCKETS) + 3
        handler_index += 1
    while used < series:  # top up with gauges
        add(f'app_cache_entries{{shard="{used}"}} {(base + used) % 1000}')
        used += 1
    return ("\n".join(out) + "\n").encode()
