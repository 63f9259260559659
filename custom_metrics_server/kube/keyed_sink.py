"""`KeyedSink`: the `watcher.WatchSink` of a store that keeps watched objects by a key.

Every such store does the same four things: a (re)list remembers the keys it saw and, when it
is complete, forgets the keys it did not see; a DELETED event forgets the object's key; every
other event and listed object is applied. A store says only how: `apply` (the object's key, or
None for an object it does not keep), `remove`, `keys` and `key_of` (a deleted object's key).

Cost: O(1) per object or event beyond the store's own; O(keys) at the end of a list.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping
from typing import Any, Generic, TypeVar

__all__ = ["KeyedSink", "name_of"]

K = TypeVar("K", bound=Hashable)


def name_of(obj: Mapping[str, Any]) -> str | None:
    """The object's `metadata.name`, None when it has none."""
    name = (obj.get("metadata") or {}).get("name")
    return name if isinstance(name, str) else None


class KeyedSink(ABC, Generic[K]):
    """A `WatchSink` over a store keyed by `K` (see the module). `synced`: a list completed."""

    def __init__(self) -> None:
        self._seen: set[K] | None = None
        self.synced = False

    def list_started(self) -> None:
        """A (re)list begins."""
        self._seen = set()

    def listed(self, obj: dict[str, Any]) -> None:
        """One listed object."""
        key = self.apply(obj)
        if self._seen is not None and key is not None:
            self._seen.add(key)

    def list_finished(self) -> None:
        """Objects not listed are gone."""
        seen = self._seen or set()
        for key in [key for key in self.keys() if key not in seen]:
            self.remove(key)
        self._seen = None
        self.synced = True

    def event(self, type: str, obj: dict[str, Any]) -> None:
        """An ADDED, MODIFIED or DELETED watch event."""
        if type == "DELETED":
            key = self.key_of(obj)
            if key is not None:
                self.remove(key)
        else:
            self.apply(obj)

    @abstractmethod
    def apply(self, obj: Mapping[str, Any]) -> K | None:
        """Keep (or update) `obj`; its key, None when it is not kept."""

    @abstractmethod
    def remove(self, key: K) -> None:
        """Forget the object of `key` (known or not)."""

    @abstractmethod
    def keys(self) -> Iterable[K]:
        """The keys kept."""

    @abstractmethod
    def key_of(self, obj: Mapping[str, Any]) -> K | None:
        """A deleted object's key."""
