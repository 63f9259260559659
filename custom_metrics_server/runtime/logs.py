"""Logging set-up of every command: one line per record, klog-like verbosity."""

from __future__ import annotations

import logging
import sys

#: klog's verbosity for the HTTP requests a client makes (client-go logs them from -v=6).
_HTTP_CLIENT_VERBOSITY = 6


def configure_logging(verbosity: int) -> None:
    """klog-like verbosity: 0-2 info, 3+ debug (per-request detail); one line per record.
    httpx logs every request it makes at INFO (every kubelet scrape, review and list page:
    hundreds of lines a second on a large cluster), so its loggers start at -v=6, as
    client-go's request logs do."""
    level = logging.INFO if verbosity < 3 else logging.DEBUG
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        force=True,
    )
    client_level = logging.NOTSET if verbosity >= _HTTP_CLIENT_VERBOSITY else logging.WARNING
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(client_level)
