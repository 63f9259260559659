"""Delegated authentication: who is asking, as k8s.io/apiserver's delegating authenticator says.

The chain (authenticatorfactory/delegating.go), first success wins, errors only matter when
nothing succeeds:

1. **request-header** (front proxy): only when the connection presented a certificate that
   chains to the request-header CA *and* whose CN is in the allowed names (any CN when the list
   is empty). Then the user is the first non-empty value of the configured username headers;
   no username is "no opinion". A certificate that does not chain, or a CN not allowed, is an
   error. Headers without such a certificate are never read.
2. **x509** client certificate against the client CA: user = CN, groups = every O, extra
   `authentication.kubernetes.io/credential-id`. Empty CN: no opinion; not chaining: error.
3. **bearer token** via TokenReview, cached `--authentication-token-webhook-cache-ttl` (success
   and failure alike) by a keyed BLAKE2b hash of the token (per-process random key; upstream
   uses HMAC-SHA256, same property: no token is kept in clear); errors are not cached.
4. No opinion anywhere: **anonymous** (`system:anonymous`, `system:unauthenticated`) when
   `--anonymous-auth` (default); any error: 401.

`system:authenticated` is added to every non-anonymous identity that lacks it and
`system:unauthenticated`. Certificate checks are cached per (certificate, trust version) and
re-checked against the clock on every request, so neither a resumed TLS session nor a CA
rotation can keep an expired or no-longer-trusted certificate authenticated.

Must not: log tokens or header values, or read identity headers without a verified front-proxy
certificate. Cost per request: O(headers) plus dictionary lookups when caches are warm.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote_to_bytes

from cryptography import x509

from custom_metrics_server.domain import UserInfo
from custom_metrics_server.security.cache import SingleFlight, TtlCache
from custom_metrics_server.security.certs import (
    Verdict,
    common_name,
    organizations,
    verify_client,
)
from custom_metrics_server.security.trust import RequestHeaderSettings, TrustSnapshot, TrustStore
from custom_metrics_server.security.webhook import (
    TOKEN_REVIEW_PATH,
    Backoff,
    JsonPoster,
    ReviewError,
    ReviewMetrics,
    post_review,
)

logger = logging.getLogger(__name__)

AUTHENTICATED: Final = "system:authenticated"
UNAUTHENTICATED: Final = "system:unauthenticated"
ANONYMOUS_USER: Final = "system:anonymous"
CREDENTIAL_ID: Final = "authentication.kubernetes.io/credential-id"


class AuthenticationFailed(Exception):
    """A credential was offered and failed (401); the message is for the log only."""


@dataclass(frozen=True, slots=True)
class Identity:
    """An authenticated caller and the hashable key decisions are cached under."""

    user: UserInfo
    key: tuple[object, ...]


def identity(name: str, groups: Sequence[str], uid: str, extra: dict[str, list[str]]) -> Identity:
    """An authenticated identity; `system:authenticated` added as `AuthenticatedGroupAdder` does."""
    group_list = list(groups)
    if name != ANONYMOUS_USER and not (
        AUTHENTICATED in group_list or UNAUTHENTICATED in group_list
    ):
        group_list.append(AUTHENTICATED)
    frozen_extra = {key: tuple(values) for key, values in extra.items()}
    user = UserInfo(name=name, groups=tuple(group_list), uid=uid, extra=frozen_extra)
    return Identity(user, (name, uid, user.groups, tuple(sorted(frozen_extra.items()))))


ANONYMOUS: Final = identity(ANONYMOUS_USER, [UNAUTHENTICATED], "", {})


# --- client certificates ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CertificateInfo:
    """What one certificate proves under one trust snapshot."""

    version: int
    not_before: float
    not_after: float
    requestheader: Verdict | None  # None: no request-header CA configured
    common_name: str
    client: Identity | None  # set when it chains to the client CA and has a CN
    client_error: str  # "" when it chains to the client CA (or none is configured)


class CertificateClassifier:
    """Checks a peer certificate against both pools, once per (certificate, trust version)."""

    def __init__(self, *, capacity: int = 4096, clock: Callable[[], float] = time.time) -> None:
        self._capacity = capacity
        self._clock = clock
        self._cache: dict[bytes, CertificateInfo] = {}

    def classify(self, der: bytes, trust: TrustSnapshot) -> CertificateInfo:
        """The cached result for `der`, recomputed when the trust snapshot changed."""
        info = self._cache.get(der)
        if info is not None and info.version == trust.version:
            return info
        info = self._check(der, trust)
        if len(self._cache) >= self._capacity:
            self._cache.pop(next(iter(self._cache)))
        self._cache[der] = info
        return info

    def _check(self, der: bytes, trust: TrustSnapshot) -> CertificateInfo:
        leaf = x509.load_der_x509_certificate(der)
        now = dt.datetime.fromtimestamp(self._clock(), dt.UTC)
        settings = trust.requestheader
        requestheader = verify_client(leaf, settings.ca, now=now) if settings else None
        cn = common_name(leaf)
        client: Identity | None = None
        client_error = ""
        if trust.client_ca:
            verdict = verify_client(leaf, trust.client_ca, now=now)
            client_error = verdict.error
            if not verdict.error and cn:
                credential = "X509SHA256=" + hashlib.sha256(der).hexdigest()
                client = identity(cn, organizations(leaf), "", {CREDENTIAL_ID: [credential]})
        return CertificateInfo(
            version=trust.version,
            not_before=leaf.not_valid_before_utc.timestamp(),
            not_after=leaf.not_valid_after_utc.timestamp(),
            requestheader=requestheader,
            common_name=cn,
            client=client,
            client_error=client_error,
        )


# --- bearer tokens ----------------------------------------------------------------------------


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` value; "" when there is none."""
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer":
        return ""
    return parts[1]


class TokenAuthenticator:
    """TokenReview through kube-apiserver with a keyed-hash cache and single flight."""

    def __init__(
        self,
        client: JsonPoster | None,
        *,
        ttl: float = 10.0,
        backoff: Backoff | None = None,
        capacity: int = 65536,
    ) -> None:
        self._client = client
        self._ttl = ttl
        self._backoff = backoff or Backoff()
        self._key = secrets.token_bytes(32)
        self._cache: TtlCache[bytes, Identity | str] = TtlCache(capacity)
        self._flight: SingleFlight[bytes, Identity | str] = SingleFlight()
        self.reviews = 0  # TokenReview calls made (observability and tests)
        self.metrics = ReviewMetrics("authn")

    async def authenticate(self, token: str) -> Identity:
        """The token's identity; raises `AuthenticationFailed` (invalid token or review failure)."""
        key = hashlib.blake2b(token.encode("utf-8", "surrogateescape"), key=self._key).digest()
        cached = self._cache.get(key)
        if cached is None:
            cached = await self._flight.do(key, lambda: self._review(key, token))
        if isinstance(cached, str):
            raise AuthenticationFailed(cached)
        return cached

    async def _review(self, key: bytes, token: str) -> Identity | str:
        if self._client is None:
            raise AuthenticationFailed("no TokenReview client configured")
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token},
        }
        self.reviews += 1
        try:
            answer = await post_review(
                self._client, TOKEN_REVIEW_PATH, body, backoff=self._backoff, metrics=self.metrics
            )
        except ReviewError as err:
            raise AuthenticationFailed(f"token review failed: {err}") from None
        result = _token_review_result(answer)
        self._cache.put(key, result, self._ttl)
        return result


def _token_review_result(answer: dict[str, Any]) -> Identity | str:
    status = answer.get("status") or {}
    if not isinstance(status, dict) or not status.get("authenticated"):
        error = status.get("error") if isinstance(status, dict) else ""
        return str(error or "invalid bearer token")
    user = status.get("user") or {}
    name = str(user.get("username", ""))
    if not name:
        return "token review returned no username"
    groups = [str(g) for g in user.get("groups") or []]
    extra_raw = user.get("extra") or {}
    extra = {str(k): [str(v) for v in values or []] for k, values in extra_raw.items()}
    return identity(name, groups, str(user.get("uid", "")), extra)


# --- the chain --------------------------------------------------------------------------------


def unescape_extra_key(key: str) -> str:
    """`url.PathUnescape` of an extra key; malformed escapes keep the raw key (upstream)."""
    if "%" not in key:
        return key
    index = key.find("%")
    while index >= 0:
        escape = key[index + 1 : index + 3]
        if len(escape) != 2 or any(c not in "0123456789abcdefABCDEF" for c in escape):
            return key
        index = key.find("%", index + 3)
    return unquote_to_bytes(key).decode("utf-8", "replace")


def request_header_identity(
    settings_username: Sequence[str],
    settings_uid: Sequence[str],
    settings_groups: Sequence[str],
    settings_extra: Sequence[str],
    headers: Sequence[tuple[str, str]],
) -> Identity | None:
    """headerrequest's identity from the (lower-case name, value) identity headers, or None."""
    name = ""
    for header in settings_username:
        value = next((v for n, v in headers if n == header), "")
        if value:
            name = value
            break
    if not name:
        return None
    uid = ""
    for header in settings_uid:
        value = next((v for n, v in headers if n == header), "")
        if value:
            uid = value
            break
    groups = [v for header in settings_groups for n, v in headers if n == header and v]
    extra: dict[str, list[str]] = {}
    for prefix in settings_extra:
        for n, v in headers:
            if n.startswith(prefix):
                extra.setdefault(unescape_extra_key(n[len(prefix) :]), []).append(v)
    return identity(name, groups, uid, extra)


class Authenticator:
    """The delegating authenticator chain over one request's credentials."""

    def __init__(
        self,
        trust: TrustStore,
        *,
        tokens: TokenAuthenticator | None,
        anonymous: bool = True,
        classifier: CertificateClassifier | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.trust = trust
        self.tokens = tokens
        self.anonymous = anonymous
        self.classifier = classifier or CertificateClassifier(clock=clock)
        self._clock = clock
        #: (settings, identity headers) -> identity: the aggregator repeats the same few callers.
        self._proxied: dict[tuple[object, ...], Identity | None] = {}

    def _proxied_identity(
        self,
        version: int,
        settings: RequestHeaderSettings,
        identity_headers: Sequence[tuple[str, str]],
    ) -> Identity | None:
        key = (version, *identity_headers)
        if key in self._proxied:
            return self._proxied[key]
        found = request_header_identity(
            settings.username_headers,
            settings.uid_headers,
            settings.group_headers,
            settings.extra_prefixes,
            identity_headers,
        )
        if len(self._proxied) >= 4096:
            self._proxied.clear()
        self._proxied[key] = found
        return found

    async def authenticate(
        self,
        *,
        certificate: bytes | None,
        authorization: str,
        identity_headers: Sequence[tuple[str, str]],
    ) -> Identity:
        """The caller's identity; raises `AuthenticationFailed` (401)."""
        errors: list[str] = []
        if certificate:
            trust = self.trust.snapshot
            info = self.classifier.classify(certificate, trust)
            now = self._clock()
            if not info.not_before <= now <= info.not_after:
                errors.append("x509: certificate has expired or is not yet valid")
            else:
                settings = trust.requestheader
                if settings is not None and info.requestheader is not None:
                    if info.requestheader.error:
                        errors.append(info.requestheader.error)
                    elif settings.allowed_names and info.common_name not in settings.allowed_names:
                        errors.append(
                            f"x509: subject with cn={info.common_name} is not in the allowed list"
                        )
                    else:
                        found = self._proxied_identity(trust.version, settings, identity_headers)
                        if found is not None:
                            return found
                if info.client is not None:
                    return info.client
                if info.client_error:
                    errors.append(info.client_error)
        token = bearer_token(authorization) if authorization else ""
        if token:
            if self.tokens is None:
                errors.append("bearer token offered but no TokenReview client is configured")
            else:
                try:
                    return await self.tokens.authenticate(token)
                except AuthenticationFailed as err:
                    errors.append(str(err))
        if errors:
            raise AuthenticationFailed("; ".join(errors))
        if not self.anonymous:
            raise AuthenticationFailed("anonymous requests are disabled (--anonymous-auth=false)")
        return ANONYMOUS
