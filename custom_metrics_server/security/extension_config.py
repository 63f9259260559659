"""Follows `kube-system/extension-apiserver-authentication`, the ConfigMap kube-apiserver writes
with its client CA and front-proxy settings, for whatever the flags did not give.

Start-up (`load_once`, upstream `RunOnce`): one GET (retried for a few seconds while the API
server cannot be reached, `kube.startup`). NotFound is tolerated (nothing is trusted from it
until it appears); Forbidden and other errors fail start-up with one line naming the call and
the fix (`runtime.startup.StartupError`), unless `--authentication-tolerate-lookup-failure`.
Content that takes effect is logged at INFO, once per change (the first read included).
Then (`follow`): list + watch filtered on the name, every watch ending after at most 60 s so
the content is re-read at least once a minute (upstream's forced re-check), relisting after a
410 Gone, backing off 1 s .. 30 s on errors.

Content rules: a value is applied only if it parses (PEM bundle, JSON string lists) and the
request-header settings validate; otherwise the last good value stays and the error is logged.
A deleted ConfigMap clears what it provided (nothing trusted from it: fail closed), as current
upstream does for the request-header settings.

Must not: touch values given by flags, or widen trust on bad content. No request-path cost.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import orjson

from custom_metrics_server.kube.client import GoneError, KubeApiError, KubeClient
from custom_metrics_server.kube.startup import startup_call
from custom_metrics_server.runtime.startup import StartupError
from custom_metrics_server.security.certs import CertificateError, load_bundle
from custom_metrics_server.security.trust import (
    RequestHeaderSettings,
    TrustConfigError,
    TrustStore,
    request_header_settings,
)

logger = logging.getLogger(__name__)

NAMESPACE: Final = "kube-system"
NAME: Final = "extension-apiserver-authentication"
OBJECT_PATH: Final = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}"
LIST_PATH: Final = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
FIELD_SELECTOR: Final = f"metadata.name={NAME}"
READER_ROLE: Final = "extension-apiserver-authentication-reader"
#: What to do when the ConfigMap may not be read (the issue's deployment found it).
FORBIDDEN_FIX: Final = (
    f"the service account needs the RoleBinding to {READER_ROLE} in {NAMESPACE} "
    "(manifests/base/role-binding-auth-reader.yaml), or pass --authentication-skip-lookup"
)


def _strings(data: dict[str, str], key: str) -> list[str]:
    raw = data.get(key, "")
    if not raw:
        return []
    value = orjson.loads(raw)
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TrustConfigError(f"{key} is not a JSON list of strings")
    return value


def parse_requestheader(data: dict[str, str]) -> RequestHeaderSettings | None:
    """The front-proxy settings in the ConfigMap; None without `requestheader-client-ca-file`."""
    pem = data.get("requestheader-client-ca-file", "")
    if not pem:
        return None
    return request_header_settings(
        load_bundle(pem.encode(), what="requestheader-client-ca-file"),
        username_headers=_strings(data, "requestheader-username-headers"),
        uid_headers=_strings(data, "requestheader-uid-headers"),
        group_headers=_strings(data, "requestheader-group-headers"),
        extra_prefixes=_strings(data, "requestheader-extra-headers-prefix"),
        allowed_names=_strings(data, "requestheader-allowed-names"),
    )


class ExtensionConfigFollower:
    """Applies the ConfigMap's client CA and/or request-header settings to a `TrustStore`."""

    def __init__(
        self,
        client: KubeClient,
        trust: TrustStore,
        *,
        client_ca: bool,
        requestheader: bool,
        tolerate_lookup_failure: bool = False,
        resync_seconds: int = 60,
    ) -> None:
        self._client = client
        self._trust = trust
        self._client_ca = client_ca
        self._requestheader = requestheader
        self._tolerate = tolerate_lookup_failure
        self._resync = resync_seconds
        self.applied = 0  # successful applications of content (tests, observability)
        self._logged: dict[str, str] | None = None  # the content last logged as in effect
        self._content_errors: dict[str, str] = {}  # unusable content, logged once each

    def _log_change(self, data: dict[str, str]) -> None:
        """One INFO line when the content in effect changes (the re-lists every minute and
        every watch reconnect bring the same content back: no line then)."""
        relevant = {
            key: value
            for key, value in data.items()
            if (self._client_ca and key == "client-ca-file")
            or (self._requestheader and key.startswith("requestheader-"))
        }
        if relevant == self._logged:
            return
        first = self._logged is None
        self._logged = relevant
        parts = []
        snapshot = self._trust.snapshot
        if self._client_ca:
            parts.append(f"client CA: {len(snapshot.client_ca or ())} certificate(s)")
        if self._requestheader:
            front = snapshot.requestheader
            if front is None:
                parts.append("no front proxy")
            else:
                names = ",".join(front.allowed_names) or "any name the CA signed"
                parts.append(
                    f"front-proxy CA: {len(front.ca)} certificate(s), allowed names: {names}"
                )
        logger.info(
            "configmap %s/%s %s: %s",
            NAMESPACE,
            NAME,
            "read" if first else "changed",
            "; ".join(parts),
        )

    def _content_error(self, what: str, error: str) -> None:
        """Unusable content keeps the last good value: an error line once per distinct
        problem, not at every re-list (once a minute) or watch reconnect."""
        if self._content_errors.get(what) == error:
            logger.debug("configmap %s/%s: still keeping the last good %s", NAMESPACE, NAME, what)
            return
        self._content_errors[what] = error
        logger.error("configmap %s/%s: keeping the last good %s: %s", NAMESPACE, NAME, what, error)

    def apply(self, data: dict[str, str] | None) -> None:
        """Apply one version of the ConfigMap's data (None: it does not exist)."""
        if data is None:
            self._logged = None
            if self._client_ca and self._trust.snapshot.client_ca:
                logger.warning("configmap %s/%s is gone: clearing its client CA", NAMESPACE, NAME)
            if self._requestheader and self._trust.snapshot.requestheader is not None:
                logger.warning(
                    "configmap %s/%s is gone: no front proxy is trusted", NAMESPACE, NAME
                )
            if self._client_ca:
                self._trust.set_client_ca(None)
            if self._requestheader:
                self._trust.set_requestheader(None)
            return
        if self._client_ca:
            pem = data.get("client-ca-file", "")
            try:
                self._trust.set_client_ca(load_bundle(pem.encode(), what="client-ca-file"))
            except CertificateError as err:
                self._content_error("client CA", str(err))
            else:
                self._content_errors.pop("client CA", None)
        if self._requestheader:
            try:
                settings = parse_requestheader(data)
            except (CertificateError, TrustConfigError, orjson.JSONDecodeError) as err:
                self._content_error("request-header settings", str(err))
            else:
                self._content_errors.pop("request-header settings", None)
                self._trust.set_requestheader(settings)
        self.applied += 1
        self._log_change(data)

    async def load_once(self) -> None:
        """One synchronous read at start-up (upstream `RunOnce`); raises `StartupError`."""
        try:
            document = await startup_call(
                lambda: self._client.get_json(OBJECT_PATH),
                what=f"cannot read ConfigMap {NAMESPACE}/{NAME}",
                connection=self._client.connection,
                fixes={403: FORBIDDEN_FIX},
            )
        except StartupError as error:
            cause = error.__cause__
            if isinstance(cause, KubeApiError) and cause.code == 404:
                logger.warning(
                    "configmap %s/%s not found: no client CA or front proxy trusted from it "
                    "until it appears",
                    NAMESPACE,
                    NAME,
                )
                self.apply(None)
                return
            if not self._tolerate:
                raise
            logger.warning(
                "%s; continuing without it (--authentication-tolerate-lookup-failure)",
                error.line(),
            )
            return
        self.apply(_data(document))

    async def follow(self) -> None:
        """List, then watch, forever; re-list at least every `resync_seconds`."""
        delay = 1.0
        while True:
            try:
                version = await self._list()
                delay = 1.0
                await self._watch(version)
            except asyncio.CancelledError:
                raise
            except GoneError:
                continue
            except Exception as err:  # any failure: log, back off, retry
                logger.warning(
                    "following configmap %s/%s: %s (retry in %.0fs)", NAMESPACE, NAME, err, delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _list(self) -> str:
        document = await self._client.get_json(LIST_PATH, {"fieldSelector": FIELD_SELECTOR})
        items = [item for item in document.get("items") or [] if _name(item) == NAME]
        self.apply(_data(items[0]) if items else None)
        return str((document.get("metadata") or {}).get("resourceVersion", ""))

    async def _watch(self, version: str) -> None:
        params = {
            "watch": "true",
            "fieldSelector": FIELD_SELECTOR,
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(self._resync),
        }
        async for event in self._client.watch(LIST_PATH, params, read_timeout=self._resync + 30):
            kind = event.get("type")
            obj = event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise GoneError(410, "Expired", str(obj.get("message", "")))
                raise KubeApiError(
                    int(obj.get("code") or 0),
                    str(obj.get("reason", "")),
                    str(obj.get("message", "")),
                )
            if kind == "BOOKMARK" or _name(obj) != NAME:
                continue
            self.apply(None if kind == "DELETED" else _data(obj))


def _name(obj: Any) -> str:
    return str(((obj or {}).get("metadata") or {}).get("name", ""))


def _data(obj: Any) -> dict[str, str]:
    data = (obj or {}).get("data") or {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
