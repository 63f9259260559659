"""Talking to kube-apiserver: connection settings, a thin async client, watches."""
