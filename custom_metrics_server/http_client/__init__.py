"""The lean HTTP/1.1 keep-alive client: a connection pool (`http11`) over asyncio streams
(`connection`), used by the Prometheus client, the pod and kubelet scrapers and `kube`'s lean
list and review clients. Imports nothing else of the package.
"""
