"""The lean HTTP/1.1 keep-alive client: a connection pool (`http11`) over asyncio streams
(`connection`), with streamed answers (`stream`: kube-apiserver's watches), used by the Prometheus
client, the pod and kubelet scrapers and `kube`'s client. Imports nothing else of the package.
"""
