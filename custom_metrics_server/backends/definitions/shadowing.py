"""Whether the platform wins a definition's metric: the key the router decides it by (External:
the name; Pods: (pods, name); Object: (its workload's resource, name)), asked of the router in
force (`sdk.precedence.Precedence`), and the words the status says it in.

Why every namespace: discovery lists metric names cluster-wide and an HPA names a metric, not a
source; a name that meant the platform's series in one namespace and a team's in another would
change an HPA's source silently when it moves (docs/metric-definitions.md, "The platform wins").

PURE: no I/O. Cost: one router decision (memoised by the router).
"""

from __future__ import annotations

from custom_metrics_server.backends.definitions.spec import Definition
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.sdk.precedence import Precedence, Winner

__all__ = ["PODS", "REASON", "message", "winner_of"]

PODS = GroupResource("", "pods")
#: `Ready`'s reason (and the state's) for a definition the platform wins
REASON = "ShadowedByPlatform"


def winner_of(precedence: Precedence | None, definition: Definition) -> Winner | None:
    """The platform backend the router gives `definition`'s metric to, if any."""
    if precedence is None:
        return None
    served = definition.served_as
    if served.type == "External":
        return precedence.winner(None, definition.metric)
    if served.type == "Pods":
        return precedence.winner(PODS, definition.metric)
    if served.workload is None:
        return None
    return precedence.winner(served.workload[0], definition.metric)


def message(definition: Definition, winner: Winner) -> str:
    """The state's (and `Ready`'s) message: what answers instead, and why."""
    return (
        f"metric {definition.metric} is answered by {winner}: the platform's backends win "
        "over definitions, in every namespace"
    )
