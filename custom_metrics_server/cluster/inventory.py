"""An in-memory index of cluster objects by resource, namespace and label.

PURE data structure (no I/O): the simulated cluster fills it at start-up and a watch feeds it
in the Kubernetes backend. It answers "which objects of this resource in this namespace match
this label selector" without scanning when the selector has equality or `in` terms:

* `select()` intersects the posting sets of the selector's equality terms (smallest first),
  then checks the full selector on the survivors: O(smallest posting set + result) instead of
  O(objects). Selectors without equality terms scan the namespace: O(objects in namespace).
* Answers are memoised per (resource, namespace, selector) until the next change, so the
  HPA's repeated queries cost one dictionary lookup. Memory: one key tuple list per distinct
  query, bounded, cleared on every change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from custom_metrics_server.domain import GroupResource, ObjectKey, ObjectRef
from custom_metrics_server.machinery.labels import Selector

_MEMO_LIMIT: Final = 4096


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """The compact facts kept per object: identity, labels and its `describedObject`."""

    group_resource: GroupResource
    namespace: str
    name: str
    labels: Mapping[str, str]
    ref: ObjectRef
    owners: tuple[tuple[str, str], ...] = field(default=())  # (kind, name) of controllers
    #: (namespace, name): one tuple per object, shared by every index that holds the object
    #: (a property would mint a new tuple per index: 12 MiB of duplicates at 50,000 pods).
    key: ObjectKey = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", (self.namespace, self.name))


class Inventory:
    """Objects by group-resource with a label posting index."""

    def __init__(self) -> None:
        self._objects: dict[GroupResource, dict[ObjectKey, ObjectRecord]] = {}
        self._postings: dict[tuple[GroupResource, str, str], set[ObjectKey]] = {}
        self._memo: dict[tuple[GroupResource, str | None, Selector], list[ObjectKey]] = {}
        self.generation = 0

    def __len__(self) -> int:
        return sum(len(objects) for objects in self._objects.values())

    def upsert(self, record: ObjectRecord) -> None:
        """Add or replace one object. O(labels); O(1) when its labels did not change."""
        objects = self._objects.get(record.group_resource)
        if objects is None:
            objects = self._objects[record.group_resource] = {}
        old = objects.get(record.key)
        if old is not None and (old.labels is record.labels or old.labels == record.labels):
            # Most updates (status, resources) keep the labels: the postings stay valid.
            objects[record.key] = record
            self._changed()
            return
        self.delete(record.group_resource, record.key)
        objects[record.key] = record
        postings = self._postings
        for name, value in record.labels.items():
            posting = postings.get((record.group_resource, name, value))
            if posting is None:
                postings[(record.group_resource, name, value)] = {record.key}
            else:
                posting.add(record.key)
        self._changed()

    def delete(self, group_resource: GroupResource, key: ObjectKey) -> None:
        """Remove one object if present. O(labels)."""
        old = self._objects.get(group_resource, {}).pop(key, None)
        if old is None:
            return
        for label in old.labels.items():
            posting = self._postings.get((group_resource, *label))
            if posting is not None:
                posting.discard(key)
                if not posting:
                    del self._postings[(group_resource, *label)]
        self._changed()

    def get(self, group_resource: GroupResource, key: ObjectKey) -> ObjectRecord | None:
        """One object by key. O(1)."""
        return self._objects.get(group_resource, {}).get(key)

    def table(self, group_resource: GroupResource) -> Mapping[ObjectKey, ObjectRecord]:
        """Every object of a resource by key (a read-only view for bulk lookups)."""
        return MappingProxyType(self._objects.get(group_resource, {}))

    def records(self, group_resource: GroupResource) -> Iterator[ObjectRecord]:
        """Every object of a resource, in insertion order."""
        return iter(self._objects.get(group_resource, {}).values())

    def select(
        self, group_resource: GroupResource, namespace: str | None, selector: Selector
    ) -> list[ObjectKey]:
        """Sorted keys of objects matching the selector; namespace None = every namespace."""
        memo_key = (group_resource, namespace, selector)
        found = self._memo.get(memo_key)
        if found is None:
            found = self._select(group_resource, namespace, selector)
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[memo_key] = found
        return found

    def _select(
        self, group_resource: GroupResource, namespace: str | None, selector: Selector
    ) -> list[ObjectKey]:
        objects = self._objects.get(group_resource, {})
        candidates: set[ObjectKey] | None = None
        terms = sorted(
            (
                set().union(
                    *(self._postings.get((group_resource, key, value), ()) for value in values)
                )
                for key, values in selector.equality_terms()
            ),
            key=len,
        )
        for posting in terms:
            candidates = set(posting) if candidates is None else candidates & posting
            if not candidates:
                return []
        keys = objects.keys() if candidates is None else candidates
        matches = selector.is_everything()
        return sorted(
            key
            for key in keys
            if (namespace is None or key[0] == namespace)
            and (matches or selector.matches(objects[key].labels))
        )

    def _changed(self) -> None:
        self.generation += 1
        if self._memo:
            self._memo.clear()
