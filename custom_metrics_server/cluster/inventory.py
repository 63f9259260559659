"""An in-memory index of cluster objects by resource, namespace and label.

PURE data structure (no I/O): the simulated cluster fills it at start-up and a watch feeds it
in the Kubernetes backend. It answers "which objects of this resource in this namespace match
this label selector" without scanning every object:

* Objects are grouped by (namespace, label set): the pods of one template share one group,
  so a selector is matched once per group, not once per object. The label postings point at
  groups, not objects: at 150,000 pods in 15,000 label sets that is ~60,000 posting entries
  instead of 600,000 (a label on every pod, `tier=backend`, costs one entry per group), and
  one set entry per object (its group's member set) instead of one per label.
* `select()` intersects the posting sets of the selector's equality terms (smallest first),
  then checks the full selector on the surviving groups: O(groups holding the rarest term +
  result). Selectors without equality terms visit the namespace's groups (every group when
  the namespace is None): O(groups + result).
* Answers are memoised per (resource, namespace, selector) until the next change, so the
  HPA's repeated queries cost one dictionary lookup. Memory: one key tuple list per distinct
  query, bounded, cleared on every change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final, TypeVar

from custom_metrics_server.domain import GroupResource, ObjectKey, ObjectRef, ResourceMapping
from custom_metrics_server.machinery.labels import Selector

_MEMO_LIMIT: Final = 4096
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(frozen=True, slots=True)
class ObjectRecord:
    """The compact facts kept per object: identity, labels and controllers (4 slots, ~64 bytes:
    the resource, namespace and `describedObject` are derived, not stored per object)."""

    mapping: ResourceMapping  #: shared by every object of the resource
    #: (namespace, name): one tuple per object, shared by every index that holds the object
    #: (a property would mint a new tuple per index: 12 MiB of duplicates at 50,000 pods).
    key: ObjectKey
    labels: Mapping[str, str]
    owners: tuple[tuple[str, str], ...] = field(default=())  # (kind, name) of controllers

    @property
    def group_resource(self) -> GroupResource:
        """The object's resource."""
        return self.mapping.group_resource

    @property
    def namespace(self) -> str:
        """Its namespace ("" for cluster-scoped objects)."""
        return self.key[0]

    @property
    def name(self) -> str:
        """Its name."""
        return self.key[1]

    @property
    def ref(self) -> ObjectRef:
        """Its `describedObject` (a new value each time: built only for answers)."""
        mapping = self.mapping
        return ObjectRef(
            kind=mapping.kind,
            namespace=self.key[0],
            name=self.key[1],
            api_version=mapping.api_version,
        )


#: A group: (namespace, the label set as its (name, value) pairs in the object's order).
GroupKey = tuple[str, tuple[tuple[str, str], ...]]
LabelSet = tuple[tuple[str, str], ...]

# Members of a group and groups of a posting are kept compactly: the one value itself while
# there is one (most label sets of nodes, namespaces and workloads are unique), a set from
# the second on. A set of one costs ~216 bytes; the value, nothing more.


def _add(table: dict[_K, _V | set[_V]], key: _K, value: _V) -> None:
    found = table.get(key)
    if found is None:
        table[key] = value
    elif isinstance(found, set):
        found.add(value)
    elif found != value:
        table[key] = {found, value}


def _discard(table: dict[_K, _V | set[_V]], key: _K, value: _V) -> None:
    found = table.get(key)
    if isinstance(found, set):
        found.discard(value)
        if len(found) == 1:
            table[key] = next(iter(found))
        elif not found:
            del table[key]
    elif found is not None and found == value:
        del table[key]


def _values(found: _V | set[_V] | None) -> set[_V] | tuple[_V, ...]:
    if found is None:
        return ()
    return found if isinstance(found, set) else (found,)


class Inventory:
    """Objects by group-resource, grouped by label set, with a label posting index."""

    def __init__(self) -> None:
        self._objects: dict[GroupResource, dict[ObjectKey, ObjectRecord]] = {}
        # resource -> namespace -> label set -> its objects
        self._groups: dict[
            GroupResource, dict[str, dict[LabelSet, ObjectKey | set[ObjectKey]]]
        ] = {}
        self._postings: dict[tuple[GroupResource, str, str], GroupKey | set[GroupKey]] = {}
        self._memo: dict[tuple[GroupResource, str | None, Selector], tuple[ObjectKey, ...]] = {}
        self.generation = 0

    def __len__(self) -> int:
        return sum(len(objects) for objects in self._objects.values())

    def upsert(self, record: ObjectRecord) -> None:
        """Add or replace one object. O(labels); O(1) when its labels did not change."""
        objects = self._objects.get(record.group_resource)
        if objects is None:
            objects = self._objects[record.group_resource] = {}
        old = objects.get(record.key)
        if old is not None and (
            old.labels is record.labels or list(old.labels.items()) == list(record.labels.items())
        ):
            # Most updates (status, resources) keep the labels: the group stays valid, and so
            # do the memoised selections (keys only). (The same labels in another order are
            # another group key: re-filed below.)
            objects[record.key] = record
            self.generation += 1
            return
        if old is not None:
            self.delete(record.group_resource, record.key)
        objects[record.key] = record
        gr = record.group_resource
        label_set = tuple(record.labels.items())
        namespaces = self._groups.get(gr)
        if namespaces is None:
            namespaces = self._groups[gr] = {}
        groups = namespaces.get(record.namespace)
        if groups is None:
            groups = namespaces[record.namespace] = {}
        if label_set not in groups:
            group_key = (record.namespace, label_set)
            for name, value in label_set:
                _add(self._postings, (gr, name, value), group_key)
        _add(groups, label_set, record.key)
        self._changed()

    def delete(self, group_resource: GroupResource, key: ObjectKey) -> None:
        """Remove one object if present. O(1); O(labels) when its group empties."""
        old = self._objects.get(group_resource, {}).pop(key, None)
        if old is None:
            return
        namespaces = self._groups[group_resource]
        groups = namespaces[old.namespace]
        label_set = tuple(old.labels.items())
        _discard(groups, label_set, key)
        if label_set not in groups:
            if not groups:
                del namespaces[old.namespace]
            group_key = (old.namespace, label_set)
            for name, value in label_set:
                _discard(self._postings, (group_resource, name, value), group_key)
        self._changed()

    def get(self, group_resource: GroupResource, key: ObjectKey) -> ObjectRecord | None:
        """One object by key. O(1)."""
        return self._objects.get(group_resource, {}).get(key)

    def table(self, group_resource: GroupResource) -> Mapping[ObjectKey, ObjectRecord]:
        """Every object of a resource by key (a read-only view for bulk lookups)."""
        return MappingProxyType(self._objects.get(group_resource, {}))

    def keys_in(self, group_resource: GroupResource, namespace: str) -> Iterator[ObjectKey]:
        """Keys of every object of a resource in one namespace, by group. O(result)."""
        for members in self._groups.get(group_resource, {}).get(namespace, {}).values():
            yield from _values(members)

    def records(self, group_resource: GroupResource) -> Iterator[ObjectRecord]:
        """Every object of a resource, in insertion order."""
        return iter(self._objects.get(group_resource, {}).values())

    def select(
        self, group_resource: GroupResource, namespace: str | None, selector: Selector
    ) -> tuple[ObjectKey, ...]:
        """Sorted keys of objects matching the selector; namespace None = every namespace.

        Memoised until an object is added, removed or relabelled (not when only its record
        changes): the same tuple while it holds, so the answers memoised over it
        (`backends.kubernetes.pod_usage_answers`) compare it by identity."""
        memo_key = (group_resource, namespace, selector)
        found = self._memo.get(memo_key)
        if found is None:
            found = tuple(self._select(group_resource, namespace, selector))
            if len(self._memo) >= _MEMO_LIMIT:
                self._memo.clear()
            self._memo[memo_key] = found
        return found

    def _select(
        self, group_resource: GroupResource, namespace: str | None, selector: Selector
    ) -> list[ObjectKey]:
        namespaces = self._groups.get(group_resource, {})
        candidates: set[GroupKey] | None = None
        terms = sorted(
            (
                set().union(
                    *(_values(self._postings.get((group_resource, key, value))) for value in values)
                )
                for key, values in selector.equality_terms()
            ),
            key=len,
        )
        for posting in terms:
            candidates = posting if candidates is None else candidates & posting
            if not candidates:
                return []
        if candidates is None:
            scope = (
                namespaces.items()
                if namespace is None
                else [(namespace, namespaces.get(namespace, {}))]
            )
            candidates = {(ns, label_set) for ns, groups in scope for label_set in groups}
        objects = self._objects.get(group_resource, {})
        matches = selector.is_everything()
        found: list[ObjectKey] = []
        for ns, label_set in candidates:
            if namespace is not None and ns != namespace:
                continue
            members = _values(namespaces[ns][label_set])
            # One check per group: its members share the labels.
            if matches or selector.matches(objects[next(iter(members))].labels):
                found.extend(members)
        found.sort()
        return found

    def _changed(self) -> None:
        self.generation += 1
        if self._memo:
            self._memo.clear()
