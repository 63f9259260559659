"""The per-request gate the ASGI app runs before anything else: authenticate, strip, authorize.

Order (k8s.io/apiserver `DefaultBuildHandlerChain`): authentication (401 before any path or
grammar detail is revealed) -> impersonation (rejected: 403) -> upgrade requests (rejected:
400, never 101) -> authorization (403, or 500 when the SubjectAccessReview fails) -> handler.

One pass over the headers finds `Authorization`, the identity headers (the standard
`X-Remote-User`/`-Uid`/`-Group`/`-Extra-*` and any configured custom names) and `Impersonate-*`,
and removes all of them from `scope["headers"]`: the handler, backends and logs never see them,
whatever the outcome (upstream strips on success and fails the others). The header plan is
rebuilt only when the trust snapshot's version changes.

`AllowAllGate` is the demo gate (no delegated auth configured): everyone is `system:anonymous`
and allowed, headers are still stripped, impersonation and upgrades still refused.

Must not: read identity headers itself (that is `authn`'s, behind a verified certificate), or
let a request through on an error. Cost with warm caches: O(headers) + O(len(path)) + two
dictionary lookups (token, decision).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from custom_metrics_server.errors import BadRequest, StatusError, Unauthorized
from custom_metrics_server.runtime.asgi import Scope
from custom_metrics_server.security.authn import (
    ANONYMOUS,
    AuthenticationFailed,
    Authenticator,
    Identity,
)
from custom_metrics_server.security.authz import Authorizer, forbidden
from custom_metrics_server.security.requestinfo import RequestAttributes, request_attributes
from custom_metrics_server.security.trust import (
    STANDARD_EXTRA_PREFIXES,
    STANDARD_GROUP_HEADERS,
    STANDARD_UID_HEADERS,
    STANDARD_USERNAME_HEADERS,
    TrustSnapshot,
)

logger = logging.getLogger(__name__)

_AUTHORIZATION: Final = b"authorization"
_UPGRADE: Final = b"upgrade"
_IMPERSONATE: Final = b"impersonate-"
_IMPERSONATION_UNSUPPORTED: Final = "impersonation is not supported by this server"
#: Go's `http.Server.MaxHeaderBytes` default (1 MiB) plus its 4 KiB slack.
MAX_HEADER_BYTES: Final = (1 << 20) + 4096


class HeadersTooLarge(StatusError):
    """431: the request head is larger than a Go API server accepts."""

    code = 431
    reason = "RequestHeaderFieldsTooLarge"


def headers_too_large() -> HeadersTooLarge:
    """What Go's server answers (there as plain text) for a head over `MaxHeaderBytes`."""
    return HeadersTooLarge("Request Header Fields Too Large")


def unauthorized() -> Unauthorized:
    """upstream `Unauthorized`: 401 Status, message "Unauthorized", no details."""
    return Unauthorized("Unauthorized")


def upgrade_refused() -> BadRequest:
    """A protocol upgrade (WebSocket, SPDY, h2c): this API has no streaming endpoints."""
    return BadRequest("upgrade requests are not supported by this server")


def impersonation_refused(
    identity: Identity, headers: Sequence[tuple[bytes, bytes]]
) -> StatusError:
    """403 as upstream's impersonation filter words a denial, for the first impersonated value."""
    values: dict[bytes, bytes] = {}
    for name, value in headers:
        values.setdefault(name, value)
    user = values.get(b"impersonate-user")
    if user is not None:
        text = user.decode("utf-8", "replace")
        parts = text.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
            attributes = RequestAttributes(
                resource_request=True,
                path="",
                verb="impersonate",
                resource="serviceaccounts",
                namespace=parts[2],
                name=parts[3],
            )
        else:
            attributes = RequestAttributes(
                resource_request=True, path="", verb="impersonate", resource="users", name=text
            )
    elif b"impersonate-group" in values:
        attributes = RequestAttributes(
            resource_request=True,
            path="",
            verb="impersonate",
            resource="groups",
            name=values[b"impersonate-group"].decode("utf-8", "replace"),
        )
    else:
        name, value = next(
            ((n, v) for n, v in headers if n.startswith(b"impersonate-extra-")), headers[0]
        )
        if name.startswith(b"impersonate-extra-"):
            attributes = RequestAttributes(
                resource_request=True,
                path="",
                verb="impersonate",
                group="authentication.k8s.io",
                resource="userextras",
                subresource=name[len(b"impersonate-extra-") :].decode("latin-1"),
                name=value.decode("utf-8", "replace"),
            )
        else:
            attributes = RequestAttributes(
                resource_request=True,
                path="",
                verb="impersonate",
                group="authentication.k8s.io",
                resource="uids",
                name=value.decode("utf-8", "replace"),
            )
    return forbidden(attributes, identity.user.name, _IMPERSONATION_UNSUPPORTED)


@dataclass(frozen=True, slots=True)
class HeaderPlan:
    """Which header names the gate takes out of the request (lower-case bytes)."""

    version: int
    exact: frozenset[bytes]
    prefixes: tuple[bytes, ...]


def header_plan(trust: TrustSnapshot) -> HeaderPlan:
    """Standard identity headers, the configured ones, `Authorization` and `Impersonate-*`."""
    exact = {_AUTHORIZATION}
    prefixes = [_IMPERSONATE]
    names = [*STANDARD_USERNAME_HEADERS, *STANDARD_UID_HEADERS, *STANDARD_GROUP_HEADERS]
    extra = list(STANDARD_EXTRA_PREFIXES)
    settings = trust.requestheader
    if settings is not None:
        names += [*settings.username_headers, *settings.uid_headers, *settings.group_headers]
        extra += settings.extra_prefixes
    exact.update(name.encode("latin-1") for name in names)
    prefixes += sorted({prefix.encode("latin-1") for prefix in extra})
    return HeaderPlan(trust.version, frozenset(exact), tuple(prefixes))


@dataclass(slots=True)
class Credentials:
    """What one request offers, taken out of its headers."""

    authorization: str = ""
    identity_headers: list[tuple[str, str]] | None = None
    impersonation: list[tuple[bytes, bytes]] | None = None
    upgrade: bool = False
    size: int = 0


def take_credentials(scope: Scope, plan: HeaderPlan) -> Credentials:
    """One pass: collect credentials and remove them from `scope["headers"]`."""
    found = Credentials()
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    kept: list[tuple[bytes, bytes]] | None = None
    exact = plan.exact
    prefixes = plan.prefixes
    size = 0
    for index, (name, value) in enumerate(headers):
        size += len(name) + len(value) + 4
        if name in exact or name.startswith(prefixes):
            if kept is None:
                kept = headers[:index]
            if name == _AUTHORIZATION:
                if not found.authorization:
                    found.authorization = value.decode("utf-8", "replace")
            elif name.startswith(_IMPERSONATE):
                if found.impersonation is None:
                    found.impersonation = []
                found.impersonation.append((name, value))
            else:
                if found.identity_headers is None:
                    found.identity_headers = []
                found.identity_headers.append(
                    (name.decode("latin-1"), value.decode("utf-8", "replace"))
                )
            continue
        if kept is not None:
            kept.append((name, value))
        if name == _UPGRADE:
            found.upgrade = True
    if kept is not None:
        scope["headers"] = kept
    found.size = size
    return found


def _certificate(scope: Scope) -> bytes | None:
    extensions = scope.get("extensions")
    if not extensions:
        return None
    tls = extensions.get("tls")
    if not tls:
        return None
    der: bytes | None = tls.get("client_cert_der")
    return der


class Gate(Protocol):
    """What `app.Server` calls for every HTTP request before dispatching it."""

    async def check(self, scope: Scope) -> StatusError | None:
        """None to serve the request, or the error to answer instead."""


class AllowAllGate:
    """Demo mode without delegated auth: everyone is `system:anonymous` and allowed."""

    def __init__(self) -> None:
        self._plan = header_plan(TrustSnapshot(version=0))

    async def check(self, scope: Scope) -> StatusError | None:
        """Strip credentials; refuse impersonation and upgrades; allow the rest."""
        found = take_credentials(scope, self._plan)
        if found.size > MAX_HEADER_BYTES:
            return headers_too_large()
        if found.impersonation:
            return impersonation_refused(ANONYMOUS, found.impersonation)
        if found.upgrade:
            return upgrade_refused()
        scope["user"] = ANONYMOUS.user
        return None


_ATTRIBUTE_CACHE_SIZE: Final = 4096


class DelegatingGate:
    """Delegated authentication and authorization (see the module docstring)."""

    def __init__(self, authenticator: Authenticator, authorizer: Authorizer) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self._plan = header_plan(authenticator.trust.snapshot)
        #: (method, path, query) -> attributes: RequestInfo is pure, so repeated URLs reuse it.
        self._attributes: dict[tuple[str, str, bytes], RequestAttributes] = {}

    def _request_attributes(self, scope: Scope) -> RequestAttributes:
        key = (scope["method"], scope["path"], scope["query_string"])
        found = self._attributes.get(key)
        if found is None:
            found = request_attributes(*key)
            if len(self._attributes) >= _ATTRIBUTE_CACHE_SIZE:
                self._attributes.clear()
            self._attributes[key] = found
        return found

    async def check(self, scope: Scope) -> StatusError | None:
        """None to serve; else the Status to answer (401, 403, 400 or 500)."""
        trust = self.authenticator.trust.refresh()
        plan = self._plan
        if plan.version != trust.version:
            plan = self._plan = header_plan(trust)
        found = take_credentials(scope, plan)
        if found.size > MAX_HEADER_BYTES:
            return headers_too_large()
        try:
            identity = await self.authenticator.authenticate(
                certificate=_certificate(scope),
                authorization=found.authorization,
                identity_headers=found.identity_headers or (),
            )
        except AuthenticationFailed as err:
            logger.debug("unauthorized %s %s: %s", scope["method"], scope["path"][:200], err)
            return unauthorized()
        if found.impersonation:
            return impersonation_refused(identity, found.impersonation)
        if found.upgrade:
            return upgrade_refused()
        attributes = self._request_attributes(scope)
        try:
            await self.authorizer.authorize(identity, attributes)
        except StatusError as error:
            return error
        scope["user"] = identity.user
        return None
