"""Tests of the Kubernetes access layer against the fake API server."""
