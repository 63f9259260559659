"""How a `Reflector` turns list pages and watch lines into objects for its sink.

The default is the generic one (`dict_page`, `dict_event`: every object a dict, as
`orjson.loads` builds it). A consumer that reads only a few fields of a large collection
passes a `WireCodec` of its own (the Kubernetes backend's schema decoders,
`cluster_state.wire_objects`), whose objects its sink understands. Costs: O(bytes) a page or line.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple, Protocol

__all__ = ["ListPage", "WatchEvent", "WireCodec", "dict_event", "dict_page"]

#: Watch event types whose object carries a resourceVersion the reflector resumes from.
VERSIONED_EVENTS: Final = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})


class ListPage(NamedTuple):
    """One page of a list: its objects, the list's resourceVersion and continue token."""

    items: list[Any]
    resource_version: str
    token: str


class WatchEvent(NamedTuple):
    """One watch event; `resource_version` is "" for ERROR and unknown types, whose object
    is the decoded dict (a Status for ERROR)."""

    type: str
    object: Any
    resource_version: str


class WireCodec(Protocol):
    """Decodes one collection's list pages and watch lines. Malformed input raises
    `ValueError`, `KeyError` or `TypeError` (the reflector's protocol errors)."""

    def page(self, body: bytes) -> ListPage:
        """One list page's body."""
        ...

    def event(self, line: bytes | str) -> WatchEvent:
        """One line of a watch stream."""
        ...


def dict_page(page: Any) -> ListPage:
    """A list page decoded as dicts; KeyError or TypeError if it is no list."""
    metadata = page["metadata"]
    return ListPage(
        page["items"] or [], str(metadata["resourceVersion"] or ""), metadata.get("continue") or ""
    )


def dict_event(event: Any) -> WatchEvent:
    """A watch event decoded as dicts; KeyError or TypeError if it is no event."""
    kind, obj = event["type"], event["object"]
    version = obj["metadata"]["resourceVersion"] if kind in VERSIONED_EVENTS else ""
    return WatchEvent(kind, obj, str(version))
