"""custom-metrics-server: the Kubernetes Custom and External Metrics APIs, served from Python."""

__version__ = "0.1.0"

__all__ = ["__version__"]
