"""Delegated authentication and authorization, and the TLS plumbing they rest on.

The package turns a connection (its verified client certificate, if any) and a request (its
headers, method, path and query) into an allow/deny decision the way k8s.io/apiserver's
delegating authenticator and authorizer do, and keeps the trust material (client CA,
front-proxy CA, request-header settings, serving certificate) fresh without a restart.

Modules, lowest first: `requestinfo` (pure RequestInfo port), `certs` (X.509 checks), `trust`
(the versioned trust material), `cache` (TTL caches, single flight), `webhook` (retrying
TokenReview/SubjectAccessReview calls), `authn`, `authz`, `extension_config` (the
`extension-apiserver-authentication` ConfigMap follower), `tls_peer` (uvicorn protocol that
puts the peer certificate in the ASGI scope), `gate` (what the ASGI app calls per request) and
`options` (flags, and `build_security` for the CLI). Nothing here renders metrics or touches
backends; nothing imports `app`, `endpoints` or `cli`.
"""
