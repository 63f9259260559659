"""Tests for custom_metrics_server.backends modules that do I/O (the kubelet scraper)."""
