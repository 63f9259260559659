"""The optional C extension; everything else about the package is in pyproject.toml.

``custom_metrics_server.kubelet_format._scan`` reads the scraper's kubelet bodies ~4x faster
than the pure-Python reader (custom_metrics_server/kubelet_format/runs.py). It is optional:
without a C compiler or the Python headers the build skips it with a warning and the package
uses the pure-Python reader, with the same results.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "custom_metrics_server.kubelet_format._scan",
            ["custom_metrics_server/kubelet_format/_scan.c"],
            optional=True,
        )
    ]
)
