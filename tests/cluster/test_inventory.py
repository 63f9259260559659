"""The object index: selector lookups agree with a plain scan, and change invalidates memos."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from custom_metrics_server.cluster.in_memory import InMemoryCluster
from custom_metrics_server.domain import GroupResource
from custom_metrics_server.machinery.label_parser import parse_selector
from custom_metrics_server.machinery.labels import EVERYTHING, Selector

PODS = GroupResource("", "pods")


def cluster_with(*pods: tuple[str, str, dict[str, str]]) -> InMemoryCluster:
    cluster = InMemoryCluster()
    for namespace, name, labels in pods:
        cluster.add("pods", name, namespace=namespace, labels=labels)
    return cluster


def test_select_uses_namespace_and_selector_and_sorts() -> None:
    cluster = cluster_with(
        ("a", "z", {"app": "web"}),
        ("a", "b", {"app": "web"}),
        ("b", "c", {"app": "web"}),
        ("a", "d", {"app": "db"}),
    )
    assert list(cluster.list_objects(PODS, "a", parse_selector("app=web"))) == [
        ("a", "b"),
        ("a", "z"),
    ]
    assert list(cluster.list_objects(PODS, None, parse_selector("app=web"))) == [
        ("a", "b"),
        ("a", "z"),
        ("b", "c"),
    ]
    assert list(cluster.list_objects(PODS, None, parse_selector("app in (db,web),app!=web"))) == [
        ("a", "d")
    ]
    assert list(cluster.list_objects(PODS, "a", EVERYTHING)) == [("a", "b"), ("a", "d"), ("a", "z")]
    assert list(cluster.list_objects(GroupResource("apps", "deployments"), None, EVERYTHING)) == []


def test_a_selection_holds_while_only_records_change() -> None:
    """The same tuple while no object is added, removed or relabelled: the list answers over
    it are compared by identity."""
    cluster = cluster_with(("a", "one", {"app": "web"}), ("a", "two", {"app": "web"}))
    selector = parse_selector("app=web")
    first = cluster.list_objects(PODS, "a", selector)
    cluster.add("pods", "one", namespace="a", labels={"app": "web"})  # a new record, same labels
    assert cluster.list_objects(PODS, "a", selector) is first
    cluster.add("pods", "three", namespace="b", labels={"app": "web"})  # elsewhere: recomputed
    again = cluster.list_objects(PODS, "a", selector)
    assert again == first
    assert again is not first


def test_changes_invalidate_memoised_answers() -> None:
    cluster = cluster_with(("a", "one", {"app": "web"}))
    selector = parse_selector("app=web")
    assert list(cluster.list_objects(PODS, "a", selector)) == [("a", "one")]
    cluster.add("pods", "two", namespace="a", labels={"app": "web"})
    assert list(cluster.list_objects(PODS, "a", selector)) == [("a", "one"), ("a", "two")]
    cluster.add("pods", "one", namespace="a", labels={"app": "db"})  # relabel
    assert list(cluster.list_objects(PODS, "a", selector)) == [("a", "two")]
    cluster.inventory.delete(PODS, ("a", "two"))
    assert list(cluster.list_objects(PODS, "a", selector)) == []
    assert len(cluster.inventory) == 1


label_sets = st.dictionaries(
    st.sampled_from(["app", "tier", "env"]), st.sampled_from(["web", "db", "x"]), max_size=3
)
selectors = st.sampled_from(
    [
        "",
        "app=web",
        "app!=web",
        "app in (web,db)",
        "app notin (web)",
        "tier",
        "!tier",
        "app=web,tier=db",
        "env==x,app in (db)",
    ]
).map(lambda text: parse_selector(text) if text else EVERYTHING)


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b"]), label_sets), max_size=25),
    selectors,
    st.sampled_from([None, "a", "b"]),
)
def test_indexed_select_equals_a_full_scan(
    pods: list[tuple[str, dict[str, str]]], selector: Selector, namespace: str | None
) -> None:
    cluster = InMemoryCluster()
    for index, (ns, labels) in enumerate(pods):
        cluster.add("pods", f"p{index}", namespace=ns, labels=labels)
    expected = sorted(
        (ns, f"p{index}")
        for index, (ns, labels) in enumerate(pods)
        if (namespace is None or ns == namespace) and selector.matches(labels)
    )
    assert list(cluster.list_objects(PODS, namespace, selector)) == expected


def test_groups_follow_relabels_reorders_and_deletes() -> None:
    """Objects sharing a label set share a group; a relabel, the same labels in another order
    and a delete each leave the index as a fresh build of the same objects would be."""
    cluster = cluster_with(
        ("a", "p1", {"app": "web", "tier": "backend"}),
        ("a", "p2", {"app": "web", "tier": "backend"}),
        ("b", "p3", {"app": "web", "tier": "backend"}),
    )
    inventory = cluster.inventory
    cluster.add("pods", "p1", namespace="a", labels={"tier": "backend", "app": "web"})
    assert list(cluster.list_objects(PODS, "a", parse_selector("app=web"))) == [
        ("a", "p1"),
        ("a", "p2"),
    ]
    inventory.delete(PODS, ("a", "p1"))
    inventory.delete(PODS, ("a", "p2"))
    assert list(cluster.list_objects(PODS, None, parse_selector("tier=backend"))) == [("b", "p3")]
    assert list(cluster.list_objects(PODS, "a", EVERYTHING)) == []
    inventory.delete(PODS, ("b", "p3"))
    assert inventory._postings == {}  # no empty posting or group is kept
    assert inventory._groups == {PODS: {}}
    assert len(inventory) == 0


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.booleans(), st.integers(0, 6), st.sampled_from(["a", "b"]), label_sets),
        max_size=40,
    ),
    st.lists(selectors, min_size=1, max_size=3),
    st.sampled_from([None, "a", "b"]),
)
def test_select_after_updates_and_deletes_equals_a_full_scan(
    ops: list[tuple[bool, int, str, dict[str, str]]],
    chosen: list[Selector],
    namespace: str | None,
) -> None:
    """The memoised selections (asked after every change, with several selectors) against a
    scan of every object."""
    cluster = InMemoryCluster()
    alive: dict[tuple[str, str], dict[str, str]] = {}
    for delete, index, ns, labels in ops:
        key = (ns, f"p{index}")
        if delete:
            cluster.inventory.delete(PODS, key)
            alive.pop(key, None)
        else:
            cluster.add("pods", key[1], namespace=ns, labels=labels)
            alive[key] = labels
        for selector in chosen:
            expected = sorted(
                k for k, v in alive.items() if namespace in (None, k[0]) and selector.matches(v)
            )
            assert list(cluster.list_objects(PODS, namespace, selector)) == expected
