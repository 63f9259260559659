"""The kubelet's `/metrics/resource` text format, read and written, and nothing else.

The reader (`rows`: a body to the usage store's rows, over `runs`, whose one-pass C twin
`_scan` is an optional extension; `any_layout` for bodies not in the kubelet's layout, over
the line grammar `lines`), the writer (`writer`, byte for byte what a kubelet writes), the
reader's result types (`samples`) and the Summary values the writer takes (`summary`). PURE:
no I/O. What the node agent needs of the server (the writer and `summary`), and all it needs.
"""
