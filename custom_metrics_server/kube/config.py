"""Where kube-apiserver is and how to authenticate to it, loaded with the `kubernetes`
package's own loaders (kubeconfig or in-cluster service account) and reduced to plain values.

Only the loaders are used, and only by `load_connection`, which imports them when called: the
`kubernetes` package (about 0.2 s and 20 MiB to import) is loaded by a process that connects
to a cluster, never by one that only serves the demo. The request path never touches
`kubernetes` client models.
"""

from __future__ import annotations

import os
import ssl
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from custom_metrics_server.runtime.tls import client_context

SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


#: Handed to the kubeconfig loader when no temporary directory is writable: under /proc, so no
#: one (not even root) can create it, and writing inline data there fails with an OSError.
_NO_TEMP_DIR = "/proc/self/no-writable-temporary-directory"


class KubeConfigError(Exception):
    """No usable connection settings: `where` they were looked for, and `reason`."""

    def __init__(self, where: str, reason: str) -> None:
        super().__init__(f"cannot load Kubernetes connection settings from {where}: {reason}")
        self.where = where
        self.reason = reason


@dataclass
class Connection:
    """Everything needed to open HTTPS connections to kube-apiserver."""

    host: str
    ca_file: str | None = None
    verify: bool = True
    cert_file: str | None = None
    key_file: str | None = None
    token: str | None = None
    token_file: str | None = None
    tls_server_name: str | None = None
    #: where the settings came from, for messages: "kubeconfig /path", "in-cluster config"
    source: str = ""
    _token_cache: tuple[float, str] | None = field(default=None, repr=False)
    _header_line: tuple[str | None, bytes] = field(default=(None, b""), repr=False)

    def bearer_token(self) -> str | None:
        """The current bearer token; a token file is re-read every minute (bound tokens rotate)."""
        if self.token_file:
            now = time.monotonic()
            if self._token_cache is None or now - self._token_cache[0] > 60:
                self._token_cache = (now, Path(self.token_file).read_text().strip())
            return self._token_cache[1]
        return self.token

    def authorization_line(self) -> bytes:
        """`Authorization: Bearer <token>\r\n` of the current token, b"" without one, for the
        clients that write their own request heads (the lean HTTP/1.1 pool's); ValueError for a
        token that would break the head (CR, LF or NUL). O(1) while the token is unchanged."""
        token = self.bearer_token()
        if token != self._header_line[0]:
            if token and any(char in token for char in "\r\n\x00"):
                raise ValueError("the bearer token has a line break or NUL")
            line = f"Authorization: Bearer {token}\r\n".encode() if token else b""
            self._header_line = (token, line)
        return self._header_line[1]

    def ssl_context(self) -> ssl.SSLContext:
        """Client TLS context: the cluster CA (or the system store) and the client certificate."""
        return client_context(
            self.ca_file,
            insecure=not self.verify,
            cert_file=self.cert_file if self.key_file else None,
            key_file=self.key_file,
        )


def load_connection(kubeconfig: str | None = None, *, context: str | None = None) -> Connection:
    """From `kubeconfig` (or `$KUBECONFIG`, or `~/.kube/config`), else in-cluster."""
    # Imported here, not at the top: see the module docstring.
    from kubernetes.client import Configuration  # noqa: PLC0415
    from kubernetes.config import incluster_config, kube_config  # noqa: PLC0415
    from kubernetes.config.config_exception import ConfigException  # noqa: PLC0415

    configuration = Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG")
    in_cluster = path is None and "KUBERNETES_SERVICE_HOST" in os.environ
    where = "the in-cluster service account" if in_cluster else (path or "~/.kube/config")
    if path and ":" not in path and not Path(path).is_file():
        # The loader says "No configuration found." for a missing file; say what is wrong.
        reason = "is a directory" if Path(path).is_dir() else "no such file"
        raise KubeConfigError(where, reason)
    no_temp: OSError | None = None
    try:
        if in_cluster:
            incluster_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            # Inline data (certificate-authority-data, ...) is written to temporary files by the
            # loader; keep them in a private directory. A read-only root without a writable
            # TMPDIR has none: a kubeconfig without inline data still loads then, one with it
            # fails below with a line saying so (the loader creates this path only when it
            # has data to write, and no one can create it).
            try:
                temp_dir = tempfile.mkdtemp(prefix="cms-kubeconfig-")
            except OSError as err:
                no_temp, temp_dir = err, _NO_TEMP_DIR
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
                temp_file_path=temp_dir,
            )
    except OSError as err:
        if no_temp is None:
            raise KubeConfigError(where, " ".join(str(err).split())) from err
        raise KubeConfigError(
            where,
            f"its inline certificate or key data must be written to a temporary directory and "
            f"none is writable ({no_temp}): set TMPDIR to a writable directory (an emptyDir "
            "volume when the root filesystem is read-only), or name the files in the kubeconfig "
            "(certificate-authority, client-certificate, client-key)",
        ) from err
    except (ConfigException, TypeError, ValueError, yaml.YAMLError) as err:
        raise KubeConfigError(where, " ".join(str(err).split())) from err
    token = None
    authorization = configuration.api_key.get("authorization") or configuration.api_key.get(
        "BearerToken"
    )
    if authorization:
        token = authorization.removeprefix("Bearer ").strip()
    return Connection(
        host=configuration.host.rstrip("/"),
        ca_file=configuration.ssl_ca_cert,
        verify=bool(configuration.verify_ssl),
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        token=None if in_cluster else token,
        token_file=str(SERVICE_ACCOUNT_TOKEN) if in_cluster else None,
        tls_server_name=configuration.tls_server_name,
        source="the in-cluster service account" if in_cluster else f"kubeconfig {where}",
    )
