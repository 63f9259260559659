"""The public SDK: its names, its version rules, its helpers and its marks."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest
from pydantic import BaseModel

from custom_metrics_server import sdk
from custom_metrics_server.domain import ObjectRef
from custom_metrics_server.machinery.labels import EVERYTHING

#: The contract 1.0 names. Removing or renaming one is a major version; adding one, a minor.
CONTRACT_1_0 = {
    "EVERYTHING",
    "VERSION",
    "BackendContext",
    "BackendRequest",
    "BackendTimeout",
    "BackendUnavailable",
    "BadRequest",
    "ClusterView",
    "CustomMetricsSource",
    "ExternalBackendRequest",
    "ExternalMetricsSource",
    "ExternalSample",
    "GroupResource",
    "Lifecycle",
    "MetricInfo",
    "MetricsBackend",
    "ObjectKey",
    "ObjectRef",
    "Operator",
    "Readiness",
    "ReadinessCheck",
    "Requirement",
    "ResourceMapping",
    "Sample",
    "Selector",
    "__version__",
    "compatible",
    "external_sample",
    "factory",
    "parse_selector",
    "sample",
}
#: What contract 1.1 added (a minor: only additions).
CONTRACT_1_1 = CONTRACT_1_0 | {"Replicable"}
#: The methods and fields of the selector types contract 1.2 covers (1.0 covered the first three
#: of `Selector`); a plugin turns a selector into a query with them.
SELECTOR_1_2 = {
    "matches",
    "is_everything",
    "requirements",
    "equality_terms",
    "requires_exact",
    "to_label_selector",
    "__str__",
}
REQUIREMENT_1_2 = {"key", "operator", "values", "matches"}


def test_every_contract_name_is_exported_and_importable() -> None:
    assert set(sdk.__all__) >= CONTRACT_1_1
    for name in sdk.__all__:
        assert getattr(sdk, name) is not None, name


def test_a_major_version_change_is_needed_to_drop_a_name() -> None:
    missing = CONTRACT_1_0 - set(sdk.__all__)
    assert not missing or sdk.VERSION[0] > 1, missing


def test_the_version_is_text_and_a_tuple_that_agree() -> None:
    assert sdk.__version__ == "1.2"
    assert sdk.VERSION == (1, 2)


def test_plugins_written_for_1_0_and_1_1_still_load_on_1_2() -> None:
    assert sdk.compatible("1.0")
    assert sdk.compatible("1.1")
    assert sdk.compatible("1.2")
    assert not sdk.compatible("1.3")


def test_the_selector_helpers_are_in_the_contract() -> None:
    for name in SELECTOR_1_2:
        assert hasattr(sdk.Selector, name), name
    for name in REQUIREMENT_1_2:
        assert hasattr(sdk.Requirement, name) or name in sdk.Requirement.__dataclass_fields__, name


@pytest.mark.parametrize(
    ("text", "terms", "exact"),
    [
        pytest.param("queue=emails", [("queue", {"emails"})], "emails", id="equals"),
        pytest.param("queue==emails", [("queue", {"emails"})], "emails", id="double-equals"),
        pytest.param("queue in (emails)", [("queue", {"emails"})], "emails", id="in-one"),
        pytest.param(
            "queue in (emails,reports)", [("queue", {"emails", "reports"})], None, id="in-two"
        ),
        pytest.param("queue!=emails", [], None, id="not-equals"),
        pytest.param("queue notin (emails)", [], None, id="not-in"),
        pytest.param("queue", [], None, id="exists"),
        pytest.param("", [], None, id="everything"),
        pytest.param(
            "env=prod,queue in (a,b)",
            [("env", {"prod"}), ("queue", {"a", "b"})],
            None,
            id="two-terms",
        ),
    ],
)
def test_equality_terms_and_requires_exact_turn_a_selector_into_a_lookup(
    text: str, terms: list[tuple[str, set[str]]], exact: str | None
) -> None:
    selector = sdk.parse_selector(text)
    assert [(key, set(values)) for key, values in selector.equality_terms()] == terms
    assert selector.requires_exact("queue") == exact


def test_a_selector_renders_as_clients_send_it_and_as_a_label_selector() -> None:
    selector = sdk.parse_selector("queue in (b,a), env = prod")
    assert str(selector) == "env=prod,queue in (a,b)"
    assert selector.to_label_selector() == {
        "matchLabels": {"env": "prod"},
        "matchExpressions": [{"key": "queue", "operator": "In", "values": ["a", "b"]}],
    }
    (_, queue) = selector.requirements
    assert (queue.key, queue.operator, queue.values) == ("queue", sdk.Operator.IN, ("a", "b"))
    assert queue.matches({"queue": "a"})


def test_replicable_is_an_optional_attribute_protocol() -> None:
    class Declares:
        replicable = True

    class Silent:
        pass

    assert isinstance(Declares(), sdk.Replicable)
    assert not isinstance(Silent(), sdk.Replicable)


@pytest.mark.parametrize(
    ("required", "provided", "ok"),
    [
        pytest.param("1.0", (1, 0), True, id="same"),
        pytest.param("1", (1, 3), True, id="bare-major-is-minor-0"),
        pytest.param("1.2", (1, 3), True, id="older-minor-runs-on-newer"),
        pytest.param("1.4", (1, 3), False, id="newer-minor-refused"),
        pytest.param("2.0", (1, 3), False, id="other-major-refused"),
        pytest.param("0.9", (1, 0), False, id="older-major-refused"),
    ],
)
def test_compatibility_follows_semver_of_the_contract(
    required: str, provided: tuple[int, int], ok: bool
) -> None:
    assert sdk.compatible(required, provided=provided) is ok


@pytest.mark.parametrize("text", ["", "v1", "1.x", "1.0.0", "-1"])
def test_a_malformed_version_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a contract version"):
        sdk.compatible(text)


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (sdk.MetricInfo(sdk.GroupResource("", "pods"), True, "m"), "metric"),
        (sdk.Readiness(True), "ready"),
        (sdk.ObjectRef("Pod", "ns", "p", "v1"), "name"),
        (
            sdk.ExternalBackendRequest(metric="m", namespace="ns", metric_selector=EVERYTHING),
            "metric",
        ),
    ],
    ids=lambda v: type(v).__name__ if not isinstance(v, str) else v,
)
def test_value_types_are_immutable(value: object, field: str) -> None:
    with pytest.raises((AttributeError, dataclasses.FrozenInstanceError)):
        setattr(value, field, "changed")


def _request() -> sdk.BackendRequest:
    mapping = sdk.ResourceMapping(
        sdk.GroupResource("apps", "deployments"), "v1", "Deployment", True
    )
    return sdk.BackendRequest(
        metric=sdk.MetricInfo(mapping.group_resource, True, "rps"),
        mapping=mapping,
        objects=(("shop", "web"),),
        metric_selector=sdk.EVERYTHING,
    )


def test_sample_describes_the_object_as_the_request_mapping_says() -> None:
    made = sdk.sample(_request(), ("shop", "web"), Decimal("1.5"), timestamp=10.0, window=60)
    assert made.described == ObjectRef("Deployment", "shop", "web", "apps/v1")
    assert (made.metric, made.value, made.timestamp, made.window) == (
        "rps",
        Decimal("1.5"),
        10.0,
        60,
    )
    assert made.reused is False


def test_samples_are_stamped_now_and_copy_their_labels() -> None:
    labels = {"queue": "a"}
    request = sdk.ExternalBackendRequest(metric="depth", namespace="ns", metric_selector=EVERYTHING)
    made = sdk.external_sample(request, 3, labels=labels)
    labels["queue"] = "changed"
    assert made.labels == {"queue": "a"}
    assert made.metric == "depth"
    assert made.timestamp > 1.7e9


def test_a_selector_parses_and_matches() -> None:
    selector = sdk.parse_selector("queue in (a,b),env!=prod")
    assert selector.matches({"queue": "a"})
    assert not selector.matches({"queue": "a", "env": "prod"})
    assert [r.operator for r in selector.requirements] == [sdk.Operator.NOT_EQUALS, sdk.Operator.IN]


def test_factory_marks_the_function_with_its_settings_model_and_contract() -> None:
    class Settings(BaseModel):
        dsn: str

    @sdk.factory(settings=Settings, requires="1.0")
    def make(settings: Settings) -> object:
        return object()

    assert make.settings_model is Settings  # type: ignore[attr-defined]
    assert make.sdk_version == "1.0"  # type: ignore[attr-defined]


def test_factory_refuses_a_settings_class_that_cannot_validate() -> None:
    with pytest.raises(TypeError, match="pydantic model"):
        sdk.factory(settings=dict)


def test_factory_refuses_a_malformed_contract_version() -> None:
    with pytest.raises(ValueError, match="not a contract version"):
        sdk.factory(requires="one")


def test_sdk_errors_carry_their_http_codes() -> None:
    assert (sdk.BadRequest.code, sdk.BackendUnavailable.code, sdk.BackendTimeout.code) == (
        400,
        503,
        504,
    )
