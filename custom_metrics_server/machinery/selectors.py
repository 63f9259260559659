"""Transitional: `Selector` for compute/metrics.py only, until it imports `machinery.labels`.

Selectors live in `labels` (values, matching), `label_parser` (the grammar) and `fields`. This
module exists because compute/metrics.py is being rewritten on another branch and must not be
edited here; delete it with that branch's one-line import change. Nothing else may import it.
"""

from __future__ import annotations

from custom_metrics_server.machinery.labels import Selector

__all__ = ["Selector"]
