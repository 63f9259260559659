"""Accept negotiation as kube-apiserver does it, for a JSON and protobuf server."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from custom_metrics_server.api.negotiation import (
    JSON,
    PROTOBUF,
    DiscoveryRepresentation,
    Representation,
    go_accept_clauses,
    metric_representation,
    negotiate,
    negotiate_discovery,
    pretty_print,
)
from custom_metrics_server.errors import NotAcceptable
from custom_metrics_server.metrics_api.request import negotiate as metrics_negotiate

PLAIN = Representation(JSON, pretty=False)
PROTO = Representation(PROTOBUF, pretty=False)


@pytest.mark.parametrize(
    "accept",
    [
        "",
        "application/json",
        "*/*",
        "application/*",
        "application/json;as=Table;v=v1;g=meta.k8s.io, application/json",
        "text/html, application/json;q=0.1",
        "APPLICATION/JSON",
        "application/json; charset=utf-8",
        "application/json;q=bogus",
        # At equal q the first written of two exact types wins.
        "application/json, application/vnd.kubernetes.protobuf",
        "application/vnd.kubernetes.protobuf;q=0.5, application/json",
        "application/vnd.kubernetes.protobuf;q=0.5, */*",
        "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1, */*",
    ],
)
def test_json_is_chosen(accept: str) -> None:
    assert negotiate(accept) == PLAIN


@pytest.mark.parametrize(
    "accept",
    [
        "application/vnd.kubernetes.protobuf",
        # The HPA (kube-controller-manager's client-go): exact type beats the wildcard.
        "application/vnd.kubernetes.protobuf, */*",
        "*/*, application/vnd.kubernetes.protobuf",
        "application/*, application/vnd.kubernetes.protobuf",
        "application/json;q=0.5, application/vnd.kubernetes.protobuf",
        "application/vnd.kubernetes.protobuf, application/json",
        "APPLICATION/VND.KUBERNETES.PROTOBUF;pretty=1",
        "application/json;as=Table;v=v1;g=meta.k8s.io, application/vnd.kubernetes.protobuf",
        "text/html, application/vnd.kubernetes.protobuf;q=0.1",
    ],
)
def test_protobuf_is_chosen(accept: str) -> None:
    chosen = negotiate(accept)
    assert chosen == PROTO
    assert isinstance(chosen, Representation)
    assert chosen.protobuf


@pytest.mark.parametrize(
    "accept",
    [
        "application/xml",
        "application/yaml",
        "application/json;q=0",
        "application/vnd.kubernetes.protobuf;q=0",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
        "application/json;stream=watch",
        "application/vnd.kubernetes.protobuf;stream=watch",
        "text/*",
    ],
)
def test_nothing_acceptable_is_406(accept: str) -> None:
    result = negotiate(accept)
    assert isinstance(result, NotAcceptable)
    assert result.message == (
        "only the following media types are accepted: "
        "application/json, application/vnd.kubernetes.protobuf"
    )


V2 = "g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_JSON = DiscoveryRepresentation(JSON, False, True)
AGGREGATED_PROTO = DiscoveryRepresentation(PROTOBUF, False, True)
PLAIN_JSON = DiscoveryRepresentation(JSON, False, False)
PLAIN_PROTO = DiscoveryRepresentation(PROTOBUF, False, False)


@pytest.mark.parametrize(
    ("accept", "at_root", "elsewhere"),
    [
        # client-go 1.37 (kubectl) and kube-aggregator: v2 first, the plain list as fallback.
        (f"application/json;{V2},application/json", AGGREGATED_JSON, PLAIN_JSON),
        # client-go <= 1.36 also names v2beta1, which 1.37 no longer serves (the gate
        # AggregatedDiscoveryRemoveBetaType is locked on since 1.35).
        (
            f"application/json;{V2},application/json;g=apidiscovery.k8s.io;v=v2beta1;"
            "as=APIGroupDiscoveryList,application/json",
            AGGREGATED_JSON,
            PLAIN_JSON,
        ),
        (f"application/vnd.kubernetes.protobuf;{V2}", AGGREGATED_PROTO, None),
        (
            f"application/vnd.kubernetes.protobuf;{V2},application/json;{V2},application/json",
            AGGREGATED_PROTO,
            PLAIN_JSON,
        ),
        # Only v2: a 406 where the aggregated document is not served (as kube-apiserver's
        # /apis/<group> and /apis/<group>/<version>).
        (f"application/json;{V2}", AGGREGATED_JSON, None),
        # The wrapper asks "any acceptable v2 clause?" first: q cannot prefer the plain list.
        (f"application/json, application/json;q=0.5;{V2}", AGGREGATED_JSON, PLAIN_JSON),
        (
            f"application/vnd.kubernetes.protobuf, application/json;q=0.1;{V2}",
            AGGREGATED_JSON,
            PLAIN_PROTO,
        ),
        # Parameters in any order, wildcards, profile (peer discovery) ignored, stream=watch
        # accepted, pretty=1 kept.
        ("*/*;as=APIGroupDiscoveryList;v=v2;g=apidiscovery.k8s.io", AGGREGATED_JSON, None),
        (f"application/*;{V2};profile=nopeer", AGGREGATED_JSON, None),
        (f"application/json;{V2};stream=watch", AGGREGATED_JSON, None),
        (f"application/json;{V2};pretty=1", DiscoveryRepresentation(JSON, True, True), None),
        # v2beta1 alone, other kinds and versions, server versions, other streams: not v2.
        ("application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList", None, None),
        ("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscovery", None, None),
        (f"application/json;{V2};sv=v1", None, None),
        (f"application/json;{V2};stream=other", None, None),
        ("application/json;as=Table;v=v1;g=meta.k8s.io", None, None),
        ("application/json;g=", None, None),
        # Plain clauses: goautoneg is case-sensitive and q only orders clauses.
        ("", PLAIN_JSON, PLAIN_JSON),
        ("application/json;q=0", PLAIN_JSON, PLAIN_JSON),
        ("application/json;q=bogus, application/vnd.kubernetes.protobuf", PLAIN_PROTO, PLAIN_PROTO),
        ("APPLICATION/JSON", None, None),
        ("application/xml", None, None),
        ("application/yaml", None, None),
        ("text/html, */*;q=0.1", PLAIN_JSON, PLAIN_JSON),
        ("*/json", None, None),
        # goautoneg's Less puts a specific type first even at a lower q.
        ("*/*, application/vnd.kubernetes.protobuf;q=0.5", PLAIN_PROTO, PLAIN_PROTO),
        ("application/json;stream=watch", PLAIN_JSON, PLAIN_JSON),
        (
            "application/json;pretty=1",
            DiscoveryRepresentation(JSON, True, False),
            DiscoveryRepresentation(JSON, True, False),
        ),
    ],
)
def test_discovery_negotiation_is_upstreams(
    accept: str,
    at_root: DiscoveryRepresentation | None,
    elsewhere: DiscoveryRepresentation | None,
) -> None:
    for aggregated, wanted in ((True, at_root), (False, elsewhere)):
        chosen = negotiate_discovery(accept, aggregated=aggregated)
        if wanted is None:
            assert isinstance(chosen, NotAcceptable), (accept, aggregated, chosen)
            assert chosen.code == 406
        else:
            assert chosen == wanted, (accept, aggregated)


@pytest.mark.parametrize(
    ("accept", "order"),
    [
        ("a/b;q=0.5, c/d", ["c/d", "a/b"]),
        # q=0 and an unparsable q are kept (parsed as 0), and sort last.
        ("a/b;q=0, c/d;q=x, e/f", ["e/f", "a/b", "c/d"]),
        # goautoneg's Less: a specific type sorts before a wildcard whatever the q.
        ("*/*, a/b;q=0.1", ["a/b", "*/*"]),
        ("a/*, a/b;q=0.1", ["a/b", "a/*"]),
        # Beyond float32 is +Inf; hex floats parse; a space before the number is an error.
        ("a/b, c/d;q=1e50", ["c/d", "a/b"]),
        ("a/b;q=0x1p-1, c/d;q= 0.9", ["a/b", "c/d"]),
        # Malformed ranges are dropped; `*` alone is */*.
        ("a, a/b/c, , *", ["*/*"]),
    ],
)
def test_goautoneg_order(accept: str, order: list[str]) -> None:
    assert [f"{c.type}/{c.subtype}" for c in go_accept_clauses(accept)] == order


def test_goautoneg_parameters() -> None:
    (clause,) = go_accept_clauses(" application/json ; g = x ;v=v2;novalue; q=0.25;g=y")
    assert clause.params == {"g": "y", "v": "v2"}
    assert clause.q == 0.25
    (upper,) = go_accept_clauses("application/json;Q=0.5")
    assert (upper.q, upper.params) == (1.0, {"Q": "0.5"})


def test_pretty_parameter_and_user_agents() -> None:
    chosen = negotiate("application/json;pretty=1")
    assert isinstance(chosen, Representation)
    assert chosen.pretty
    assert pretty_print(None, False, "curl/8.0")
    assert pretty_print(None, False, "Mozilla/5.0 (X11)")
    assert not pretty_print(None, False, "kubectl/v1.32.4 (linux/amd64)")
    assert pretty_print(None, True, "kubectl/v1.32.4 (linux/amd64)")
    assert not pretty_print(False, True, "curl/8.0")


@pytest.mark.parametrize(
    ("accept", "user_agent", "asked", "media_type", "pretty"),
    [
        ("", "kubectl/v1.32.4", None, JSON, False),
        ("", "curl/8.0", None, JSON, True),  # the user agent, when nothing else says
        ("", "curl/8.0", False, JSON, False),  # `?pretty=false` wins
        ("application/json;pretty=1", "kubectl/v1.32.4", None, JSON, True),
        ("application/json;pretty=1", "curl/8.0", False, JSON, False),
        ("", "kubectl/v1.32.4", True, JSON, True),
        ("application/vnd.kubernetes.protobuf", "curl/8.0", True, PROTOBUF, False),  # binary
    ],
)
def test_a_metric_list_s_representation_is_decided_in_one_call(
    accept: str, user_agent: str, asked: bool | None, media_type: str, pretty: bool
) -> None:
    chosen = metric_representation(accept, user_agent, asked)
    assert chosen == Representation(media_type, pretty)
    assert chosen.protobuf == (media_type == PROTOBUF)
    assert metric_representation("text/html", "curl/8.0", None) is None  # a 406


@pytest.mark.parametrize(
    "answer",
    [
        lambda: negotiate("text/html"),
        lambda: negotiate_discovery("text/html", aggregated=True),
        lambda: metrics_negotiate("text/html"),
    ],
)
def test_every_refusal_is_a_new_error(answer: Callable[[], object]) -> None:
    # Raising one cached exception per request would chain every request's frames onto its
    # traceback, for as long as the cache keeps it.
    first, second = answer(), answer()
    assert isinstance(first, NotAcceptable)
    assert isinstance(second, NotAcceptable)
    assert first is not second
    assert first.args == second.args
