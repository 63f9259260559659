"""Process limits the server raises for itself at start-up, as a Go program does.

The open-files limit: every kube-apiserver watch holds a connection for its life over our
HTTP/1.1 client (one per watched collection: the Kubernetes backend's few, and one per
namespace and collection for the MetricDefinitions' sources, so thousands in a large cluster),
besides the clients' connections and the scrapes. Since Go 1.19 a Go program raises its soft
`RLIMIT_NOFILE` to the hard limit at start-up (`os` package init, `syscall.Setrlimit`), which
is why kube-apiserver and the reference adapters never meet the soft limit of 1,024 that many
container runtimes and systemd units still give; this does the same. The hard limit is left
alone (raising it needs privileges and is the operator's choice).
"""

from __future__ import annotations

import logging
import resource

__all__ = ["raise_open_files_limit"]

logger = logging.getLogger(__name__)


def raise_open_files_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one; the (soft, hard) limits now. Never
    fails: a refusal leaves the limit as it was, with one INFO line saying so."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as err:  # a sandbox may refuse it
            logger.info(
                "open-files limit left at %d (could not raise it to %d: %s)", soft, hard, err
            )
            return soft, hard
        soft = hard
    return soft, hard
