"""An `http` source: a number from the JSON body of a GET to a Service of the definition's
namespace (KEDA's metrics-api scaler), sent only to that Service's own ready endpoints.

Two steps. `ready_targets` is pure: from the Service and its EndpointSlices (as the API serves
them, discovery.k8s.io/v1), the addresses the GET may go to, and nothing else: slices of this
Service in this namespace only (label `kubernetes.io/service-name`), IPv4 and IPv6 slices only
(an FQDN slice would name a host of the tenant's choosing), endpoints ready and not
terminating, at the slice port that carries the Service port the definition names; loopback,
link-local, unspecified and multicast addresses skipped (the API server refuses them in
EndpointSlices; `allow_loopback` is for a test or a single host). `choose` takes one of them
by turn, so successive reads spread over the endpoints and move past a failing one.

`fetch_value` does the GET over the project's one HTTP client (`http_client.Http11Pool`), on a
connection of its own that it closes: no credentials (no `Authorization`, no client
certificate, plain HTTP), a `Host` of the Service's cluster name, redirects not followed (a
3xx is a reason), the decoded body capped (`max_body`), the whole exchange within `deadline`.
Then `value_at` reads the number at the value path: keys separated by `.`, a key of digits
indexing an array (`queues.0.pending`), the simple paths of KEDA's `valueLocation` (GJSON) and
nothing more; the value a number or a string holding one. Every failure is a reason string for
the definition's status, never an exception.

Cost: `ready_targets` O(endpoints in the slices); `fetch_value` one TCP connect and one
exchange, the body parsed once (O(body), at most `max_body`), the path O(its keys).
"""

from __future__ import annotations

import asyncio
import ipaddress
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from custom_metrics_server.http_client.http11 import (
    BodyTooLarge,
    Http11Pool,
    TransportError,
    TransportTimeout,
)

DEFAULT_DEADLINE: Final = 5.0
DEFAULT_MAX_BODY: Final = 1 << 20
_SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: An origin-form request target: one `/`, then visible ASCII but `#` (no header injection).
_PATH: Final = re.compile(r"/(?!/)[\x21-\x22\x24-\x7e]*|/")


@dataclass(frozen=True, slots=True, order=True)
class Target:
    """One ready endpoint's address and port, as an EndpointSlice gives them."""

    address: str
    port: int


def ready_targets(
    service: Mapping[str, Any],
    slices: Iterable[Mapping[str, Any]],
    port: int | str,
    *,
    allow_loopback: bool = False,
) -> list[Target] | str:
    """Where the GET may go: see the module docstring. Sorted, so a turn means the same
    endpoint to every replica. O(endpoints)."""
    metadata = service.get("metadata") or {}
    name, namespace = metadata.get("name"), metadata.get("namespace")
    if not isinstance(name, str) or not isinstance(namespace, str):
        return "the Service has no name or namespace"
    port_name = _service_port_name(service, port)
    if port_name is None:
        return f"the Service {namespace}/{name} has no port {port!r}"
    found: set[Target] = set()
    for item in slices:
        item_metadata = item.get("metadata") or {}
        labels = item_metadata.get("labels") or {}
        if item_metadata.get("namespace") != namespace or labels.get(_SERVICE_NAME_LABEL) != name:
            continue
        if item.get("addressType") not in ("IPv4", "IPv6"):
            continue
        number = _slice_port(item.get("ports") or [], port_name)
        if number is None:
            continue
        for endpoint in item.get("endpoints") or []:
            conditions = endpoint.get("conditions") or {}
            # `ready` unset means ready (the API's own reading); terminating is never used.
            if conditions.get("ready") is False or conditions.get("terminating") is True:
                continue
            for address in endpoint.get("addresses") or []:
                if _usable(address, allow_loopback):
                    found.add(Target(str(ipaddress.ip_address(address)), number))
    if not found:
        return f"the Service {namespace}/{name} has no ready endpoint at port {port!r}"
    return sorted(found)


def choose(targets: Sequence[Target], turn: int) -> Target:
    """The target for this turn (round robin over `ready_targets`' list). O(1)."""
    return targets[turn % len(targets)]


async def fetch_value(
    target: Target,
    *,
    service: str,
    namespace: str,
    path: str,
    value_path: str,
    deadline: float = DEFAULT_DEADLINE,
    max_body: int = DEFAULT_MAX_BODY,
) -> float | str:
    """The number at `value_path` in the JSON body of `GET path` at `target`, or why there is
    none. See the module docstring. One connection, closed before returning."""
    if not (_DNS_LABEL.fullmatch(service) and _DNS_LABEL.fullmatch(namespace)):
        return f"{namespace}/{service} is not a Service's name"
    if not _PATH.fullmatch(path):
        return f"{path!r} is not an absolute path of visible ASCII characters"
    host = f"{service}.{namespace}.svc:{target.port}"
    head = (
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
        "User-Agent: custom-metrics-server\r\nConnection: close\r\n\r\n"
    ).encode("ascii")
    where = _origin(target)
    pool = Http11Pool(
        host=target.address,
        port=target.port,
        ssl_context=None,
        timeout=deadline,
        max_connections=1,
        max_idle=0,
        # An endpoint address is called directly, never through an environment proxy (as the
        # pod scrapes): the proxy would be a second hop the Service's endpoints do not name.
        trust_env=False,
    )
    try:
        async with asyncio.timeout(deadline):
            answer = await pool.request(head, limit=max_body)
    except (TimeoutError, TransportTimeout):
        return f"{where} did not answer within {deadline:g}s"
    except BodyTooLarge:
        return f"{where} answered a body over {max_body} bytes"
    except TransportError as error:
        return f"{where} could not be read: {error}"
    finally:
        pool.close()
    if 300 <= answer.status < 400:
        return f"{where} answered {answer.status} {answer.reason}: redirects are not followed"
    if answer.status != 200:
        return f"{where} answered {answer.status} {answer.reason}"
    try:
        document = orjson.loads(answer.body)
    except orjson.JSONDecodeError as error:
        return f"{where} answered a body that is not JSON: {error}"
    return value_at(document, value_path)


def value_at(document: object, value_path: str) -> float | str:
    """The number at `value_path` (`a.b.0.c`) in a parsed JSON document, or why there is none.
    O(keys)."""
    current = document
    walked: list[str] = []
    for key in value_path.split("."):
        if key == "":
            return f"{value_path!r} has an empty key"
        if isinstance(current, list) and key.isdigit():
            index = int(key)
            if index >= len(current):
                return f"{'.'.join(walked) or 'the body'} has {len(current)} items, no item {key}"
            current = current[index]
        elif isinstance(current, dict) and key in current:
            current = current[key]
        else:
            return f"no {key!r} in {'.'.join(walked) or 'the body'}"
        walked.append(key)
    number = _number(current)
    if number is None:
        return f"{value_path} is {_describe(current)}, not a number"
    return number


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _describe(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _service_port_name(service: Mapping[str, Any], port: int | str) -> str | None:
    """The name of the Service port `port` names (by number or name): "" for an unnamed one."""
    for item in (service.get("spec") or {}).get("ports") or []:
        name = item.get("name") or ""
        if (isinstance(port, str) and name == port) or (
            isinstance(port, int) and not isinstance(port, bool) and item.get("port") == port
        ):
            return str(name)
    return None


def _slice_port(ports: Iterable[Mapping[str, Any]], name: str) -> int | None:
    for item in ports:
        number = item.get("port")
        protocol = item.get("protocol") or "TCP"
        if (item.get("name") or "") == name and protocol == "TCP" and isinstance(number, int):
            return number if 0 < number < 65536 else None
    return None


def _usable(address: object, allow_loopback: bool) -> bool:
    if not isinstance(address, str):
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if ip.is_loopback:
        return allow_loopback
    return not (ip.is_link_local or ip.is_unspecified or ip.is_multicast)


def _origin(target: Target) -> str:
    if ":" in target.address:
        return f"[{target.address}]:{target.port}"
    return f"{target.address}:{target.port}"
