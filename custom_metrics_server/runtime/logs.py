"""Logging set-up of every command: one line per record, klog-like verbosity."""

from __future__ import annotations

import logging
import sys


def configure_logging(verbosity: int) -> None:
    """klog-like verbosity: 0-2 info, 3+ debug (per-request detail); one line per record."""
    level = logging.INFO if verbosity < 3 else logging.DEBUG
    logging.basicConfig(
        stream=sys.stderr,
        level=level,
        format="%(asctime)s %(levelname).1s %(name)s: %(message)s",
        force=True,
    )
