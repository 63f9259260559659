"""The backends file (`serve --backends-config FILE`): its schema, read and validated at once.

    defaults:                 # optional; each entry may override
      timeout: 10s            # deadline of one fetch (default: --backend-timeout)
      threads: 4              # threads for plain-function fetches
      maxSeries: 10000        # series one external fetch may return
    cluster: kubernetes       # optional: the backend whose cluster view is served
    backends:
      - name: kubernetes      # unique, lower-case DNS label: in /readyz, logs, metrics, errors
        type: kubernetes      # a built-in type, an entry point's name, or module:factory
        settings: {}          # the type's own settings, validated by its settings model
      - name: orders
        type: postgres
        settings: {dsn: "postgresql://..."}
        routes:               # optional; see query.routing for the rules
          - api: external
            metricRegex: "orders_(waiting|running)"

Every problem of a file is reported at once, one line each, naming the backend (`backends[1]
'orders' (type postgres): timeout: invalid duration '2x'`). Settings are checked later, by the
type's own model (`loader`), with the same prefix; `unknown_settings` then finds the keys that
model would silently ignore (a pydantic model ignores unknown keys unless it says otherwise), so
a typo in a plugin's settings is an error too, unless the model states its own `extra` policy.

This module owns the file's shape, not what the settings mean. Cost: O(size of the file).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import (
    AliasChoices,
    AliasPath,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from custom_metrics_server.machinery.durations import go_duration_seconds

__all__ = [
    "BackendEntry",
    "BackendsConfigError",
    "BackendsFile",
    "Defaults",
    "RouteEntry",
    "describe",
    "entry_label",
    "parse_backends_file",
    "parse_seconds",
    "read_backends_file",
    "settings_lines",
    "unknown_settings",
    "validate_backends",
    "validation_lines",
]

_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class BackendsConfigError(ValueError):
    """A backends file that cannot be served; one line per problem."""

    def __init__(self, lines: Sequence[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


def parse_seconds(value: object) -> object:
    """A Go duration (`10s`, `1m30s`, `500ms`) or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        seconds = go_duration_seconds(value)
        if seconds is None:
            try:
                seconds = float(value)
            except ValueError:
                raise ValueError(f"invalid duration {value!r} (examples: 10s, 500ms)") from None
        return seconds
    raise ValueError(f"invalid duration {value!r}")


Seconds = Annotated[float, BeforeValidator(parse_seconds), Field(gt=0, allow_inf_nan=False)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


PolicyAnswer = Literal["error", "zero", "last-good"]


class RouteEntry(_Model):
    """One route (see `query.routing` for the rules), with the failure policy of the metrics
    it decides (`absent`, `failure`, `maxAge`; docs/operations.md, "Failure policy")."""

    api: Literal["custom", "external"] | None = None
    resource: str | None = None
    metric: str | None = Field(default=None, min_length=1)
    metric_regex: str | None = Field(default=None, alias="metricRegex", min_length=1)
    listed: bool = False
    absent: PolicyAnswer | None = None
    failure: PolicyAnswer | None = None
    max_age: Seconds | None = Field(default=None, alias="maxAge")

    @model_validator(mode="after")
    def _last_good_needs_max_age(self) -> RouteEntry:
        if "last-good" in (self.absent, self.failure) and self.max_age is None:
            raise ValueError("last-good needs maxAge (how old a value may be served)")
        return self

    @property
    def has_policy(self) -> bool:
        """Whether the route says anything about absence, failure or age."""
        return self.absent is not None or self.failure is not None or self.max_age is not None


class Defaults(_Model):
    """What every entry gets unless it says otherwise."""

    timeout: Seconds | None = None
    threads: int = Field(default=4, ge=1, le=256)
    max_series: int = Field(default=10_000, alias="maxSeries", ge=1, le=1_000_000)


class BackendEntry(_Model):
    """One backend to run."""

    name: str = Field(max_length=63)
    type: str = Field(min_length=1)
    settings: dict[str, Any] = Field(default_factory=dict)
    routes: list[RouteEntry] | None = None
    timeout: Seconds | None = None
    threads: int | None = Field(default=None, ge=1, le=256)
    max_series: int | None = Field(default=None, alias="maxSeries", ge=1, le=1_000_000)
    #: Whether `/readyz` fails while this backend is not ready (default: built-in types do,
    #: plugins do not: a broken plugin fails its own metrics, never the server's readiness).
    gates_readiness: bool | None = Field(default=None, alias="gatesReadiness")

    @field_validator("name")
    @classmethod
    def _dns_label(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(
                f"{name!r} is not a lower-case DNS label (a-z, 0-9 and '-', at most 63)"
            )
        return name

    @field_validator("settings", mode="before")
    @classmethod
    def _settings_mapping(cls, settings: object) -> object:
        return {} if settings is None else settings


class BackendsFile(_Model):
    """The whole file."""

    defaults: Defaults = Field(default_factory=Defaults)
    cluster: str | None = None
    backends: list[BackendEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _names(self) -> BackendsFile:
        names = [entry.name for entry in self.backends]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"backend names must be unique: {', '.join(duplicates)}")
        if self.cluster is not None and self.cluster not in names:
            raise ValueError(f"cluster: no backend is named {self.cluster!r}")
        return self

    def digest(self) -> str:
        """A stable fingerprint of one entry set (reloads compare entries by it)."""
        return hashlib.sha256(self.model_dump_json(by_alias=True).encode()).hexdigest()


def entry_label(index: int, entry: Mapping[str, Any] | BackendEntry | None) -> str:
    """`backends[2] 'orders' (type postgres)`: how messages name an entry."""
    name: object
    kind: object
    if isinstance(entry, BackendEntry):
        name, kind = entry.name, entry.type
    elif isinstance(entry, Mapping):
        name, kind = entry.get("name"), entry.get("type")
    else:
        name = kind = None
    label = f"backends[{index}]"
    if isinstance(name, str):
        label += f" {name!r}"
    if isinstance(kind, str):
        label += f" (type {kind})"
    return label


def describe(location: Sequence[int | str]) -> str:
    """A pydantic location as the file spells it: `routes[0].metricRegex`."""
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text


def validation_lines(
    error: ValidationError, prefix: str = "", *, document: Mapping[str, Any] | None = None
) -> list[str]:
    """One line per problem; locations under `backends[i]` name the entry (from `document`)."""
    entries = document.get("backends") if document is not None else None
    lines = []
    for problem in error.errors():
        location = list(problem["loc"])
        head = prefix
        if (
            len(location) >= 2
            and location[0] == "backends"
            and isinstance(location[1], int)
            and isinstance(entries, list)
            and location[1] < len(entries)
        ):
            head = entry_label(location[1], entries[location[1]])
            location = location[2:]
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "missing":
            message = "field required"
        elif problem["type"] == "extra_forbidden":
            message = "unknown field"
        where = describe(location)
        parts = [part for part in (head, where) if part]
        lines.append(f"{': '.join(parts)}: {message}" if parts else message)
    return lines


def settings_lines(error: ValidationError, where: str) -> list[str]:
    """One line per problem of a backend's settings: `<where>: settings.dsn: field required`."""
    lines = []
    for problem in error.errors():
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "missing":
            message = "field required"
        elif problem["type"] == "extra_forbidden":
            message = "unknown field"
        where_in = describe(list(problem["loc"]))
        lines.append(f"{where}: settings{'.' + where_in if where_in else ''}: {message}")
    return lines


def _accepted(model: type[BaseModel]) -> set[str] | None:
    """The keys `model` reads, or None when it states its own policy for others (`extra`)."""
    config = model.model_config
    if "extra" in config:  # forbid (pydantic reports them), or allow / ignore: the plugin's choice
        return None
    by_name = bool(config.get("populate_by_name") or config.get("validate_by_name"))
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        alias = info.validation_alias if info.validation_alias is not None else info.alias
        choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
        for choice in choices:
            top = choice.path[0] if isinstance(choice, AliasPath) else choice  # a path's top key
            if isinstance(top, str):
                keys.add(top)
        if alias is None or by_name:
            keys.add(name)
    return keys


def _unknown_keys(
    model: type[BaseModel], raw: Mapping[Any, Any], at: tuple[int | str, ...]
) -> list[str]:
    keys = _accepted(model)
    if keys is None:
        return []
    known = ", ".join(sorted(keys)) or "none"
    return [
        f"{describe([*at, str(key)])}: unknown field (known: {known})"
        for key in raw
        if key not in keys
    ]


def _unknown(value: object, raw: object, at: tuple[int | str, ...]) -> list[str]:
    """`<location>: unknown field (known: ...)` for each key of `raw` that validating it into
    `value` ignored, recursing into nested models, lists and mappings of them."""
    found: list[str] = []
    if isinstance(value, BaseModel) and isinstance(raw, Mapping):
        model = type(value)
        found += _unknown_keys(model, raw, at)
        for name, info in model.model_fields.items():
            for key in (info.alias, name):
                if key is not None and key in raw:
                    found += _unknown(getattr(value, name), raw[key], (*at, key))
                    break
    elif isinstance(value, list | tuple) and isinstance(raw, list) and len(value) == len(raw):
        for index, (item, raw_item) in enumerate(zip(value, raw, strict=True)):
            found += _unknown(item, raw_item, (*at, index))
    elif isinstance(value, Mapping) and isinstance(raw, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and key in raw:
                found += _unknown(item, raw[key], (*at, key))
    return found


def unknown_settings(
    model: object, raw: Mapping[str, Any], where: str, *, validated: object = None
) -> list[str]:
    """One line per key of a backend's `settings:` that its (pydantic) settings `model` would
    silently ignore: `<where>: settings.queus: unknown field (known: database, queues)`. With
    the `validated` instance, nested models, lists and mappings of them are checked too;
    without it (validation failed), the top-level keys.

    A model (or nested model) that sets `extra` in its `model_config` has chosen (`forbid`:
    pydantic reports the keys; `ignore` or `allow`: the plugin opts out) and is left alone; a
    settings class that is not a pydantic model is too. Cost: O(size of the settings)."""
    if validated is not None:
        found = _unknown(validated, raw, ())
    elif isinstance(model, type) and issubclass(model, BaseModel):
        found = _unknown_keys(model, raw, ())
    else:
        found = []
    return [f"{where}: settings.{line}" for line in found]


def parse_backends_file(text: str, *, source: str) -> BackendsFile:
    """Parse and validate a backends file; `BackendsConfigError` lists every problem."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise BackendsConfigError([f"{source}: not YAML: {err}".replace("\n", " ")]) from None
    return validate_backends(document, source=source)


def validate_backends(document: object, *, source: str) -> BackendsFile:
    """Validate a parsed backends document; `BackendsConfigError` lists every problem."""
    if not isinstance(document, Mapping):
        kind = "empty" if document is None else f"a {type(document).__name__}"
        raise BackendsConfigError(
            [f"{source}: the file is {kind}, not a mapping with a backends list"]
        )
    try:
        return BackendsFile.model_validate(document)
    except ValidationError as err:
        lines = validation_lines(err, document=document)
        raise BackendsConfigError([f"{source}: {line}" for line in lines]) from None


def read_backends_file(path: Path) -> tuple[BackendsFile, bytes]:
    """The validated file and the digest of its bytes (for reload change detection)."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise BackendsConfigError([f"cannot read {path}: {err.strerror or err}"]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BackendsConfigError([f"{path}: not UTF-8: {err}"]) from None
    return parse_backends_file(text, source=str(path)), hashlib.sha256(raw).digest()
