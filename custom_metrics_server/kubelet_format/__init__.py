"""The kubelet's `/metrics/resource` text format, read and written, and nothing else.

The reader (`reader`: the full parser; `rows`: the scraper's columnar reader over `runs`, whose
one-pass C twin `_scan` is an optional extension; `columns` and `lines` beneath them), the
writer (`writer`, byte for byte what a kubelet writes), the reader's result types (`samples`)
and the Summary values the writer takes (`summary`). PURE: no I/O. What the node agent needs
of the server, and all it needs.
"""
