"""Reading the `servers:` section of the configuration file (our addition to prometheus-adapter's
format): several Prometheus-compatible servers, each with its URL, CA, token file, client
certificate and headers; the `--prometheus-url` one is named `default`.

Owns that section; it must not connect to a server (`prometheus.client`). Cost: O(servers), at
start and on each reload.

PURE: no I/O.
"""

from __future__ import annotations

from custom_metrics_server.prometheus.config_fields import FieldReader
from custom_metrics_server.prometheus.rules import DEFAULT_SERVER, ConfigError, ServerConfig

__all__ = ["parse_servers"]


def parse_servers(
    raw: object, default: ServerConfig | None, warnings: list[str]
) -> dict[str, ServerConfig]:
    """The configured servers by name, the default one first when given."""
    servers: dict[str, ServerConfig] = {}
    if default is not None:
        servers[DEFAULT_SERVER] = default
    if raw is None:
        return servers
    if not isinstance(raw, list):
        raise ConfigError("servers: must be a list")
    for index, entry in enumerate(raw):
        reader = FieldReader(f"servers[{index}]", warnings)
        data = reader.mapping(entry, "server")
        reader.unknown(
            data,
            frozenset(
                {
                    "name",
                    "url",
                    "caFile",
                    "tokenFile",
                    "headers",
                    "insecureSkipVerify",
                    "clientCertFile",
                    "clientKeyFile",
                }
            ),
            "",
        )
        name = reader.string(data.get("name"), "name", required=True)
        url = reader.string(data.get("url"), "url", required=True)
        if not url.startswith(("http://", "https://")):
            raise reader.fail("url", f"must be an http:// or https:// URL, not {url!r}")
        if name in servers:
            raise reader.fail("name", f"{name!r} is defined twice")
        headers = reader.mapping(data.get("headers"), "headers")
        skip = data.get("insecureSkipVerify", False)
        if not isinstance(skip, bool):
            raise reader.fail("insecureSkipVerify", "must be true or false")
        servers[name] = ServerConfig(
            name=name,
            url=url,
            ca_file=reader.string(data.get("caFile"), "caFile") or None,
            token_file=reader.string(data.get("tokenFile"), "tokenFile") or None,
            headers=tuple((str(k), str(v)) for k, v in headers.items()),
            insecure_skip_verify=skip,
            client_cert_file=reader.string(data.get("clientCertFile"), "clientCertFile") or None,
            client_key_file=reader.string(data.get("clientKeyFile"), "clientKeyFile") or None,
        )
    return servers
