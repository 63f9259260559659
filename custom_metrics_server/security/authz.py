"""Delegated authorization: may this identity do this, as k8s.io/apiserver's delegating authorizer.

A union, first Allow or Deny wins (pkg/server/options/authorization.go):

1. groups in `always_allow_groups` (`system:masters`) are allowed without a SAR;
2. non-resource requests on `--authorization-always-allow-paths` (default `/healthz`,
   `/readyz`, `/livez`; exact after trimming the leading `/`, or a prefix when the entry ends in
   `*`, as pkg/authorization/path does) are allowed;
3. a SubjectAccessReview (`authorization.k8s.io/v1`) carrying the user, uid, groups, extra and
   the request's attributes (`requestinfo`) decides: `allowed` -> Allow, `denied` -> Deny,
   neither -> NoOpinion (403), both -> error (500). Answers are cached by the whole spec for
   `--authorization-webhook-cache-authorized-ttl` / `-unauthorized-ttl` (10 s), at most
   `CACHE_CAPACITY` entries, never for attributes over 10,000 bytes; errors are never cached.

Sizing. An HPA asks about the same attributes every sync period (15 s), so each HPA metric is
one entry: upstream's 8,192 entries thrash from ~8,000 HPA metrics on, whatever the TTL; 65,536
hold 50,000 HPAs with room, in memory a server can spare (docs/performance.md, "Authorization
cache size"). The TTLs stay upstream's (10 s), shorter than the HPA's
period, so by default every HPA query is reviewed; docs/security.md recommends
`--authorization-webhook-cache-authorized-ttl=5m` (kube-apiserver's own webhook default) from a
few hundred HPAs on.

Failures: `Forbidden` (403) carries upstream's exact message (HTML-escaped) and details; an
authorizer error is `AuthorizationUnavailable` (500 InternalError Status: we answer a Status
object, not Go's text/plain, so clients print the reason; see docs/security.md).

Must not: fail open. Cost: a dict lookup when cached (the key is a tuple, not JSON).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from custom_metrics_server.errors import Forbidden, InternalError
from custom_metrics_server.machinery.gostrings import go_quote
from custom_metrics_server.security.authn import Identity
from custom_metrics_server.security.cache import SingleFlight, TtlCache
from custom_metrics_server.security.requestinfo import RequestAttributes
from custom_metrics_server.security.webhook import (
    SUBJECT_ACCESS_REVIEW_PATH,
    Backoff,
    JsonPoster,
    ReviewError,
    ReviewMetrics,
    post_review,
)

logger = logging.getLogger(__name__)

DEFAULT_ALWAYS_ALLOW_PATHS: Final = ("/healthz", "/readyz", "/livez")
DEFAULT_ALWAYS_ALLOW_GROUPS: Final = ("system:masters",)
MAX_CACHED_ATTRIBUTE_BYTES: Final = 10_000
CACHE_CAPACITY: Final = 65_536  # upstream: 8,192 (see "Sizing" above)


class AuthorizationUnavailable(InternalError):
    """500: the authorizer could not decide (SubjectAccessReview failed)."""


def authorization_unavailable() -> AuthorizationUnavailable:
    """The Status a failed authorization check answers (message masked; cause in the log)."""
    cause = "the authorization check (SubjectAccessReview) could not be completed"
    return AuthorizationUnavailable(
        f"Internal error occurred: {cause}", details={"causes": [{"message": cause}]}
    )


_SANITIZE: Final = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;"})


def forbidden(attributes: RequestAttributes, user: str, reason: str = "") -> Forbidden:
    """responsewriters.Forbidden: the message, HTML-escaped, inside `apierrors.NewForbidden`."""
    if not attributes.resource_request:
        message = f"User {go_quote(user)} cannot {attributes.verb} path {go_quote(attributes.path)}"
    else:
        resource = attributes.resource
        if attributes.subresource:
            resource = f"{resource}/{attributes.subresource}"
        scope = (
            f"in the namespace {go_quote(attributes.namespace)}"
            if attributes.namespace
            else "at the cluster scope"
        )
        message = (
            f"User {go_quote(user)} cannot {attributes.verb} resource {go_quote(resource)} "
            f"in API group {go_quote(attributes.group)} {scope}"
        )
    message = message.translate(_SANITIZE)
    if reason:
        message = f"{message}: {reason}"
    group, kind, name = (
        (attributes.group, attributes.resource, attributes.name)
        if attributes.resource_request
        else ("", "", "")
    )
    qualified = f"{kind}.{group}" if group else kind
    if not qualified:
        text = f"forbidden: {message}"
    elif not name:
        text = f"{qualified} is forbidden: {message}"
    else:
        text = f"{qualified} {go_quote(name)} is forbidden: {message}"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    return Forbidden(text, details=details)


@dataclass(frozen=True, slots=True)
class AccessDecision:
    """A SAR answer worth caching."""

    allowed: bool
    denied: bool
    reason: str


_ALLOWED: Final = AccessDecision(allowed=True, denied=False, reason="")


def review_body(identity: Identity, attributes: RequestAttributes) -> dict[str, Any]:
    """The SubjectAccessReview sent for one decision (spec fields in Go's order, omitempty)."""
    kind, document = attributes.sar_attributes()
    spec: dict[str, Any] = {kind: document}
    user = identity.user
    if user.name:
        spec["user"] = user.name
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {key: list(values) for key, values in sorted(user.extra.items())}
    if user.uid:
        spec["uid"] = user.uid
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def _path_matcher(paths: Sequence[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    exact: set[str] = set()
    prefixes: list[str] = []
    for raw in paths:
        path = raw.removeprefix("/")
        if not path:
            exact.add(path)
            continue
        if "*" in path[:-1]:
            raise ValueError(f'only trailing * allowed in "{path}"')
        if path.endswith("*"):
            prefixes.append(path[:-1])
        else:
            exact.add(path)
    return frozenset(exact), tuple(prefixes)


class Authorizer:
    """always-allow groups, always-allow paths, then the SubjectAccessReview webhook."""

    def __init__(
        self,
        client: JsonPoster | None,
        *,
        always_allow_paths: Sequence[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
        always_allow_groups: Sequence[str] = DEFAULT_ALWAYS_ALLOW_GROUPS,
        allowed_ttl: float = 10.0,
        denied_ttl: float = 10.0,
        backoff: Backoff | None = None,
        capacity: int = CACHE_CAPACITY,
    ) -> None:
        self._client = client
        self._exact_paths, self._path_prefixes = _path_matcher(always_allow_paths)
        self._groups = frozenset(always_allow_groups)
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._backoff = backoff or Backoff()
        self._cache: TtlCache[tuple[object, ...], AccessDecision] = TtlCache(capacity)
        self._flight: SingleFlight[tuple[object, ...], AccessDecision] = SingleFlight()
        self.reviews = 0  # SubjectAccessReview calls made (observability and tests)
        self.metrics = ReviewMetrics("authz")
        if client is None:
            logger.warning(
                "no authorization kubeconfig and not in a cluster: SubjectAccessReviews are "
                "impossible, every request not always allowed is forbidden"
            )

    def always_allowed(self, identity: Identity, attributes: RequestAttributes) -> bool:
        """Whether the hard-coded authorizers allow without asking kube-apiserver."""
        if not self._groups.isdisjoint(identity.user.groups):
            return True
        if attributes.resource_request:
            return False
        path = attributes.path.removeprefix("/")
        return path in self._exact_paths or any(path.startswith(p) for p in self._path_prefixes)

    async def authorize(self, identity: Identity, attributes: RequestAttributes) -> None:
        """Return if allowed; raise `Forbidden` (403) or `AuthorizationUnavailable` (500)."""
        if self.always_allowed(identity, attributes):
            return
        if self._client is None:
            raise forbidden(attributes, identity.user.name)
        key = (identity.key, attributes)
        decision = self._cache.get(key)
        if decision is None:
            try:
                decision = await self._flight.do(
                    key, lambda: self._review(key, identity, attributes)
                )
            except ReviewError as err:
                logger.error(
                    "authorization failed for %s %s: %s", attributes.verb, attributes.path, err
                )
                raise authorization_unavailable() from None
        if decision.allowed and decision.denied:
            logger.error("SubjectAccessReview returned both allowed and denied")
            raise authorization_unavailable()
        if decision.allowed:
            return
        raise forbidden(attributes, identity.user.name, decision.reason)

    async def _review(
        self, key: tuple[object, ...], identity: Identity, attributes: RequestAttributes
    ) -> AccessDecision:
        assert self._client is not None
        self.reviews += 1
        answer = await post_review(
            self._client,
            SUBJECT_ACCESS_REVIEW_PATH,
            review_body(identity, attributes),
            backoff=self._backoff,
            metrics=self.metrics,
        )
        status = answer.get("status") or {}
        if not isinstance(status, dict):
            raise ReviewError("SubjectAccessReview answer has no status")
        allowed, denied = status.get("allowed") is True, status.get("denied") is True
        reason = str(status.get("reason") or "")
        # Nearly every answer is a reason-less allow: one shared object, not one per entry.
        decision = (
            _ALLOWED
            if allowed and not denied and not reason
            else AccessDecision(allowed=allowed, denied=denied, reason=reason)
        )
        if attributes.controlled_size() < MAX_CACHED_ATTRIBUTE_BYTES:
            ttl = self._allowed_ttl if decision.allowed else self._denied_ttl
            self._cache.put(key, decision, ttl)
        return decision
